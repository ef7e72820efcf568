"""The layers contract (pyproject.toml, docs/architecture.md) holds, and it bites: an import that points up fails
`lint-imports` with a message naming it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO

LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root / 'src'}{os.pathsep}{root}"}
    return subprocess.run([str(LINT), "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_tree_keeps_its_layers():
    result = lint(REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 kept, 0 broken" in result.stdout


def test_an_import_that_points_up_fails_the_check_and_is_named(tmp_path):
    copy = tmp_path / "repo"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "src", copy / "src", ignore=ignore)
    shutil.copytree(REPO / "sim_bridge", copy / "sim_bridge", ignore=ignore)
    shutil.copy(REPO / "pyproject.toml", copy)
    contract = copy / "src" / "libero_workcell" / "contract.py"
    upward = "\nfrom workcell import bringup  # noqa: E402 (up: the contract on bring-up)\n"
    contract.write_text(contract.read_text() + upward)
    result = lint(copy)
    assert result.returncode == 1, result.stdout
    assert "libero_workcell is not allowed to import workcell" in result.stdout
    assert "libero_workcell.contract -> workcell.bringup" in result.stdout
