"""The arm backend on the shared simulated workcell (see transports.sim_link; the gripper's is gripper.sim_backend)."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from aubo_bridge.backends.base import ArmMeasurement
from transports.sim_link import SimLink


class SimArmBackend:
    """``stale_after``: wall seconds after which the world's state counts as stalled; None in lockstep."""

    def __init__(self, link: SimLink, clock: Callable[[], float] = time.monotonic,
                 stale_after: float | None = 0.5) -> None:  # fmt: skip
        self._link = link
        self._clock = clock
        self._stale_after = stale_after

    def read(self) -> ArmMeasurement:
        state, fault = self._link.read_world(self._stale_after)  # a LinkError is a BackendError
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
        pass  # the sim has no latched device faults: a stale world clears when it runs again

    def close(self) -> None:
        pass

