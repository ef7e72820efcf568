"""aubo_bridge's action result says when the action's first servo target goes out (``servo_time``): each servo host
(aubo_bridge.servo_host) answers for its own loop."""

from __future__ import annotations

import time
from types import SimpleNamespace

from aubo_bridge.servo_host import LockstepHost, ProcessHost, ThreadHost
from libero_workcell.rate import RateLoop

PERIOD = 0.002  # 500 Hz


def test_in_lockstep_it_is_the_worlds_tick_waiting_for_it() -> None:
    host = SimpleNamespace(sim_ns=1_250_000_000)
    assert LockstepHost.servo_time_ns(host, 1_250_000_000) == 1_250_000_000


def test_on_the_wall_clock_it_is_the_servo_loops_next_deadline() -> None:
    loop = RateLoop(1 / PERIOD)
    host = SimpleNamespace(_loop=loop, _period=PERIOD)
    loop._next = time.perf_counter() + 0.0015  # the loop sleeps toward its next tick
    now = time.time_ns()
    got = ThreadHost.servo_time_ns(host, now)
    assert now < got <= now + 1_600_000
    loop._next = time.perf_counter() - 0.0031  # that deadline passed (the tick ran late): the next on the grid
    got = ThreadHost.servo_time_ns(host, now)
    assert now < got <= now + round(PERIOD * 1e9)
    # before its first tick: one period on
    assert ThreadHost.servo_time_ns(SimpleNamespace(_loop=RateLoop(1 / PERIOD), _period=PERIOD), now) == \
        now + round(PERIOD * 1e9)  # fmt: skip
    # the driver in its own process: its loop is not seen here, at most one period after it was taken
    assert ProcessHost.servo_time_ns(SimpleNamespace(_period_ns=round(PERIOD * 1e9)), now) == now + round(PERIOD * 1e9)
