"""The arm backend on the shared simulated workcell (see transports.sim_link; the gripper's is gripper.sim_backend)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final

import numpy as np

from aubo_bridge.backends.base import ArmMeasurement
from transports.sim_link import SimLink

# How the backend words the simulated controller's protective stop (sim_world's ``arm_fault``): the reason follows
PROTECTIVE_STOP: Final = "controller protective stop"


class SimArmBackend:
    """``stale_after``: wall seconds after which the world's state counts as stalled; None in lockstep.

    The simulated controller's safety report (the world's ``arm_fault``, sim_world's parameter of that name) reads
    as a real controller's protective stop does (backends/arcs.py): not ready, a fault with the reason, for as long
    as it is set. It is not latched here: the driver latches it, and its reset succeeds once the world clears it.
    """

    def __init__(self, link: SimLink, clock: Callable[[], float] = time.monotonic,
                 stale_after: float | None = 0.5) -> None:  # fmt: skip
        self._link = link
        self._clock = clock
        self._stale_after = stale_after

    def read(self) -> ArmMeasurement:
        state, fault = self._link.read_world(self._stale_after)  # a LinkError is a BackendError
        if state is not None and fault is None and state.arm_fault:
            fault = f"{PROTECTIVE_STOP}: {state.arm_fault}"
        if state is None:
            zeros = np.zeros(6)
            return ArmMeasurement(self._clock(), zeros, zeros, ready=False, fault=fault)
        return ArmMeasurement(
            stamp=self._clock(),
            q=state.arm_q,
            qd=state.arm_qd,
            ready=fault is None,
            fault=fault,
            tcp_pos=state.tcp_pos,
            tcp_quat=state.tcp_quat,
            epoch=state.episode,
        )

    def servo(self, q: np.ndarray) -> None:
        self._link.write_arm_command(np.array(q, dtype=float))

    def hold(self) -> None:
        # The world holds the last servo target; re-send the measured joints so
        # the arm stops where it is rather than finishing a stale target.
        state, _ = self._link.read_world(self._stale_after)
        if state is not None:
            self._link.write_arm_command(state.arm_q)

    def acknowledge_fault(self) -> None:
        pass  # the sim has no latched device faults: a stale world clears when it runs again, a protective stop
        # when sim_world's arm_fault is cleared

    def close(self) -> None:
        pass

