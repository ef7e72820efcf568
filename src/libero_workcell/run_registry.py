"""Where a running graph can be found: its DDS domain, announced by the process that started it.

Why: each graph runs on loopback DDS on a domain of its own (``libero_workcell.dds``), so a second shell,
the operator's ``workcell call`` / ``status``, must join that domain to reach the graph. ``workcell bringup``
and the launch files record each graph they start in a small JSON file under the user's runtime directory
(``$XDG_RUNTIME_DIR/libero_workcell``, else ``/tmp/libero_workcell-UID``), removed when the graph stops;
a record whose process is gone is ignored (and cleaned up).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from libero_workcell.processes import pid_alive


@dataclass(frozen=True)
class GraphRecord:
    domain_id: int
    pid: int  # the process that started the graph (workcell bringup, ros2 launch)
    started: float  # time.time()
    use_sim: bool
    job: str = ""
    cell: str = ""
    nodes: tuple[str, ...] = ()  # the nodes it started (what `workcell status` waits to hear from)

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))  # a list, read back from JSON


def runs_dir() -> Path:
    base = os.environ.get("XDG_RUNTIME_DIR")
    root = Path(base) / "libero_workcell" if base else Path(tempfile.gettempdir()) / f"libero_workcell-{os.getuid()}"
    return root / "graphs"


def announce(record: GraphRecord) -> Path:
    """Record a graph that just started (replaced if its process records another)."""
    folder = runs_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = folder / f"{record.pid}.json"
    tmp = path.with_suffix(".writing")
    tmp.write_text(json.dumps(asdict(record)), encoding="utf-8")
    os.replace(tmp, path)
    return path


def withdraw(pid: int | None = None) -> None:
    """Remove the record of the graph started by ``pid`` (default: this process)."""
    with contextlib.suppress(FileNotFoundError):
        (runs_dir() / f"{pid or os.getpid()}.json").unlink()


def running() -> list[GraphRecord]:
    """The graphs whose starting process still runs, newest first (stale records are removed)."""
    out = []
    for path in _records():
        try:
            record = GraphRecord(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            continue
        if pid_alive(record.pid):
            out.append(record)
        else:
            with contextlib.suppress(OSError):
                path.unlink()
    return sorted(out, key=lambda r: r.started, reverse=True)


def _records() -> Iterator[Path]:
    folder = runs_dir()
    if folder.is_dir():
        yield from folder.glob("*.json")


def newest() -> GraphRecord | None:
    """The most recently started graph that still runs, or None."""
    runs = running()
    return runs[0] if runs else None
