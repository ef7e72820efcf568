"""Conveyor backend on the shared simulated workcell."""

from __future__ import annotations

import time
from collections.abc import Callable

from conveyor_driver.driver import BeltState
from transports.sim_link import LinkError, SimLink


class SimConveyorBackend:
    def __init__(self, link: SimLink, clock: Callable[[], float] = time.monotonic, stale_after: float = 0.5) -> None:
        self._link = link
        self._clock = clock
        self._stale_after = stale_after

    def read(self) -> BeltState:
        try:
            s, fault = self._link.read_fresh_state(self._stale_after)
        except LinkError as exc:
            return BeltState(self._clock(), 0.0, 0.0, False, str(exc))
        if s is None:
            return BeltState(self._clock(), 0.0, 0.0, False, None)
        return BeltState(self._clock(), s.belt_pos, s.belt_speed, s.belt_running, fault)

    def run(self, speed: float) -> None:
        self._link.write_belt_command(speed, True)

    def halt(self) -> None:
        self._link.write_belt_command(0.0, False)

    def emergency_stop(self) -> None:
        self.halt()  # the simulated belt stops at its acceleration limit either way

    def acknowledge_fault(self) -> None:
        pass

    def close(self) -> None:
        pass
