"""transports.arcs.poller.Poller: the one poll loop of the ARCS devices (arm state, tool gripper, belt relay).

Its own behaviour with plain callables (the schedule, the back-off, recovery, wake, stop), then with the real
``pyaubo_sdk`` client polling the ARCS emulator, where a poll is an RPC that fails as on a real link. No figure
here has a tight tolerance (CI machines are loaded): a load can only delay a poll, so the assertions are
orders, counts and lower bounds on gaps, with generous deadlines for what must happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from conftest import wait_for

from transports.arcs.poller import Poller, backoff_for
from transports.arcs.session import ArcsSession
from transports.errors import BackendError

HOST = "127.0.0.1"
EARLY = 0.005  # s an Event.wait may return before its timeout (clock granularity); never a load figure


class Recorder:
    """A poll and the poller's callbacks, logging what happened in order (thread-safe)."""

    def __init__(self, poll: Callable[[int], object] | None = None) -> None:
        self._poll = poll
        self.events: list[tuple[str, Any]] = []
        self.starts: list[float] = []
        self.ends: list[float] = []
        self.ok = 0  # polls that returned
        self._lock = threading.Lock()

    def poll(self) -> object:
        with self._lock:
            n = len(self.starts)
            self.starts.append(time.monotonic())
            self.events.append(("poll", n))
        try:
            out = self._poll(n) if self._poll is not None else None
        finally:
            with self._lock:
                self.ends.append(time.monotonic())
        with self._lock:
            self.ok += 1
        return out

    def on_error(self, message: str) -> None:
        with self._lock:
            self.events.append(("error", message))

    def on_attempt(self) -> None:
        with self._lock:
            self.events.append(("attempt", None))

    def count(self) -> int:
        with self._lock:
            return len(self.starts)

    def errors(self) -> list[str]:
        with self._lock:
            return [e for kind, e in self.events if kind == "error"]


@pytest.fixture
def started() -> Iterator[Callable[..., Poller]]:
    """``start(recorder, **options) -> Poller``, started; every poller stopped at teardown."""
    pollers: list[Poller] = []

    def start(rec: Recorder, **kw: Any) -> Poller:
        options: dict[str, Any] = {"period": 0.02, "backoff": 0.3, "what": "test poll", "name": "test-poller"}
        options.update(kw)
        p = Poller(rec.poll, on_error=rec.on_error, on_attempt=rec.on_attempt, **options)
        pollers.append(p)
        p.start()
        return p

    yield start
    for p in pollers:
        p.stop(timeout=10.0)


def fail_first(n: int, exc: Exception) -> Callable[[int], None]:
    def poll(i: int) -> None:
        if i < n:
            raise exc

    return poll


def always_fail(i: int) -> None:
    raise BackendError("down")


# ------------------------------------------------------------------ the schedule
def test_back_off_from_the_request_timeout() -> None:
    assert backoff_for(0.1) == pytest.approx(0.5)
    assert backoff_for(0.01) == 0.2  # never below 0.2 s


def test_a_period_or_back_off_that_cannot_work_is_refused() -> None:
    for period, backoff in ((0.0, 0.2), (-1.0, 0.2), (float("nan"), 0.2), (0.1, -1.0)):
        with pytest.raises(ValueError, match="period must be > 0 and backoff >= 0"):
            Poller(lambda: None, period, backoff=backoff, on_error=print, what="x", name="x")


def test_polls_start_on_a_schedule_never_ahead_of_it(started) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder()
    p = started(rec, period=0.05)
    assert wait_for(lambda: rec.count() >= 10, 20.0)
    p.stop(timeout=10.0)
    s = rec.starts
    # never ahead of the schedule: a load only delays a poll (by up to a period before the schedule restarts),
    # so poll k starts at least k - j - 1 periods after poll j; a loop without a schedule would burst
    assert all(s[k] - s[j] >= (k - j - 1) * 0.05 - EARLY for j in range(len(s)) for k in range(j + 1, len(s)))
    assert rec.errors() == [] and p.attempts == len(s) and p.failures == 0
    assert [kind for kind, _ in rec.events] == ["poll", "attempt"] * len(s)  # on_attempt after every poll


