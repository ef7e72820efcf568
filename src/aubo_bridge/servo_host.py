"""Where the arm driver's servo loop runs: chosen once, when the node starts (:func:`servo_host`).

- :class:`ProcessHost` (``driver_host: process``, the default): the whole driver and its loop in a child process of
  its own (:mod:`aubo_bridge.process.driver_host`), so neither the node's executor nor any other thread of it can
  delay a servo target.
- :class:`ThreadHost` (``driver_host: node``): the loop on a real-time thread of the node's process.
- :class:`LockstepHost` (the simulated cell in lockstep): one driver tick per world tick, on the world's clock
  (:mod:`transports.sim_lockstep`); a control step's tick runs the node's ``control_step`` first (publish the
  state it observes, wait for the active source's action for it), so the action takes effect at that tick, as in
  one process.

Each gives the node the same things: the driver, the loop's figures, when an action's first servo target goes
out, and how to end the loop.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from aubo_bridge.config import ConfigError
from aubo_bridge.driver import ArmDriver
from aubo_bridge.process.driver_host import DriverSpec, HostedDriver, LoopStats
from libero_workcell.rate import CONTROL_PRIORITY, SHUTDOWN_JOIN, RateLoop, run_loop
from transports.stepping import TickThread


class ServoHost(Protocol):
    driver: ArmDriver | HostedDriver
    devices: tuple[object, ...]  # what holds the devices' sessions (their child processes, for the log)
    sim_ns: int  # lockstep: the world's clock at the current tick (0 otherwise)

    def loop_stats(self) -> LoopStats: ...

    def servo_time_ns(self, now_ns: int) -> int:
        """When the first servo target carrying an action taken at ``now_ns`` goes out (the result's
        ``servo_time``)."""
        ...

    def stop(self) -> None:
        """End the loop (the node's stop event is set); the driver is closed after."""
        ...


class ProcessHost:
    sim_ns = 0

    def __init__(self, spec: DriverSpec) -> None:
        self.driver = HostedDriver(spec)
        self.driver.start()
        # Actions pass through this process on their way to the driver: hand the GIL over within 1 ms, as a
        # node whose servo thread is real-time does (the interpreter's default is 5 ms).
        sys.setswitchinterval(0.001)
        self.devices: tuple[object, ...] = (self.driver,)
        self._period_ns = round(spec.config.servo_period * 1e9)

    def loop_stats(self) -> LoopStats:
        return self.driver.loop_stats()

    def servo_time_ns(self, now_ns: int) -> int:
        return now_ns + self._period_ns  # at most one period after (that loop's deadlines are not seen here)

    def stop(self) -> None:
        pass  # the driver's close ends its process


class ThreadHost:
    sim_ns = 0

    def __init__(self, spec: DriverSpec, stop: threading.Event) -> None:
        self.driver, arm, gripper = spec.build()
        self.devices: tuple[object, ...] = (arm, gripper)
        self._period = spec.config.servo_period
        self._thread, self._loop = run_loop(spec.config.servo_hz, self.driver.tick, stop, "servo",
                                            priority=CONTROL_PRIORITY)  # fmt: skip

    def loop_stats(self) -> LoopStats:
        return LoopStats.of(self._loop, self._thread)

    def servo_time_ns(self, now_ns: int) -> int:
        """The loop's next deadline (its clock is perf_counter)."""
        deadline = self._loop.deadline
        if deadline is None:
            return now_ns + round(self._period * 1e9)
        ahead = deadline - time.perf_counter()
        if ahead < 0:  # that tick ran: the next ones follow every period
            ahead += self._period * math.ceil(-ahead / self._period)
        return now_ns + round(ahead * 1e9)

    def stop(self) -> None:
        self._thread.join(timeout=SHUTDOWN_JOIN)


@dataclass(frozen=True)
class LockstepHooks:
    """What the node does in the lockstep loop: ``control_step(tick, participant)`` at a control step's tick before
    the driver's; ``each_tick()`` at every tick (the simulated arm's auto-enable); ``world_gone()`` once the world
    ends. The first tick is taken only once ``served`` is set (node_main.served: an action never waits
    unannounced). ``name``: the participant's."""

    served: threading.Event
    control_step: Callable[[Any, Any], None]
    each_tick: Callable[[], None]
    world_gone: Callable[[], None]
    name: str


class LockstepHost:
    """One driver tick per world tick, the node's :class:`LockstepHooks` run in it."""

    def __init__(self, spec: DriverSpec, stop: threading.Event, hooks: LockstepHooks) -> None:
        from transports.sim_lockstep import SERVO, LockstepParticipant

        self.sim_ns = 0
        self.driver, arm, gripper = spec.build(sim_clock=lambda: self.sim_ns * 1e-9)
        self.devices: tuple[object, ...] = (arm, gripper)
        self.participant = LockstepParticipant(spec.sim_link, hooks.name, SERVO)
        if self.participant.servo_period_ns != round(spec.config.servo_period * 1e9):
            self.participant.close()
            raise ConfigError(f"servo_hz {spec.config.servo_hz:g} differs from the world's servo period "
                              f"({self.participant.servo_period_ns} ns)")  # fmt: skip
        self._hooks = hooks
        self._loop = RateLoop(spec.config.servo_hz, clock=lambda: self.sim_ns * 1e-9)
        participant = self.participant
        self._ticks = TickThread(lambda: participant, self._tick, "servo", stop, ready=hooks.served.is_set,
                                 world_gone=hooks.world_gone)  # fmt: skip

    def _tick(self, tick: Any) -> None:
        self.sim_ns = tick.time_ns
        self._loop.record(tick.time)
        self._hooks.each_tick()
        if tick.control_step is not None:
            self._hooks.control_step(tick, self.participant)
        self.driver.tick()

    def loop_stats(self) -> LoopStats:
        # the loop times the ticks; the tick thread counts the failed ones
        return replace(LoopStats.of(self._loop, self._ticks.thread), errors=self._ticks.errors)

    def servo_time_ns(self, now_ns: int) -> int:
        return self.sim_ns  # the world's tick waiting for it (sim time)

    def stop(self) -> None:
        self._ticks.stop()


def servo_host(spec: DriverSpec, driver_host: str, stop: threading.Event,
               lockstep: LockstepHooks | None = None) -> ServoHost:  # fmt: skip
    """The host the node's parameters ask for: in lockstep (``lockstep``: the node's part in it) or not."""
    if lockstep is not None:
        if driver_host != "node":
            raise ConfigError("the simulated arm runs in lockstep with the world in the node: driver_host must be "
                              "'node' when use_sim and lockstep (the driver process is for the real arm)")
        return LockstepHost(spec, stop, lockstep)
    if driver_host == "process":
        return ProcessHost(spec)
    return ThreadHost(spec, stop)
