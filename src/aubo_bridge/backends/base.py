"""What the arm driver needs from an arm, whatever it is (the gripper's side: :mod:`gripper.base`).

``sim`` backends talk to the shared MuJoCo world; ``real`` backends to the AUBO ARCS controller. The driver
above holds all safety logic, so a backend only moves data and reports faults honestly, raising
:class:`transports.errors.BackendError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
