"""Run a pyaubo_sdk-backed device backend in a child process of its own.

Why: pyaubo_sdk keeps the Python GIL for the whole of every RPC, up to the request timeout
when the controller is slow. In the node's process that freezes every other thread for each
reply: the ROS executor, the driver's servo loop and watchdog, the gripper's bus thread.
Hosted in a child, the SDK holds only the child's GIL; the node waits on a pipe, which
releases its own.

The child is a fresh interpreter (``python -m transports.process_host.child``: a process running DDS
threads is never forked, and unlike multiprocessing's spawn it never re-imports the node's
main module). It receives a module-level factory and its arguments, builds the backend
and then:

* answers calls over a request/reply pipe, ``(seq, method, args) -> (seq, ok, value)``, in
  order; the node waits for each with a deadline (a late answer to a call that already
  timed out is recognised by its ``seq`` and dropped), except for *casts*, the servo
  stream's targets, whose answers it collects at the next cast: the control thread never
  waits on the network, and a refusal or a hung child still surfaces one tick later;
* pushes the backend's ``read()`` down a second pipe after every state poll (the backend's
  ``on_update`` hook), so the node's ``read()`` never waits on anything;
* ignores SIGINT (the node shuts it down in order) and, when the node disappears (its pipe
  ends) or it is terminated, first calls the backend's ``orphan_calls`` (the arm: ``hold``),
  then closes it (leave servo mode, log out).

The node side (:class:`SdkProcess`) ages what it received by its own clock, so a child
that hangs or dies reads as a fault within ``stale_after``, never as a frozen good state.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import Any

from libero_workcell.rate import set_realtime_priority
from transports.errors import BackendError

log = logging.getLogger(__name__)

SPAWN_TIMEOUT = 10.0  # s for a fresh interpreter to import numpy, scipy and the SDK on a loaded machine
REPLY_MARGIN = 0.1  # s on top of a call's own worst case (pipe hops, scheduling)


class _Terminated(BaseException):
    """SIGTERM in the child: unwind the command loop like a vanished parent."""


def _on_sigterm(signum: int, frame: object) -> None:
    raise _Terminated


def _error_text(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"


def _child_main(cmd: Connection, state: Connection) -> None:
    """The child: build the backend from the first message, push state, answer calls."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        factory, args, orphan_calls, priority, log_level = cmd.recv()
    except (EOFError, OSError, _Terminated):
        return
    logging.basicConfig(level=log_level, stream=sys.stderr, format="[%(processName)s] %(levelname)s %(message)s")
    if priority > 0:
        # Before the backend starts its threads: they inherit it. Every thread here serves the
        # control link (SDK I/O, state poll, calls) and sleeps between replies.
        note = set_realtime_priority(priority)
        if note:
            log.warning("%s", note)
    push_lock = threading.Lock()
    backend: Any = None

    def push() -> None:
        try:
            with push_lock:
                state.send(backend.read())
        except Exception:  # the node is gone: the command loop sees it and shuts down
            pass

    try:
        backend = factory(*args)
    except _Terminated:
        return
    except Exception as exc:
        cmd.send((0, False, _error_text(exc)))
        return
    backend.on_update = push
    push()
    cmd.send((0, True, None))
    orphaned, seq = False, 0
    try:
        while True:
            try:
                seq, method, margs = cmd.recv()
            except (EOFError, OSError):
                orphaned = True
                log.error("node process gone: stopping the device and logging out")
                break
            if method == "close":
                break
            try:
                reply = (seq, True, getattr(backend, method)(*margs))
            except Exception as exc:
                reply = (seq, False, _error_text(exc))
            try:
                cmd.send(reply)
            except OSError:
                orphaned = True
                break
    except _Terminated:
        orphaned = True
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the shutdown short
        if orphaned:
            for method in orphan_calls:
                try:
                    getattr(backend, method)()
                except Exception as exc:
                    log.error("%s on shutdown failed: %s", method, exc)
        backend.on_update = None
        backend.close()
    if not orphaned:
        with contextlib.suppress(OSError):  # the node stopped waiting: nothing to tell
            cmd.send((seq, True, None))


