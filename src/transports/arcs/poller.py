"""The one background poll loop for a device behind an ARCS controller (arm state, tool gripper, belt relay).

Each device backend that talks to the controller over ``pyaubo_sdk`` keeps its state fresh the same way: a
daemon thread calls its ``poll()`` at a period and caches what it read, so the device's ``read()`` never waits
on the network. This is that thread:

* ``poll()`` raising :class:`~transports.errors.BackendError` is a failed link or a refusal:
  ``on_error(str(exc))``, then a back-off of ``backoff`` s before the next attempt. Every SDK call keeps the
  GIL until its reply or its request timeout, so a dead controller polled at full rate would freeze the
  whole process; :func:`backoff_for` gives the back-off from the request timeout. :meth:`Poller.wake` ends
  a back-off early (an operator reset that reconnected, a stop);
* any other exception (a malformed reply, a bug) must not kill the thread silently:
  ``on_error(f"{what} failed: {type}: {exc}")`` and the loop goes on at its period, without a back-off;
* ``on_attempt()``, if given, runs after every attempt, failed or not (a process host pushes ``read()``
  then);
* ``fixed_rate`` (default): polls start every ``period`` s on a schedule; a poll that fell more than a
  period behind restarts the schedule instead of bursting to catch up; after a back-off the schedule
  starts again from now. ``fixed_rate=False``: ``period`` s pass between the end of one attempt and the
  start of the next (the schedule drifts by each poll's duration);
* ``wake_ends_wait``: :meth:`Poller.wake` also ends the wait between two polls, not only a back-off
  (a queued command is written at once), without shifting the schedule;
* :meth:`Poller.stop` ends the loop (any wait included) and joins the thread.

What a failure means (a fault, link lost, a queued command dropped) is the backend's: the poller only
reports it through ``on_error``; staleness is the backend's too (the age of its last successful poll).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from transports.errors import BackendError


def backoff_for(request_timeout: float) -> float:
    """The back-off after a failed poll: each failed RPC may have frozen the process for ``request_timeout``."""
    return max(0.2, 5 * request_timeout)


class Poller:
    """``start()`` a daemon thread calling ``poll()`` every ``period`` s; ``wake()``; ``stop()``.

    ``attempts`` and ``failures`` (BackendError and unexpected exceptions alike) count the thread's calls of
    ``poll()``.
    """

    def __init__(
        self,
        poll: Callable[[], object],
        period: float,
        *,
        backoff: float,
        on_error: Callable[[str], None],
        what: str,
        name: str,
        on_attempt: Callable[[], None] | None = None,
        fixed_rate: bool = True,
        wake_ends_wait: bool = False,
    ) -> None:
        """``what`` names the poll in the message of an unexpected exception (``"{what} failed: ..."``);
        ``name`` is the thread's."""
        if not period > 0 or not backoff >= 0:
            raise ValueError(f"poller {name}: period must be > 0 and backoff >= 0, got {period}, {backoff}")
        self.period = period
        self.backoff = backoff
        self.name = name
        self.fixed_rate = fixed_rate
        self.wake_ends_wait = wake_ends_wait
        self._poll = poll
        self._on_error = on_error
        self._on_attempt = on_attempt
        self._what = what
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.attempts = 0
        self.failures = 0

    @property
    def stopped(self) -> bool:
        """:meth:`stop` was called (the thread may still be finishing an attempt)."""
        return self._stop.is_set()

    def start(self) -> None:
        """Start the thread: the first poll runs at once."""
        if self._thread is not None or self._stop.is_set():
            raise RuntimeError(f"poller {self.name} already started or stopped")
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """End a back-off now (and, with ``wake_ends_wait``, the wait before the next poll). Without
        ``wake_ends_wait``, a wake while no back-off runs stays pending and ends the next back-off at once."""
        self._wake.set()

    def stop(self, timeout: float = 2.0) -> None:
        """End the loop and wait up to ``timeout`` s for the thread (an RPC in progress is not interrupted).
        Idempotent; safe before :meth:`start`."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ the loop
    def _attempt(self) -> bool:
        """One poll; False when it raised BackendError (the caller backs off)."""
        self.attempts += 1
        try:
            self._poll()
        except BackendError as exc:
            self.failures += 1
            self._on_error(str(exc))
            self._notify()
            return False
        except Exception as exc:  # a malformed reply must not kill the poller silently
            self.failures += 1
            self._on_error(f"{self._what} failed: {type(exc).__name__}: {exc}")
        self._notify()
        return True

    def _notify(self) -> None:
        if self._on_attempt is not None:
            self._on_attempt()

    def _run(self) -> None:
        period = self.period
        next_t = time.monotonic()
        while not self._stop.is_set():
            if not self._attempt():
                self._wake.wait(self.backoff)
                self._wake.clear()
                next_t = time.monotonic()
                continue
            if not self.fixed_rate:
                self._wait(period)
                continue
            now = time.monotonic()
            if now >= next_t:  # an early wake-up does not shift the schedule
                next_t += period
                if now - next_t > period:
                    next_t = now  # fell behind (GIL, slow reply): do not burst
            self._wait(max(0.0, next_t - now))

    def _wait(self, seconds: float) -> None:
        if self.wake_ends_wait:
            self._wake.wait(seconds)
            self._wake.clear()
        else:
            self._stop.wait(seconds)
