"""Where the package's own config files are (graph files, teleop sessions, the preference catalogue), wherever
it is installed: the source tree, a colcon install (ament index) or a pip install. Every node runs in its own
working directory, so a file the graph names is found here, not relative to it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "libero_workcell"  # the ROS package (package.xml, ament index, share/<PACKAGE>/config)


def _source_root() -> Path | None:
    """The repository root when running from the source tree (editable install, tests)."""
    root = Path(__file__).resolve().parents[2]
    manifest = root / "package.xml"
    if manifest.is_file() and f"<name>{PACKAGE}</name>" in manifest.read_text(encoding="utf-8"):
        return root
    return None


def _config_dirs() -> Iterator[Path]:
    """Where graph files live, in order: the source tree, the colcon share dir
    (ament index), ``sys.prefix/share`` (plain pip install). Lazy: the ament
    index is consulted only when the source tree has no config/.
    """
    if (root := _source_root()) is not None:
        yield root / "config"
    try:
        from ament_index_python.packages import get_package_share_directory

        yield Path(get_package_share_directory(PACKAGE)) / "config"
    except (ImportError, LookupError, OSError, ValueError):  # no index / AMENT_PREFIX_PATH unset
        pass
    yield Path(sys.prefix) / "share" / PACKAGE / "config"


def find_config_file(name: str | os.PathLike[str]) -> Path:
    """A file the graph names: an existing path as given (absolute, or from the working directory), else
    ``config/...`` in the first of :func:`_config_dirs` that has it (the package's own config files, wherever
    it is installed: every node runs in its own working directory)."""
    given = Path(name)
    if given.is_file():
        return given.resolve()
    return package_config_file(given)


def package_config_file(name: str | os.PathLike[str]) -> Path:
    """``config/...`` in the first of :func:`_config_dirs` that has it: the package's own file, never one of the
    working directory's."""
    given = Path(name)
    parts = given.parts[1:] if given.parts[:1] == ("config",) else given.parts
    searched = []
    for config in _config_dirs():
        candidate = config.joinpath(*parts)
        if candidate.is_file():
            return candidate
        searched.append(str(candidate))
    raise FileNotFoundError(f"{given} not found as given nor in: " + ", ".join(searched))
