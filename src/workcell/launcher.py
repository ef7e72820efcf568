"""A small process launcher for machines without ``launch_ros`` (CI, the demo, tests).

Why: launch/launch_ros have no PyPI wheels, yet the same graph must run here.
Each node runs as ``python -m <module> --ros-args -r __node:=<name>
--params-file <file>`` in its own process group, so Ctrl-C reaches only this
launcher, which then shuts the nodes down in order: SIGINT (rclpy's clean
shutdown), then SIGTERM, then SIGKILL. Output goes to one log file per node
and, optionally, to a stream with a ``[name]`` prefix per line. A node that
dies is reported with its exit code and last log lines. A node is up once it
printed its ``processes.NODE_UP`` line (built and spinning): :class:`NodesUp`
shows the count while a graph comes up.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TextIO

import yaml

from libero_workcell.processes import NODE_UP, die_with_parent, killed_by
from libero_workcell.progress import progress_bar

TAIL_LINES = 30


class NodeLike(Protocol):
    """What the launcher needs of a node (``bringup.NodeSpec`` has it)."""

    name: str
    module: str
    parameters: Mapping[str, Any]


def ros_params_yaml(spec: NodeLike) -> str:
    """``spec.parameters`` as a ROS 2 parameters file (``--params-file``) for that node."""
    return yaml.safe_dump({f"/{spec.name}": {"ros__parameters": dict(spec.parameters)}}, sort_keys=False)


@dataclass(frozen=True)
class NodeExit:
    """A node process that has ended: its exit code (negative: killed by that signal) and last lines."""

    name: str
    returncode: int
    tail: tuple[str, ...]
    log_path: Path | None = None

    def describe(self) -> str:
        sig = killed_by(self.returncode)
        how = f"was killed by {sig}" if sig else f"exited with code {self.returncode}"
        lines = "\n".join(f"    {line}" for line in self.tail) or "    (no output)"
        where = f" (log: {self.log_path})" if self.log_path else ""
        return f"node {self.name} {how}{where}; last lines:\n{lines}"


class NodeDiedError(RuntimeError):
    """One or more nodes ended while the graph should be running."""

    def __init__(self, exits: Sequence[NodeExit]):
        self.exits = tuple(exits)
        super().__init__("\n".join(e.describe() for e in self.exits))

    def __reduce__(self):  # crosses process boundaries whole (an evaluation worker's trial): rebuilt from the exits
        return (type(self), (self.exits,))


class _Child:
    """One node process, its log file and the thread that copies its output."""

    def __init__(self, spec: NodeLike, cmd: list[str], env: Mapping[str, str], log_path: Path | None,
                 echo: TextIO | None, echo_lock: threading.Lock):
        self.name = spec.name
        self.log_path = log_path
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)
        self.up = False  # it printed its NODE_UP line
        self.signals: list[str] = []  # what the launcher sent it to stop it, in order
        self._echo, self._echo_lock = echo, echo_lock
        self._log = open(log_path, "w", encoding="utf-8", buffering=1) if log_path else None  # noqa: SIM115
        # Started from the main thread (bring-up, an evaluation worker), a node ends with its launcher however the
        # launcher ends (kill -9 included): SIGTERM, its clean shutdown. From another thread it would end with that
        # thread (prctl's rule), so there it does not.
        guard = die_with_parent if threading.current_thread() is threading.main_thread() else None
        self.proc = subprocess.Popen(cmd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=guard)
        self._reader = threading.Thread(target=self._pump, name=f"log-{self.name}", daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.tail.append(line)
            self.up = self.up or line.startswith(NODE_UP)
            if self._log:
                self._log.write(line + "\n")
            if self._echo:
                with self._echo_lock, contextlib.suppress(ValueError, OSError):
                    self._echo.write(f"[{self.name}] {line}\n")
                    self._echo.flush()

    def signal(self, sig: signal.Signals) -> None:
        """Signal the node's process group (the node and anything it started)."""
        if self.proc.poll() is None:
            self.signals.append(sig.name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)

    def finish_output(self, timeout: float = 2.0) -> None:
        """Its output copied to the end, and for a node that ended badly a last line of ours saying how, in its
        log: a crash (SIGSEGV) or a node that had to be killed leaves no words of its own."""
        self._reader.join(timeout)
        if self._log and not self._reader.is_alive():
            code = self.proc.poll()
            if code:
                how = f"signal {sig}" if (sig := killed_by(code)) else f"code {code}"
                sent = f" after {', '.join(self.signals)}" if self.signals else ""
                self._log.write(f"launcher: {self.name} exited with {how}{sent}\n")
            self._log.close()

    def exit_info(self) -> NodeExit | None:
        code = self.proc.poll()
        if code is None:
            return None
        self._reader.join(0.5)  # let the last lines arrive
        return NodeExit(self.name, code, tuple(self.tail), self.log_path)


