"""Every file path the docs, the README and the code's docstrings and comments name exists in the repository: a
renamed or deleted file leaves no pointer to nothing behind, and nothing points outside the repository.

A path is looked for from the repository's root, from src/, from the naming file's folder, and as the end of a
path in the repository (``backends/arcs.py`` in a paragraph about ``src/aubo_bridge/``). A path in another
project (openpi's, robosuite's), or one a run writes, is listed in ELSEWHERE with where it lives.
"""

from __future__ import annotations

import os
import re
from functools import cache
from pathlib import Path

from conftest import REPO, TOP_PACKAGES

SCANNED = ("docs", "src", *TOP_PACKAGES, "bench", "tests", "scripts", "launch", "config", "tools", ".ci")
SUFFIXES = {".py", ".md", ".sh", ".yaml", ".yml", ".toml", ".txt"}
SKIPPED = {".venv", ".git", "test-output", "build", "install", "log", "__pycache__", "node_modules"}
# a relative path with a folder and a file name of a kind the repository holds (../ included: it must not leave)
PATH = re.compile(
    r"(?<![\w./:@-])((?:\.\./)*[A-Za-z_][\w.-]*(?:/[\w.-]+)+\."
    r"(?:py|md|yaml|yml|json|sh|npz|toml|txt|urdf|xml|msg|srv))(?![\w/])"
)
ELSEWHERE = {  # path (or a prefix ending in /) -> where it lives
    "scripts/serve_policy.py": "openpi",
    "scripts/train.py": "openpi",
    "scripts/compute_norm_stats.py": "openpi",
    "src/openpi/training/config.py": "openpi",
    "examples/libero/main.py": "openpi",
    "controllers/config/osc_pose.json": "robosuite 1.4.0",
    "robots/panda/robot.xml": "robosuite 1.4.0",
    "grippers/panda_gripper.xml": "robosuite 1.4.0",
    "models/assets/base.xml": "robosuite 1.4.0",
    "robosuite/__init__.py": "robosuite 1.4.0",
    "launch_ros/actions/node.py": "launch_ros",
    "rosdep/base.yaml": "ros/rosdistro",
    "urdf/aubo_i5H.urdf": "AuboRobot/aubo_description",
    "OUT/": "a conversion's output folder (docs' placeholder)",
    "HOME/": "the operator's home (docs' placeholder)",
    "bench-output/": "what bench/run.py writes",
    "aubo_demos/": "a conversion's output folder (an example run)",
    "lerobot/d2s/": "the LeRobot export's output folder",
    "preferences/report.html": "an evaluation's output folder",
}


def walk(top: Path) -> list[Path]:
    """Every file and folder under ``top``, but in SKIPPED folders."""
    out = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in SKIPPED]
        out += [Path(folder, name) for name in (*dirs, *files)]
    return out


def scanned_files() -> list[Path]:
    tops = [REPO / top for top in SCANNED]
    return [REPO / "README.md"] + [p for top in tops for p in walk(top) if p.suffix in SUFFIXES and p.is_file()]


@cache
def repository_paths() -> tuple[str, ...]:
    """Every file and folder of the repository, as '/'-led relative paths (for the ends-with lookup)."""
    return tuple("/" + p.relative_to(REPO).as_posix() for p in walk(REPO))


def resolves(named: str, where: Path) -> bool:
    for base in (REPO, REPO / "src", where.parent):
        candidate = (base / named).resolve()
        if candidate.is_relative_to(REPO) and candidate.exists():
            return True
    if named.startswith("../"):
        return False  # never by its ending: it says where it is
    return any(p.endswith("/" + named) for p in repository_paths())


def elsewhere(named: str) -> bool:
    return any(named == k or (k.endswith("/") and named.startswith(k)) for k in ELSEWHERE)


def dangling() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for f in scanned_files():
        if f == Path(__file__).resolve():
            continue
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for m in PATH.finditer(line):
                named = m.group(1)
                if not elsewhere(named) and not resolves(named, f):
                    found.setdefault(named, []).append(f"{f.relative_to(REPO)}:{n}")
    return found


def test_every_path_the_docs_and_the_code_name_is_in_the_repository() -> None:
    assert dangling() == {}


def test_a_renamed_file_or_one_outside_the_repository_is_found(tmp_path, monkeypatch) -> None:
    """The check itself: a pointer to a file that is gone, or to one beside the repository, is reported; one to a
    file by the end of its path, or listed as living elsewhere, is not."""
    doc = REPO / "docs" / "architecture.md"
    assert resolves("process/driver_host.py", doc)  # src/aubo_bridge/process/driver_host.py
    assert resolves("libero_workcell/contract.py", doc)  # from src/
    assert not resolves("tests/evaluation/test_warm_graph.py", doc)
    assert not resolves("../shared/HARDWARE.md", doc)  # beside the repository: not in it, whatever is there
    assert elsewhere("scripts/serve_policy.py") and elsewhere("OUT/summary.json")
    assert not elsewhere("scripts/bootstrap.sh") and resolves("scripts/bootstrap.sh", doc)
    line = "see `../shared/HARDWARE.md`, tests/evaluation/test_warm_graph.py and https://example.org/a/b.py"
    assert [m.group(1) for m in PATH.finditer(line)] == ["../shared/HARDWARE.md", "tests/evaluation/test_warm_graph.py"]
