"""The gripper on the shared simulated workcell (:mod:`transports.sim_link`), whatever the real model."""

from __future__ import annotations

import time
from collections.abc import Callable

from gripper.base import GripperMeasurement
from transports.sim_link import SimLink


class SimGripperBackend:
    """``stale_after``: wall seconds after which the world's state counts as stalled; None in lockstep."""

    def __init__(self, link: SimLink, clock: Callable[[], float] = time.monotonic,
                 stale_after: float | None = 0.5) -> None:  # fmt: skip
        self._link = link
        self._clock = clock
        self._stale_after = stale_after

    def read(self) -> GripperMeasurement:
        state, fault = self._link.read_world(self._stale_after)  # a LinkError is a BackendError
        coord = 0.0 if state is None else state.gripper_coord
        return GripperMeasurement(self._clock(), coord, fault)

    def command(self, coord: float) -> None:
        self._link.write_gripper_command(float(coord))

    def acknowledge_fault(self) -> None:
        pass  # the sim has no latched device faults: a stale world clears when it runs again

    def close(self) -> None:
        pass