class SdkProcess:
    """The node's handle on one hosted backend: start, call, latest state, close."""

    def __init__(
        self,
        name: str,
        factory: Callable[..., Any],
        stale_after: float,
        clock: Callable[[], float] = time.monotonic,
        priority: int = 0,
        orphan_calls: Sequence[str] = (),
    ) -> None:
        self.name = name
        self._factory = factory
        self._stale_after = stale_after
        self._clock = clock
        self._priority = priority
        self._orphan_calls = tuple(orphan_calls)
        self._proc: subprocess.Popen[bytes] | None = None
        self._cmd: Connection | None = None
        self._seq = 0
        self._call_lock = threading.Lock()  # one sender at a time: replies pair with requests in order
        self._casts: deque[tuple[int, str, float]] = deque()  # (seq, method, sent at) not answered yet
        self._cast_error: str | None = None  # a cast the child refused, raised at the next cast
        self._state_lock = threading.Lock()
        self._latest: Any = None
        self._received_at = -float("inf")
        self._link_error: str | None = "not started"
        self.updates = 0  # measurements received, for rate figures
        # How old each measurement was (s, its stamp on the child's CLOCK_MONOTONIC) when it arrived here, and when
        # read(): what the latency figures of the state path are made of (benchmarks, diagnostics).
        self.arrival_ages: deque[float] = deque(maxlen=8192)
        self.read_ages: deque[float] = deque(maxlen=8192)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def link_error(self) -> str | None:
        """Why the child cannot serve (exited, not started, closed), or None."""
        return self._link_error

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self, *args: Any, timeout: float) -> None:
        """Start the child and build the backend there with ``factory(*args)``; raise its error if that fails."""
        self.stop()
        cmd, child_cmd = multiprocessing.Pipe(duplex=True)
        state, child_state = multiprocessing.Pipe(duplex=False)
        fds = (child_cmd.fileno(), child_state.fileno())
        env = dict(os.environ)  # the child imports what this process imports
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        proc = subprocess.Popen(
            [sys.executable, "-m", "transports.process_host.child", str(fds[0]), str(fds[1]), self.name],
            pass_fds=fds, env=env, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        child_cmd.close()  # the node keeps only its own ends: EOF as soon as the child dies
        child_state.close()
        try:
            level = logging.getLogger().getEffectiveLevel()
            cmd.send((self._factory, args, self._orphan_calls, self._priority, level))
            ok, value = self._await(cmd, 0, "start-up", SPAWN_TIMEOUT + timeout)
            if not ok:
                raise BackendError(value)
            if not state.poll(1.0):
                raise BackendError(f"{self.name}: no first measurement after start-up")
            first = state.recv()
        except BaseException:
            self._kill(proc)
            cmd.close()
            state.close()
            raise
        with self._state_lock:
            self._proc, self._cmd, self._seq = proc, cmd, 0
            self._casts.clear()
            self._cast_error = None
            self._latest, self._received_at, self._link_error = first, time.monotonic(), None
        threading.Thread(target=self._receive, args=(proc, state), name=f"{self.name}-state", daemon=True).start()

    def _await(self, conn: Connection, seq: int, what: str, timeout: float) -> tuple[bool, Any]:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0 or not conn.poll(remaining):
                    raise BackendError(f"{self.name} process gave no answer to {what} within {timeout * 1e3:.0f} ms")
                rseq, ok, value = conn.recv()
            except (EOFError, OSError) as exc:
                raise BackendError(f"{self.name} process exited during {what}") from exc
            if rseq == seq:
                return ok, value
            self._cast_answered(rseq, ok, value)  # the child answers in order: earlier casts first

    def _cast_answered(self, seq: int, ok: bool, value: Any) -> None:
        if self._casts and seq == self._casts[0][0]:
            self._casts.popleft()
            if not ok and self._cast_error is None:
                self._cast_error = value
        # otherwise: the late answer to a call that already timed out

    def _connection(self) -> Connection:
        conn = self._cmd
        if conn is None or not self.alive:
            raise BackendError(self._link_error or f"{self.name} process not running")
        return conn

    def _send(self, conn: Connection, method: str, args: tuple[Any, ...]) -> int:
        self._seq += 1
        try:
            conn.send((self._seq, method, args))
        except (OSError, ValueError) as exc:
            raise BackendError(f"{self.name} process gone: {exc}") from exc
        return self._seq

    def call(self, method: str, *args: Any, timeout: float) -> Any:
        """``backend.method(*args)`` in the child; its BackendError (same text) or a timeout raises here."""
        with self._call_lock:
            conn = self._connection()
            ok, value = self._await(conn, self._send(conn, method, args), method, timeout)
        if not ok:
            raise BackendError(value)
        return value

    def cast(self, method: str, *args: Any, deadline: float) -> None:
        """``backend.method(*args)`` in the child without waiting for it (a stream's next target).

        A cast that the child refused raises at the next cast, with the child's text; so does
        one still unanswered after ``deadline`` s (a hung child). The target is sent first: it
        was validated by the driver, and a refusal only means the controller did not take it.
        The child runs everything in order: a later :meth:`call` (a hold) comes after these.
        """
        with self._call_lock:
            conn = self._connection()
            # Send first: under a busy GIL every syscall below may cost a switch interval.
            self._casts.append((self._send(conn, method, args), method, time.monotonic()))
            try:
                while conn.poll(0):
                    self._cast_answered(*conn.recv())
            except (EOFError, OSError) as exc:
                raise BackendError(f"{self.name} process exited during {method}") from exc
            if self._cast_error is not None:
                error, self._cast_error = self._cast_error, None
                raise BackendError(error)
            if self._casts and time.monotonic() - self._casts[0][2] > deadline:
                late = self._casts[0][1]
                raise BackendError(f"{self.name} process gave no answer to {late} within {deadline * 1e3:.0f} ms")

    def forget_cast_errors(self) -> None:
        """Drop a refusal not yet raised (a hold supersedes every target sent before it)."""
        with self._call_lock:
            self._cast_error = None

    def refresh(self, timeout: float) -> None:
        """Fetch ``read()`` now (after a reset: the next read must show its outcome)."""
        self._store(self.call("read", timeout=timeout))

    def _store(self, meas: Any) -> None:
        with self._state_lock:
            if self._latest is None or meas.stamp >= self._latest.stamp:  # child clock: keep the newest
                self._latest, self._received_at = meas, time.monotonic()
                self.updates += 1
                self.arrival_ages.append(self._received_at - meas.stamp)

    def _receive(self, proc: subprocess.Popen[bytes], conn: Connection) -> None:
        while True:
            try:
                meas = conn.recv()
            except (EOFError, OSError):
                break
            self._store(meas)
        conn.close()
        try:
            code: int | None = proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            code = None
        with self._state_lock:
            if self._proc is proc:
                self._link_error = f"{self.name} process exited (exit code {code}); reset restarts it"

    def read(self) -> Any:
        """The latest measurement with the node's view of the link: a dead, hung or silent child is a fault."""
        with self._state_lock:
            meas, received_at, link_error = self._latest, self._received_at, self._link_error
        if meas is None:
            raise BackendError(link_error or f"{self.name}: no measurement yet")
        now = time.monotonic()
        self.read_ages.append(now - meas.stamp)
        age = now - received_at
        fault = link_error or meas.fault
        if fault is None and age > self._stale_after:
            fault = f"no state from the {self.name} process for {age:.2f} s"
        fields: dict[str, Any] = {"stamp": self._clock(), "fault": fault}
        if hasattr(meas, "ready"):
            fields["ready"] = meas.ready and fault is None
        return replace(meas, **fields)

    def stop(self, timeout: float = 2.0) -> None:
        """Close the backend in the child (it logs out), then end the child. Never raises."""
        proc, conn = self._proc, self._cmd
        if proc is None:
            return
        with self._state_lock:
            self._proc = None  # the receiver thread's exit is no longer news
            self._link_error = "closed"
        try:
            if proc.poll() is None and conn is not None:
                with self._call_lock:
                    self._await(conn, self._send(conn, "close", ()), "close", timeout)
        except BackendError as exc:
            log.warning("%s close: %s", self.name, exc)
        self._kill(proc)
        if conn is not None:
            conn.close()
        self._cmd = None

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        for end in (None, proc.terminate, proc.kill):  # wait; SIGTERM (the child holds, logs out); SIGKILL
            if end is not None:
                end()
            try:
                proc.wait(timeout=2.0)
                return
            except subprocess.TimeoutExpired:
                continue
