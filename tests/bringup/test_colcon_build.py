"""The robot-PC path: colcon builds ros2_ws (its src/ links to this package) into a fresh prefix.

Checks what ``ros2 run`` / ``ros2 launch`` rely on: executables in
``lib/libero_workcell/``, launch and config files in the share dir, the ament
index marker, and an ``install/setup.bash`` that sets AMENT_PREFIX_PATH and
PYTHONPATH so the installed copy (not the editable one) runs and finds its
graph in the share dir.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REPO, TEST_OUTPUT

pytestmark = pytest.mark.slow

PKG = "libero_workcell"
PY = f"python{sys.version_info.major}.{sys.version_info.minor}"


def _console_scripts() -> list[str]:
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    return [item.split("=", 1)[0].strip() for item in ast.literal_eval(value)]
    raise AssertionError("no console_scripts in setup.py")


@pytest.fixture(scope="module")
def colcon_install(tmp_path_factory) -> Path:
    colcon = Path(sys.executable).parent / "colcon"
    if not colcon.is_file():
        pytest.skip("colcon is not installed (scripts/bootstrap.sh --dev)")
    assert (REPO / "ros2_ws" / "src" / PKG).resolve() == REPO
    base = tmp_path_factory.mktemp("colcon")
    started = time.monotonic()
    build = subprocess.run(
        [str(colcon), "--log-base", str(base / "log"), "build", "--base-paths", "ros2_ws/src",
         "--build-base", str(base / "build"), "--install-base", str(base / "install")],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )
    elapsed = time.monotonic() - started
    TEST_OUTPUT.mkdir(exist_ok=True)
    (TEST_OUTPUT / "colcon_build.txt").write_text(f"colcon build: {elapsed:.1f} s, exit {build.returncode}\n"
                                                   + build.stdout + build.stderr)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    # exactly this package: colcon must not crawl into .venv, ros2_ws or earlier build trees
    started_pkgs = [line.split()[-1] for line in build.stdout.splitlines() if line.startswith("Starting >>>")]
    assert started_pkgs == [PKG], started_pkgs
    assert sorted(p.name for p in (base / "install").iterdir() if p.is_dir()) == [PKG]
    return base / "install"


def test_executables_land_in_lib_pkg(colcon_install):
    lib = colcon_install / PKG / "lib" / PKG
    for script in _console_scripts():
        path = lib / script
        assert path.is_file(), f"{script} missing from {lib}"
        assert path.stat().st_mode & 0o111, f"{script} is not executable"


def test_share_files_and_ament_index(colcon_install):
    prefix = colcon_install / PKG
    share = prefix / "share" / PKG
    for rel in ("package.xml", "launch/sim_workcell.launch.py", "config/workcell.yaml"):
        assert (share / rel).is_file(), rel
    assert (prefix / "share" / "ament_index" / "resource_index" / "packages" / PKG).is_file()
    site = prefix / "lib" / PY / "site-packages" / PKG
    assert (site / "resources" / "fastdds_loopback.xml").is_file()  # package data travels with the code


def _in_sourced_env(install: Path, command: str) -> subprocess.CompletedProcess[str]:
    script = f"unset AMENT_PREFIX_PATH PYTHONPATH; source {install}/setup.bash && {command}"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=120)


def test_setup_bash_sets_ament_prefix_path(colcon_install):
    result = _in_sourced_env(colcon_install, 'echo "AMENT=$AMENT_PREFIX_PATH"; echo "PYTHONPATH=$PYTHONPATH"')
    assert result.returncode == 0, result.stderr
    lines = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert str(colcon_install / PKG) in lines["AMENT"].split(":")
    assert str(colcon_install / PKG / "lib" / PY / "site-packages") in lines["PYTHONPATH"].split(":")


def test_installed_workcell_runs_from_the_install(colcon_install):
    exe = colcon_install / PKG / "lib" / PKG / "workcell"
    result = _in_sourced_env(colcon_install, f"{exe} --help && {exe} bringup --dry-run use_sim:=false")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bringup" in result.stdout and "demo" in result.stdout
    graph = colcon_install / PKG / "share" / PKG / "config" / "workcell.yaml"
    assert f"workcell: graph {graph}" in result.stdout  # found through the ament index, not the source tree
    assert "node sim_world" not in result.stdout and "node aubo_bridge" in result.stdout
    code = "import libero_workcell.dds as d; print(d.profile_path())"
    probe = _in_sourced_env(colcon_install, f"{sys.executable} -c '{code}'")
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.strip().startswith(str(colcon_install / PKG)), probe.stdout