def test_a_slow_poll_restarts_the_schedule_instead_of_bursting(started) -> None:  # type: ignore[no-untyped-def]
    period = 0.1

    def poll(i: int) -> None:
        if i == 2:
            time.sleep(6 * period)  # five polls missed

    rec = Recorder(poll)
    p = started(rec, period=period)
    assert wait_for(lambda: rec.count() >= 6, 20.0)
    p.stop(timeout=10.0)
    slow_end = rec.ends[2]
    # after it, one poll at once, the next a period later: not the five missed ones in a burst
    burst = [t for t in rec.starts[3:] if t < slow_end + 0.9 * period]
    assert len(burst) <= 1, [t - slow_end for t in rec.starts[3:]]


def test_without_a_fixed_rate_the_period_runs_from_the_end_of_each_poll(started) -> None:  # type: ignore[no-untyped-def]
    period = 0.05  # ten times EARLY: at a fixed rate the gaps would be ~0
    rec = Recorder(lambda i: time.sleep(period))  # each poll takes a period
    p = started(rec, period=period, fixed_rate=False)
    assert wait_for(lambda: rec.count() >= 5, 20.0)
    p.stop(timeout=10.0)
    gaps = [start - end for end, start in zip(rec.ends, rec.starts[1:], strict=False)]
    assert gaps and all(g >= period - EARLY for g in gaps), gaps


# ------------------------------------------------------------- failures, back-off
def test_a_failing_poll_is_reported_backed_off_and_recovers(started) -> None:  # type: ignore[no-untyped-def]
    backoff = 0.15  # fifteen periods: unbacked, the next try would come a period after the failure
    rec = Recorder(fail_first(3, BackendError("link down")))
    p = started(rec, period=0.01, backoff=backoff)
    assert wait_for(lambda: rec.count() >= 10, 20.0)
    p.stop(timeout=10.0)
    # each failure: the error, then on_attempt, then the back-off before the next try
    assert rec.events[:9] == [("poll", 0), ("error", "link down"), ("attempt", None),
                              ("poll", 1), ("error", "link down"), ("attempt", None),
                              ("poll", 2), ("error", "link down"), ("attempt", None)]  # fmt: skip
    s = rec.starts
    assert all(s[k + 1] - rec.ends[k] >= backoff - EARLY for k in range(3)), s
    assert rec.errors() == ["link down"] * 3 and p.failures == 3  # recovered: polled again, no more errors
    assert [kind for kind, _ in rec.events[9:]] == ["poll", "attempt"] * (len(s) - 3)


def test_an_unexpected_exception_is_reported_without_a_back_off(started) -> None:  # type: ignore[no-untyped-def]
    """A malformed reply (any exception but BackendError) must not kill the thread nor stall it for a back-off."""
    rec = Recorder(fail_first(1, ValueError("bad reply")))
    p = started(rec, period=0.01, backoff=600.0)
    assert wait_for(lambda: rec.count() >= 3, 20.0)  # a back-off would take ten minutes
    assert rec.errors() == ["test poll failed: ValueError: bad reply"]
    assert rec.events[:3] == [("poll", 0), ("error", "test poll failed: ValueError: bad reply"), ("attempt", None)]
    assert p.alive() and p.failures == 1


def test_wake_ends_a_back_off(started) -> None:  # type: ignore[no-untyped-def]
    healthy = threading.Event()

    def poll(i: int) -> None:
        if not healthy.is_set():
            raise BackendError("controller refused the connection")

    rec = Recorder(poll)
    p = started(rec, period=0.01, backoff=600.0)
    assert wait_for(lambda: rec.errors(), 20.0)
    time.sleep(0.3)
    assert rec.count() == 1  # in the back-off
    healthy.set()  # e.g. an operator reset reconnected the session
    p.wake()
    assert wait_for(lambda: rec.count() >= 5, 20.0)
    assert rec.errors() == ["controller refused the connection"]


@pytest.mark.parametrize("wake_ends_wait", [True, False])
def test_wake_ends_the_wait_between_polls_only_when_asked(started, wake_ends_wait: bool) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder()
    p = started(rec, period=600.0, wake_ends_wait=wake_ends_wait)
    assert wait_for(lambda: rec.count() == 1, 20.0)
    p.wake()  # a queued command (the tool gripper) is written at once; the arm's state poll keeps its period
    if wake_ends_wait:
        assert wait_for(lambda: rec.count() == 2, 20.0)
    else:
        time.sleep(0.5)
        assert rec.count() == 1


