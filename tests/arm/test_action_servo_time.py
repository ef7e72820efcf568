"""aubo_bridge's action result says when the action's first servo target goes out (``servo_time``)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from aubo_bridge.node import AuboBridgeNode
from libero_workcell.rate import RateLoop

PERIOD = 0.002  # 500 Hz


def bridge(lockstep: bool = False, loop: RateLoop | None = None, sim_ns: int = 0) -> SimpleNamespace:
    return SimpleNamespace(lockstep=lockstep, _servo_loop=loop, _sim_ns=sim_ns,
                           config=SimpleNamespace(servo_period=PERIOD))  # fmt: skip


def test_in_lockstep_it_is_the_worlds_tick_waiting_for_it() -> None:
    assert AuboBridgeNode._servo_time_ns(bridge(True, sim_ns=1_250_000_000), 1_250_000_000) == 1_250_000_000


def test_on_the_wall_clock_it_is_the_servo_loops_next_deadline() -> None:
    loop = RateLoop(1 / PERIOD)
    loop._next = time.perf_counter() + 0.0015  # the loop sleeps toward its next tick
    now = time.time_ns()
    got = AuboBridgeNode._servo_time_ns(bridge(loop=loop), now)
    assert now < got <= now + 1_600_000
    loop._next = time.perf_counter() - 0.0031  # that deadline passed (the tick ran late): the next on the grid
    got = AuboBridgeNode._servo_time_ns(bridge(loop=loop), now)
    assert now < got <= now + round(PERIOD * 1e9)
    # the driver in its own process: its loop is not seen here, at most one period after it was taken
    assert AuboBridgeNode._servo_time_ns(bridge(), now) == now + round(PERIOD * 1e9)
