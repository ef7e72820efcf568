"""A manual-clock rig for the arm driver: an ideal or lagging arm, a gripper, exact timing.

The arm here is an ideal servo (the measured joints equal the last target)
and the clock is manual, so every figure (watchdog time, motion per step) is
exact. Shared by the driver's example tests and its property tests.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from aubo_bridge.backends.base import ArmMeasurement
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver
from aubo_bridge.model.kinematics import HOME_Q, fk
from gripper.base import GripperMeasurement
from transports.errors import BackendError


class ManualClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class IdealArm:
    """A perfectly tracking arm: measured joints = last servo target."""

    def __init__(self, clock: ManualClock, q0: np.ndarray = HOME_Q) -> None:
        self.clock = clock
        self.q = q0.copy()
        self.fault: str | None = None
        self.ready = True
        self.servo_calls = 0
        self.holds = 0
        self.refuse = False
        self.epoch = 0
        self.acknowledged = 0
        self.refuse_reset = False

    def read(self) -> ArmMeasurement:
        return ArmMeasurement(self.clock(), self.q.copy(), np.zeros(6), self.ready, self.fault, epoch=self.epoch)

    def servo(self, q: np.ndarray) -> None:
        if self.refuse:
            raise BackendError("queue full for too long")
        self.servo_calls += 1
        self.q = np.array(q, float)

    def hold(self) -> None:
        self.holds += 1

    def acknowledge_fault(self) -> None:
        self.acknowledged += 1
        if self.refuse_reset:
            raise BackendError("protective stop must be cleared on the pendant")

    def close(self) -> None:
        pass


class IdealGripper:
    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.coord = 0.0
        self.commands: list[float] = []

    def read(self) -> GripperMeasurement:
        return GripperMeasurement(self.clock(), self.coord, None)

    def command(self, coord: float) -> None:
        self.commands.append(coord)
        self.coord = coord

    def acknowledge_fault(self) -> None:
        pass

    def close(self) -> None:
        pass


class LaggingArm(IdealArm):
    """Closes a fixed fraction of the gap to its target per servo call, like a servo with lookahead."""

    def servo(self, q: np.ndarray) -> None:
        self.servo_calls += 1
        self.q = self.q + 0.1 * (np.array(q, float) - self.q)


def run_control_period(driver: ArmDriver, clock: ManualClock) -> None:
    steps = round(driver.config.servo_hz / driver.config.control_hz)
    for _ in range(steps):
        clock.t += driver.config.servo_period
        driver.tick()


def tcp(arm: IdealArm) -> tuple[np.ndarray, np.ndarray]:
    return fk(arm.q)


def goal_delta_config(**overrides) -> ArmConfig:
    """An ArmConfig with the goal_delta response: the tests that pin its exact geometry (the goal moves by
    the scaled action and is reached within the period) use it; test_action_response.py holds the default."""
    return ArmConfig(action_response="goal_delta", **overrides)


def stop_between_compute_and_send(driver: ArmDriver, arm: IdealArm, clock: ManualClock) -> list[str]:
    """The calls that reach the arm when a stop lands after a tick computed its target, before it sent it.

    The tick runs on its own thread and is held at the driver's I/O lock (the only place it waits)
    until the stop, made on this thread, has gone through.
    """
    calls: list[str] = []
    real_servo, real_hold = arm.servo, arm.hold
    arm.servo = lambda q: (calls.append("servo"), real_servo(q))
    arm.hold = lambda: (calls.append("hold"), real_hold())
    stop_done = threading.Event()
    ticker = threading.Thread(target=driver.tick)

    class GatedLock:
        def __init__(self) -> None:
            self._lock = threading.Lock()

        def __enter__(self):
            if threading.current_thread() is ticker:
                stop_done.wait(5.0)
            self._lock.acquire()

        def __exit__(self, *exc):
            self._lock.release()

    driver._io_lock = GatedLock()
    clock.t += driver.config.servo_period
    ticker.start()  # computes a target, then waits at the I/O lock
    time.sleep(0.05)
    driver.stop()  # lands between computing and sending
    stop_done.set()
    ticker.join(5.0)
    return calls