# -------------------------------------------------------------------------- stop
def test_stop_ends_a_back_off_and_the_thread(started) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(always_fail)
    p = started(rec, period=0.01, backoff=600.0)
    assert wait_for(lambda: rec.errors(), 20.0)
    assert not p.stopped
    p.stop(timeout=20.0)
    assert p.stopped and not p.alive()  # a ten-minute back-off did not hold it
    n = rec.count()
    time.sleep(0.2)
    assert rec.count() == n == p.attempts
    p.stop()  # idempotent
    with pytest.raises(RuntimeError, match="already started or stopped"):
        p.start()


def test_stop_lets_a_poll_in_progress_finish_and_starts_no_other(started) -> None:  # type: ignore[no-untyped-def]
    in_poll = threading.Event()

    def poll(i: int) -> None:
        in_poll.set()
        time.sleep(0.3)

    rec = Recorder(poll)
    p = started(rec, period=0.01)
    assert in_poll.wait(20.0)
    p.stop(timeout=20.0)
    assert not p.alive()
    assert len(rec.ends) == rec.count()  # the poll in progress finished
    n = rec.count()
    time.sleep(0.2)  # twenty periods
    assert rec.count() == n


def test_a_poller_never_started_stops_and_then_cannot_start() -> None:
    p = Poller(lambda: None, 0.1, backoff=0.2, on_error=print, what="x", name="x")
    assert not p.alive() and not p.stopped
    p.stop()
    assert p.stopped and not p.alive()
    with pytest.raises(RuntimeError):
        p.start()


# --------------------------------------------------- the real client, the emulator
@pytest.fixture
def session(emu: Any) -> Iterator[ArcsSession]:
    s = ArcsSession(HOST, emu.port, request_timeout=0.1)
    s.open()
    yield s
    s.close()


def mode_poll(session: ArcsSession) -> Callable[[int], object]:
    """What the arm's state poll does, reduced to one getter: a lost link or a failed RPC is a BackendError."""

    def poll(i: int) -> object:
        if not session.connected():
            raise BackendError(f"connection to ARCS controller at {session.where} lost")
        return session.call(session.robot.getRobotState().getRobotModeType)

    return poll


def test_a_dropped_controller_link_is_backed_off_until_a_reconnect_wakes_it(emu, session, started) -> None:  # type: ignore[no-untyped-def]
    backoff = backoff_for(session.request_timeout)
    rec = Recorder(mode_poll(session))
    p = started(rec, period=0.02, backoff=backoff)
    assert wait_for(lambda: rec.count() >= 5, 20.0) and rec.errors() == []
    emu.disconnect(refuse=True)
    assert wait_for(lambda: rec.errors(), 20.0)
    first = len(rec.errors())
    time.sleep(1.0)
    # backed off: at most one try per back-off (unbacked, a 20 ms period would have made ~50)
    assert len(rec.errors()) - first <= 1.0 / backoff + 1
    assert all("lost" in e or e.startswith(f"ARCS {session.where}") for e in rec.errors()), rec.errors()
    emu.accept_connections()
    session.open()  # what an operator reset does (the backends' acknowledge_fault), then it wakes the poller
    p.wake()
    n_ok = rec.ok
    assert wait_for(lambda: rec.ok >= n_ok + 5, 20.0)


def test_a_slow_controller_is_backed_off_and_recovers_by_itself(emu, session, started) -> None:  # type: ignore[no-untyped-def]
    rec = Recorder(mode_poll(session))
    started(rec, period=0.02, backoff=backoff_for(session.request_timeout))
    assert wait_for(lambda: rec.count() >= 3, 20.0)
    emu.slow_replies(0.3)  # beyond the 0.1 s request timeout: every poll fails
    assert wait_for(lambda: rec.errors(), 20.0)
    n_ok = rec.ok
    emu.slow_replies(0.0)
    assert wait_for(lambda: rec.ok >= n_ok + 5, 20.0)  # polling again, no reset needed (no wake)
    assert all(e == f"ARCS {session.where}: RPC request timeout." for e in rec.errors()), rec.errors()
