"""ament_python package for the LIBERO-Industry workcell.

Installs with pip (development, CI) and with colcon on a robot PC. The
Python packages live in ``src/`` (one folder per device plus the shared
``libero_workcell`` core) and beside it: ``sim_cell/`` (the simulated workcell) and ``sim_bridge/`` (the
Panda-to-AUBO bridge and the data made on the simulated cell).
"""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "libero_workcell"

TOP_FOLDERS = ("sim_cell", "sim_bridge")  # packages beside src/: the simulated cell and the data made on it
packages = find_packages("src") + [f"{top}.{p}".rstrip(".") for top in TOP_FOLDERS for p in ["", *find_packages(top)]]

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=packages,
    package_dir={"": "src", **{top: top for top in TOP_FOLDERS}},
    package_data={"libero_workcell": ["py.typed", "resources/*.xml"], "console": ["page/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.xml") + glob("config/*.json")),
        (f"share/{PACKAGE}/config/teleop", glob("config/teleop/*.json")),
        (f"share/{PACKAGE}/config/preferences", glob("config/preferences/*")),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    python_requires=">=3.10",
    entry_points={
        "console_scripts": [
            "sim_world = sim_cell.world_node:main",
            "aubo_bridge = aubo_bridge.node:main",
            "conveyor_driver = conveyor_driver.node:main",
            "camera_driver = camera_driver.node:main",
            "scripted_expert = sim_cell.expert_node:main",
            "demo_replay = sim_cell.replay_node:main",
            "teleop_pico = teleop_pico.node:main",
            "recorder = recorder.node:main",
            "session_log = session_log.node:main",
            "console = console.node:main",
            "foxglove_bridge = session_log.foxglove_node:main",
            "policy_node = policy_node.node:main",
            "policy_server = sim_cell.policy_server_node:main",
            "workcell = workcell.cli:main",
        ],
    },
)