class RunningGraph:
    """Handle on launched nodes. Use as a context manager: leaving it stops every node."""

    def __init__(self, children: list[_Child], tmpdir: tempfile.TemporaryDirectory[str] | None):
        self._children = children
        self._tmpdir = tmpdir
        self._stopped = False

    @property
    def names(self) -> list[str]:
        return [c.name for c in self._children]

    @property
    def pids(self) -> dict[str, int]:
        return {c.name: c.proc.pid for c in self._children}

    def up(self) -> list[str]:
        """The nodes that are up: built and spinning (each printed its NODE_UP line)."""
        return [c.name for c in self._children if c.up]

    def tail(self, name: str) -> list[str]:
        """The node's last output lines (up to TAIL_LINES), oldest first."""
        return list(next(c for c in self._children if c.name == name).tail)

    def alive(self) -> bool:
        """True while every node is still running."""
        return all(c.proc.poll() is None for c in self._children)

    def exited(self) -> list[NodeExit]:
        """The nodes that have ended so far."""
        return [e for c in self._children if (e := c.exit_info()) is not None]

    def check(self) -> None:
        """Raise :class:`NodeDiedError` if any node has ended."""
        if exits := self.exited():
            raise NodeDiedError(exits)

    def wait(self, timeout: float | None = None, poll: float = 0.1, nodes_up: NodesUp | None = None,
             known: Collection[str] = ()) -> list[NodeExit]:  # fmt: skip
        """Block until a node ends (returns the ended ones, but for the ``known`` already told) or ``timeout`` s
        pass (returns []); ``nodes_up`` polled meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if nodes_up is not None:
                nodes_up.poll()
            if exits := [e for e in self.exited() if e.name not in known]:
                return exits
            if deadline is not None and time.monotonic() >= deadline:
                return []
            time.sleep(poll)

    def log_text(self, name: str) -> str:
        """Everything the node has logged so far (from its log file, else its tail)."""
        child = next(c for c in self._children if c.name == name)
        if child.log_path and child.log_path.is_file():
            return child.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(child.tail)

    def stop(self, timeout: float = 5.0, term_timeout: float = 2.0) -> dict[str, int]:
        """SIGINT every node, wait ``timeout`` s, then SIGTERM, wait, then SIGKILL. Returns exit codes."""
        for sig, wait_s in ((signal.SIGINT, timeout), (signal.SIGTERM, term_timeout), (signal.SIGKILL, 5.0)):
            running = [c for c in self._children if c.proc.poll() is None]
            if not running:
                break
            for child in running:
                child.signal(sig)
            deadline = time.monotonic() + wait_s
            for child in running:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.proc.wait(max(0.0, deadline - time.monotonic()))
        for child in self._children:
            child.finish_output()
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None
        self._stopped = True
        return {c.name: c.proc.returncode for c in self._children}

    def __enter__(self) -> RunningGraph:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._stopped:
            self.stop()


class NodesUp:
    """A progress bar of the graph's nodes up, "nodes up k/N" (libero_workcell.progress: stderr), while the graph
    comes up: :meth:`poll` it from the loop that waits on the graph; it closes itself once every node is up (then
    polling costs nothing), or at :meth:`close` (a node died, Ctrl-C), showing how many were up."""

    def __init__(self, graph: RunningGraph, file: TextIO | None = None, enabled: bool = True) -> None:
        self._graph = graph
        self._bar: Any = progress_bar(len(graph.names), "nodes up", "node", file=file, enabled=enabled)

    @property
    def done(self) -> bool:
        """Every node is up (or the bar was closed)."""
        return self._bar is None

    def poll(self) -> None:
        if self._bar is None:
            return
        up = len(self._graph.up())
        self._bar.update(up - self._bar.n)
        if up >= self._bar.total:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> NodesUp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def node_command(spec: NodeLike, params_file: Path, python: str = sys.executable) -> list[str]:
    """The command line that runs one node as its ``python -m`` module under its ROS name."""
    return [python, "-m", spec.module, "--ros-args", "-r", f"__node:={spec.name}", "--params-file", str(params_file)]


def launch(
    nodes: Sequence[NodeLike],
    env: Mapping[str, str] | None = None,
    log_dir: str | os.PathLike[str] | None = None,
    echo: TextIO | None = None,
    python: str = sys.executable,
) -> RunningGraph:
    """Start ``nodes`` in order and return at once (see :meth:`RunningGraph.wait` / ``check``).

    ``env`` is the full child environment (default: os.environ; pass
    :func:`libero_workcell.dds.loopback_env` for loopback DDS). With
    ``log_dir``, each node writes ``<name>.log`` and its ``<name>.params.yaml``
    there and ROS file logs go to ``<log_dir>/ros_log``; ``echo`` gets every
    output line prefixed with ``[name]``.
    """
    child_env = dict(os.environ if env is None else env)
    child_env["PYTHONUNBUFFERED"] = "1"  # lines reach the log as they happen
    child_env["PYTHONFAULTHANDLER"] = "1"  # a node killed by a fatal signal leaves its Python stacks in its log
    tmpdir = None
    if log_dir is None:
        tmpdir = tempfile.TemporaryDirectory(prefix="workcell-params-")
        params_dir = Path(tmpdir.name)
    else:
        params_dir = Path(log_dir)
        params_dir.mkdir(parents=True, exist_ok=True)
        child_env.setdefault("ROS_LOG_DIR", str(params_dir / "ros_log"))
    if echo is None or not echo.isatty():
        child_env.setdefault("RCUTILS_COLORIZED_OUTPUT", "0")
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError(f"node names must be unique: {names}")
    lock = threading.Lock()
    children: list[_Child] = []
    try:
        for spec in nodes:
            params = params_dir / f"{spec.name}.params.yaml"
            params.write_text(ros_params_yaml(spec), encoding="utf-8")
            log_path = params_dir / f"{spec.name}.log" if log_dir is not None else None
            children.append(_Child(spec, node_command(spec, params, python), child_env, log_path, echo, lock))
    except BaseException:
        RunningGraph(children, tmpdir).stop(timeout=2.0)
        raise
    return RunningGraph(children, tmpdir)
