"""Processes and their lifetimes: whether one still runs (what the lockstep supervisor and the run registry ask of
a pid), and a child that must not outlive its parent."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Final

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when the thread that started it ends
# How a node process says it is up: node_main.run_node prints a line starting so once its node is built (parameters
# read, device or sim world opened) and spinning; the launcher counts them (``workcell bringup``'s "nodes up").
NODE_UP: Final = "node up:"


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs: a zombie (dead, not yet reaped by its parent, the launcher) is dead."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def killed_by(returncode: int) -> str | None:
    """The name of the signal that ended a process with this ``returncode`` (subprocess's negative codes), or
    None: it exited by itself (or the number is no signal's)."""
    if returncode < 0 and -returncode in signal.valid_signals():
        return signal.Signals(-returncode).name
    return None


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Linux: have this process get ``sig`` when its parent ends, however it ends (``kill -9`` included), so what
    it runs (a node, a graph) does not outlive the run that started it. Call in the child, early (a
    ``preexec_fn``). The kernel sends it when the *thread* that started the child ends: start such children from
    a thread that lives as long as they should (the main thread). Elsewhere a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig))
