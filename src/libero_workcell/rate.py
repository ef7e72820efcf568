"""Fixed-rate loops on absolute deadlines.

A loop that sleeps "one period" after its work drifts by the work's
duration and accumulates jitter; this one sleeps until ``start + k * period``
so the long-run rate is exact, and when it falls more than a period behind
it skips ahead (counting an overrun) instead of bursting to catch up.
Every tick's lateness is recorded so benchmarks and diagnostics can report
period error percentiles.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

import numpy as np


def sleep_until(deadline: float, clock: Callable[[], float] = time.perf_counter,
                stop: threading.Event | None = None, precise: bool = True) -> bool:  # fmt: skip
    """Wait until ``clock()`` reaches ``deadline``; False if ``stop`` was set while waiting.

    Precise: a coarse sleep, then a short spin (time.sleep alone overshoots by ~0.1-1 ms), for a loop whose timing
    a device feels (the arm's servo targets). The spin costs a few percent of a core per loop at 100-200 Hz, which
    a loop that only looks for something (a camera's new frame) should not pay: ``precise=False`` sleeps once.
    """
    while True:
        remaining = deadline - clock()
        if remaining <= 0:
            return True
        if stop is not None and stop.is_set():
            return False
        if not precise:
            time.sleep(remaining)
        elif remaining > 0.002:
            time.sleep(remaining - 0.0015)
        elif remaining > 0.0002:
            time.sleep(0.0001)


class RateLoop:
    def __init__(self, hz: float, clock: Callable[[], float] = time.perf_counter, history: int = 4096,
                 precise: bool = True) -> None:  # fmt: skip
        if not hz > 0:
            raise ValueError(f"loop rate must be positive, got {hz}")
        self.period = 1.0 / hz
        self.precise = precise  # (sleep_until)
        self._clock = clock
        self._next: float | None = None
        self._last_tick: float | None = None
        self.overruns = 0
        self.errors = 0  # exceptions raised by the loop body (run_loop keeps going)
        self.last_error: str | None = None
        self.priority_note: str | None = None
        self.periods: deque[float] = deque(maxlen=history)  # measured tick-to-tick periods, s

    def sleep(self, stop: threading.Event | None = None) -> bool:
        """Wait for the next deadline. Returns False if ``stop`` was set while waiting."""
        now = self._clock()
        if self._next is None:
            self._next = now + self.period
        else:
            self._next += self.period
            if now - self._next > self.period:  # fell behind: skip, do not burst
                self.overruns += 1
                self._next = now + self.period
        if not sleep_until(self._next, self._clock, stop, self.precise):
            return False
        self.record(self._clock())
        return not (stop is not None and stop.is_set())

    @property
    def deadline(self) -> float | None:
        """The deadline the last :meth:`sleep` waited for (the loop's clock), None before the first."""
        return self._next

    def record(self, tick: float) -> None:
        """Count one tick at ``tick`` (the loop's clock) in the period figures; :meth:`sleep` calls it."""
        if self._last_tick is not None:
            self.periods.append(tick - self._last_tick)
        self._last_tick = tick

    def period_error_stats(self) -> dict[str, float]:
        """|measured period - nominal| percentiles in ms."""
        if not self.periods:
            return {"n": 0, "p50_ms": float("nan"), "p99_ms": float("nan"), "max_ms": float("nan")}
        err = np.abs(np.asarray(self.periods) - self.period) * 1e3
        return {
            "n": len(err),
            "p50_ms": float(np.percentile(err, 50)),
            "p99_ms": float(np.percentile(err, 99)),
            "max_ms": float(err.max()),
        }


# SCHED_FIFO priority for control threads (servo, action loops). On a loaded
# machine a normal thread can wake milliseconds late; real-time priority is
# what robot drivers use for their control loop. Never for heavy work (physics).
CONTROL_PRIORITY = 20
# s a node's shutdown waits for its worker thread (the servo loop, a camera's or a source's lockstep step) to end
# before it tears down what that thread uses; within the launcher's SIGINT grace (workcell.launcher: 5 s)
SHUTDOWN_JOIN = 3.0


def set_realtime_priority(priority: int) -> str | None:
    """Give the calling thread SCHED_FIFO ``priority``; returns why not, or None on success."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (AttributeError, PermissionError, OSError) as exc:
        return f"no real-time priority ({exc}); loop timing may jitter under load"
    # The woken thread still needs the GIL: make other threads hand it over within 1 ms.
    sys.setswitchinterval(0.001)
    return None


def run_loop(
    hz: float, body: Callable[[], None], stop: threading.Event, name: str, priority: int = 0, precise: bool = True
) -> tuple[threading.Thread, RateLoop]:
    """Run ``body`` at ``hz`` on a daemon thread until ``stop`` is set.

    With ``priority`` > 0 the thread asks for SCHED_FIFO at that priority;
    ``loop.priority_note`` then says why it did not get it (None if it did).
    An exception from ``body`` never ends the loop: it is counted in ``loop.errors``
    and kept in ``loop.last_error`` (for diagnostics), and the next tick runs on time.
    """
    loop = RateLoop(hz, precise=precise)
    ready = threading.Event()

    def _run() -> None:
        if priority > 0:
            loop.priority_note = set_realtime_priority(priority)
        ready.set()
        while loop.sleep(stop):
            try:
                body()
            except Exception as exc:  # a control loop must not die silently: count, report, go on
                loop.errors += 1
                loop.last_error = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=_run, name=name, daemon=True)
    thread.start()
    ready.wait(timeout=1.0)
    return thread, loop
