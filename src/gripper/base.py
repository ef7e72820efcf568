"""What the arm driver needs from a gripper, whatever its model and transport.

The driver holds all safety logic; a gripper backend only moves data and reports faults honestly, raising
:class:`transports.errors.BackendError` when the device refuses or its link fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class GripperMeasurement:
    stamp: float
    coord: float  # [0 open, 1 closed]
    fault: str | None
    object_detected: bool = False  # fingers stalled short of a close command: something is held


class GripperBackend(Protocol):
    def read(self) -> GripperMeasurement: ...

    def command(self, coord: float) -> None:
        """Move the fingers toward ``coord`` in [0 open, 1 closed]."""

    def acknowledge_fault(self) -> None:
        """Operator reset: e.g. the gripper's alarm reset. Never moves the fingers."""

    def close(self) -> None: ...
