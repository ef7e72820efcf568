"""A robot PC's prerequisites stay true: every third-party module the stack imports is either a rosdep key in
package.xml or a PyPI package the install section of docs/bringup.md names."""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET

from conftest import CODE_FOLDERS, REPO, TOP_PACKAGES

# module -> the rosdep key that installs it (rosdistro's rosdep/base.yaml and python.yaml)
ROSDEP = {
    "rclpy": "rclpy", "std_msgs": "std_msgs", "std_srvs": "std_srvs", "sensor_msgs": "sensor_msgs",
    "geometry_msgs": "geometry_msgs", "diagnostic_msgs": "diagnostic_msgs", "rosgraph_msgs": "rosgraph_msgs",
    "rcl_interfaces": "rcl_interfaces", "builtin_interfaces": "rcl_interfaces", "ament_index_python":
    "ament_index_python", "launch": "launch", "launch_ros": "launch_ros", "numpy": "python3-numpy",
    "scipy": "python3-scipy", "yaml": "python3-yaml", "h5py": "python3-h5py", "transforms3d": "python3-transforms3d",
    "cv2": "python3-opencv", "tqdm": "python3-tqdm", "matplotlib": "python3-matplotlib", "serial": "python3-serial",
    "pymodbus": "python3-pymodbus", "msgpack": "python3-msgpack", "websockets": "python3-websockets",
}  # fmt: skip
# module -> the PyPI package (no rosdep key)
PIP_ONLY = {"mujoco": "mujoco", "pyaubo_sdk": "pyaubo-sdk", "pyrealsense2": "pyrealsense2",
            "xrobotoolkit_sdk": "xrobotoolkit-sdk", "openpi_client": "openpi-client", "openpi_server": "openpi-server",
            "mcap": "mcap", "mcap_ros2": "mcap-ros2-support", "foxglove": "foxglove-sdk",
            "fastapi": "fastapi", "starlette": "fastapi", "uvicorn": "uvicorn", "pydantic": "pydantic",
            "numba": "numba"}  # fmt: skip
# only for tools, benchmarks and the training export (their own requirements files): not the robot PC's
OPTIONAL = {"lerobot", "datasets", "torch", "torchvision", "PIL", "typing_extensions", "ray", "playwright",
            "hypothesis", "pytest"}  # fmt: skip


def _third_party_imports() -> set[str]:
    ours = {p.name for p in (REPO / "src").iterdir() if p.is_dir()} | {*TOP_PACKAGES, "libero_workcell"}
    found: set[str] = set()
    for folder in CODE_FOLDERS:
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                else:
                    continue
                found |= {n.split(".")[0] for n in names}
    return {m for m in found - ours if m not in sys.stdlib_module_names and m != "__future__"}


def test_every_imported_package_is_declared_for_rosdep_or_named_for_pip():
    declared = {e.text for e in ET.parse(REPO / "package.xml").getroot() if e.tag.endswith("depend")}
    install = (REPO / "docs" / "bringup.md").read_text().split("## 0. Install", 1)[1].split("## 1.", 1)[0]
    imported = _third_party_imports()
    unknown = imported - set(ROSDEP) - set(PIP_ONLY) - OPTIONAL
    assert not unknown, f"imported but neither declared nor documented: {sorted(unknown)}"
    missing = {ROSDEP[m] for m in imported & set(ROSDEP)} - declared
    assert not missing, f"package.xml does not declare {sorted(missing)}"
    undocumented = {PIP_ONLY[m] for m in imported & set(PIP_ONLY) if PIP_ONLY[m] not in install}
    assert not undocumented, f"docs/bringup.md's install section does not name {sorted(undocumented)}"


def test_the_packages_tests_import_are_this_checkouts_own_regular_packages() -> None:
    """A test area named like a package (tests/console) must not stand in for it: CI found the console's page
    under tests/ once, and the packages' __init__ never ran. Checked here and in a child that inherits the path,
    as the graph's nodes do."""
    import importlib
    import os
    import subprocess

    names = sorted(p.name for p in (REPO / "src").iterdir() if (p / "__init__.py").is_file()) + [*TOP_PACKAGES]
    expected = {n: str((REPO / "src" / n / "__init__.py") if n not in TOP_PACKAGES else REPO / n / "__init__.py")
                for n in names}  # fmt: skip
    here = {n: getattr(importlib.import_module(n), "__file__", None) for n in names}
    assert here == expected
    script = "import importlib, json, sys; print(json.dumps({n: getattr(importlib.import_module(n), '__file__', None)" \
             " for n in sys.argv[1:]}))"  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", script, *names], capture_output=True, text=True, timeout=60,
                         env=env, cwd=REPO / "tests")  # fmt: skip
    assert out.returncode == 0, out.stderr
    import json

    assert json.loads(out.stdout) == expected
