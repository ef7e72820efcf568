"""What the arm driver needs from an arm and a gripper, whatever they are.

``sim`` backends talk to the shared MuJoCo world; ``real`` backends to the
AUBO ARCS controller and the CTAG2F90D over Modbus. The driver above holds
all safety logic, so a backend only moves data and reports faults honestly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


class BackendError(RuntimeError):
    """The device refused a command or the link to it failed."""


@dataclass(frozen=True)
class ArmMeasurement:
    stamp: float  # driver clock (s) when read
    q: np.ndarray  # (6,) rad
    qd: np.ndarray  # (6,) rad/s
    ready: bool  # controller accepts motion (e.g. Running + Normal/Reduced safety)
    fault: str | None  # why the arm must not move (protective stop, link lost, ...), or None
    tcp_pos: np.ndarray | None = None  # controller-reported TCP, for cross-checking the model
    tcp_quat: np.ndarray | None = None  # x, y, z, w
    epoch: int = 0  # changes when the arm was moved outside this driver's stream (sim reset): re-anchor


@dataclass(frozen=True)
class GripperMeasurement:
    stamp: float
    coord: float  # [0 open, 1 closed]
    fault: str | None
    object_detected: bool = False  # fingers stalled short of a close command: something is held


class ArmBackend(Protocol):
    def read(self) -> ArmMeasurement: ...

    def servo(self, q: np.ndarray) -> None:
        """Send one servo joint target (rad). Raises BackendError if refused."""

    def hold(self) -> None:
        """Stop motion at once (the driver calls this on stop, fault and watchdog)."""

    def acknowledge_fault(self) -> None:
        """Operator reset: clear what the device lets a client clear (e.g. unlock a protective
        stop). Never starts motion. Raises BackendError if the device refuses."""

    def close(self) -> None: ...


class GripperBackend(Protocol):
    def read(self) -> GripperMeasurement: ...

    def command(self, coord: float) -> None:
        """Move the fingers toward ``coord`` in [0 open, 1 closed]."""

    def acknowledge_fault(self) -> None:
        """Operator reset: e.g. the gripper's alarm reset. Never moves the fingers."""

    def close(self) -> None: ...
