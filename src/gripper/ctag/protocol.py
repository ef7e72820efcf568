"""CTAG2F90D logic shared by every transport (direct Modbus RTU, the AUBO tool-flange RS-485).

Register values <-> driver coordinate, and grasp inference: the gripper has no documented
object-detected register, so a grasp is inferred when the fingers stop short of a close
command. Transport-free: the caller feeds positions with their time stamps.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass

from transports.errors import BackendError


@dataclass(frozen=True)
class StallSettings:
    stall_time: float = 0.15  # s of no motion short of a close target -> object detected
    stall_tolerance: int = 20  # counts of movement that still count as "not moving"
    stall_margin: int = 200  # counts the fingers must stop short of the target


def signed32(hi: int, lo: int) -> int:
    """Feedback (hi << 16) | lo as a signed 32-bit count: a slightly negative reading must not become 'closed'."""
    raw = ((int(hi) & 0xFFFF) << 16) | (int(lo) & 0xFFFF)
    return raw - (1 << 32) if raw >= 1 << 31 else raw


def coord_to_counts(coord: float, position_max: int) -> int:
    """Driver coordinate [0 open, 1 closed] -> target counts (clamped). NaN is refused, never
    clamped: ``max(0.0, nan)`` is 0.0, which would open the fingers on a bad command."""
    value = float(coord)
    if not math.isfinite(value):
        raise BackendError(f"refusing gripper command {coord!r}: not a finite coordinate")
    return round(min(1.0, max(0.0, value)) * position_max)


def counts_to_coord(position: int, position_max: int) -> float:
    return min(1.0, max(0.0, position / position_max))


def split32(value: int) -> tuple[int, int]:
    """32-bit target -> (high word, low word), as the gripper wants it."""
    return (value >> 16) & 0xFFFF, value & 0xFFFF


class GraspTracker:
    """Stall-based object detection; thread-safe (bus/poll thread feeds, driver thread commands)."""

    def __init__(self, settings: StallSettings) -> None:
        self.s = settings
        self._lock = threading.Lock()
        self.target: int | None = None  # counts, last commanded
        self.last_pos: int | None = None
        self._still_since: float | None = None
        self._start_pos: int | None = None  # position when the current target was commanded
        self._object = False

    def observe(self, pos: int, stamp: float) -> None:
        """Grasp inference: the fingers closed some way, then stood still for stall_time clearly short of
        the target (not moving at all is a refused command, not a grasp)."""
        s = self.s
        with self._lock:
            if self._start_pos is None:
                self._start_pos = pos
            if self.last_pos is None or abs(pos - self.last_pos) > s.stall_tolerance:
                self.last_pos, self._still_since = pos, stamp
            target = self.target
            assert self._still_since is not None
            self._object = (
                target is not None
                and target > 0
                and pos > self._start_pos + s.stall_tolerance
                and pos < target - s.stall_margin
                and stamp - self._still_since >= s.stall_time
            )

    def commanded(self, target: int) -> None:
        """A new target was sent. Policies send continuous gripper values: a new close target beyond where
        the fingers stand continues the same grasp (keep the inference); anything else re-arms it."""
        with self._lock:
            prev, pos = self.target, self.last_pos
            same_grasp = bool(prev) and target > 0 and pos is not None and target > pos + self.s.stall_margin
            if target != prev and not same_grasp:
                self.last_pos, self._start_pos, self._object = None, None, False
            self.target = target

    @property
    def object_detected(self) -> bool:
        with self._lock:
            return self._object
