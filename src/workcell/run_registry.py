"""Where a running graph can be found: its name and DDS domain, announced by the process that started it.

Why: each graph runs on loopback DDS on a domain of its own (``libero_workcell.dds``), so a second shell,
the operator's ``workcell call`` / ``status``, must join that domain to reach the graph, and with several
graphs on one machine it must know which one it reaches. ``workcell bringup`` and the launch files claim the
graph's domain machine-wide (:func:`claim_graph_domain`: the lock the evaluation workers take too) and record
each graph they start in a small JSON file under the user's runtime directory (``$XDG_RUNTIME_DIR/libero_workcell``,
else ``/tmp/libero_workcell-UID``), removed when the graph stops; a record whose process is gone is ignored (and
cleaned up).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from libero_workcell import dds
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
    name: str = ""  # what an operator names it by (`workcell call --name NAME`); unique among running graphs

    def __post_init__(self) -> None:
        object.__setattr__(self, "nodes", tuple(self.nodes))  # a list, read back from JSON

    def describe(self) -> str:
        """``NAME (job JOB, ROS_DOMAIN_ID N, started HH:MM:SS, pid P)``: which graph, in one line."""
        job = f"job {self.job}, " if self.job else ""
        return f"{self.name or '(unnamed)'} ({job}ROS_DOMAIN_ID {self.domain_id}, started {_when(self.started)}, " \
               f"pid {self.pid})"  # fmt: skip


def _when(started: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))


def table(records: Sequence[GraphRecord]) -> str:
    """The graphs as an operator picks one: name, job, domain, started."""
    rows = [("name", "job", "domain", "started")]
    rows += [(r.name or "(unnamed)", r.job or "-", str(r.domain_id), _when(r.started)) for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def unique_name(base: str, domain_id: int) -> str:
    """``base`` if no other running graph has that name, else ``base-DOMAIN`` (the domain is this graph's alone)."""
    taken = any(r.name == base and r.pid != os.getpid() for r in running())  # (this process's record is replaced)
    return f"{base}-{domain_id}" if taken else base


def claim_graph_domain(explicit: int | None = None, environ: Mapping[str, str] | None = None) -> dds.DomainClaim:
    """:func:`libero_workcell.dds.claim_graph_domain`, its refusal naming the running graph that holds the domain
    and what to do."""
    try:
        return dds.claim_graph_domain(explicit, environ)
    except dds.DomainHeldError as exc:
        holder = next((r for r in running() if r.domain_id == exc.domain_id), None)
        how = "--domain-id" if explicit is not None else "the inherited ROS_DOMAIN_ID"
        who = f"graph {holder.describe()}" if holder else "another process on this machine (a graph or a worker)"
        raise dds.DomainHeldError(exc.domain_id, f"ROS_DOMAIN_ID {exc.domain_id} ({how}) is held by {who}: a graph "
                                  "never joins another's; give another --domain-id, or unset ROS_DOMAIN_ID for a "
                                  "free one") from None  # fmt: skip


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
