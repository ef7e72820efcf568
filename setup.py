"""ament_python package for the LIBERO-Industry workcell.

Installs with pip (development, CI) and with colcon on a robot PC. The
Python packages live in ``src/`` (one folder per device plus the shared
``libero_workcell`` core) and in ``sim_bridge/`` (the simulated workcell).
"""

from glob import glob

from setuptools import find_packages, setup

PACKAGE = "libero_workcell"

packages = find_packages("src") + ["sim_bridge"] + [f"sim_bridge.{p}" for p in find_packages("sim_bridge")]

setup(
    name=PACKAGE,
    version="0.1.0",
    packages=packages,
    package_dir={"": "src", "sim_bridge": "sim_bridge"},
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
            "sim_world = sim_bridge.world_node:main",
            "aubo_bridge = aubo_bridge.node:main",
            "conveyor_driver = conveyor_driver.node:main",
            "camera_driver = camera_driver.node:main",
            "scripted_expert = sim_bridge.expert_node:main",
            "demo_replay = sim_bridge.replay_node:main",
            "teleop_pico = teleop_pico.node:main",
            "recorder = recorder.node:main",
            "session_log = session_log.node:main",
            "console = console.node:main",
            "foxglove_bridge = session_log.foxglove_node:main",
            "policy_node = policy_node.node:main",
            "policy_server = sim_bridge.policy_server_node:main",
            "workcell = workcell.cli:main",
        ],
    },
)
