"""Fixed-rate loops (libero_workcell.rate): a precise loop wakes on its deadline by a coarse sleep then a short
spin; a loop that only looks for something sleeps once per tick; neither returns before its deadline, and a stop
ends the wait."""

from __future__ import annotations

import threading

import pytest

from libero_workcell import rate


class FakeTime:
    """A clock that moves when the code under test sleeps (each sleep overshoots by ``late`` s) and by a
    microsecond each time it is read (a spin's reads)."""

    def __init__(self, late: float = 0.0) -> None:
        self.now = 0.0
        self.late = late
        self.sleeps: list[float] = []
        self.reads = 0

    def clock(self) -> float:
        self.reads += 1
        self.now += 1e-6
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds + self.late


@pytest.fixture
def fake(monkeypatch) -> FakeTime:
    t = FakeTime()
    monkeypatch.setattr(rate.time, "sleep", t.sleep)
    return t


def test_a_loop_that_only_looks_sleeps_once_to_its_deadline(fake) -> None:
    assert rate.sleep_until(0.010, fake.clock, precise=False)
    assert fake.sleeps == [pytest.approx(0.010 - 1e-6)] and fake.now >= 0.010 and fake.reads == 2


def test_a_precise_loop_sleeps_coarsely_then_in_short_steps_and_spins_the_rest(fake) -> None:
    assert rate.sleep_until(0.010, fake.clock)
    assert fake.sleeps[0] == pytest.approx(0.010 - 0.0015, abs=1e-5)  # the coarse sleep stops 1.5 ms short
    assert set(fake.sleeps[1:]) == {0.0001} and len(fake.sleeps) > 1  # then 0.1 ms steps
    assert fake.reads > len(fake.sleeps) + 50  # and the last 0.2 ms spun on the clock (a microsecond a read here)
    assert fake.now >= 0.010


def test_neither_returns_before_its_deadline_whatever_a_sleep_overshoots(monkeypatch) -> None:
    for precise in (True, False):
        for late in (0.0, 5e-5, 0.003):
            t = FakeTime(late)
            monkeypatch.setattr(rate.time, "sleep", t.sleep)
            loop = rate.RateLoop(100.0, clock=t.clock, precise=precise)
            for _ in range(5):
                assert loop.sleep()
                assert t.now >= loop.deadline


def test_a_stop_ends_the_wait_of_either(fake) -> None:
    stop = threading.Event()
    stop.set()
    for precise in (True, False):
        assert not rate.sleep_until(1.0, fake.clock, stop, precise=precise)
    assert fake.sleeps == []


def test_run_loop_hands_its_precision_to_the_loop() -> None:
    stop = threading.Event()
    ticks = threading.Event()
    thread, loop = rate.run_loop(200.0, ticks.set, stop, "t", precise=False)
    try:
        assert ticks.wait(5.0) and loop.precise is False
    finally:
        stop.set()
        thread.join(5.0)
    assert rate.RateLoop(10.0).precise  # precise unless asked
