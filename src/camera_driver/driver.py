"""Camera driver: the newest frame, if it is fresh enough, never a wait.

Readers (the camera node, a recorder, the policy) ask for the latest frame
with a maximum age. A stalled or unplugged camera yields None with a reason
instead of blocking, so a camera can never stall control.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from libero_workcell.contract import IMAGE_SIZE


@dataclass(frozen=True)
class Frame:
    camera: str
    index: int  # increments per captured frame
    wall_time: float  # capture time, time.time()
    rgb: np.ndarray  # (IMAGE_SIZE, IMAGE_SIZE, 3) uint8
    fovy: float  # vertical field of view, degrees (NaN: unknown)


class CameraBackend(Protocol):
    name: str

    def latest(self) -> Frame | None: ...

    def latest_index(self) -> int:
        """Index of the newest frame (0: none), without copying it."""

    def close(self) -> None: ...


class CameraDriver:
    def __init__(self, backend: CameraBackend, max_frame_age: float) -> None:
        if not max_frame_age > 0:
            raise ValueError(f"max_frame_age must be positive, got {max_frame_age!r}")
        self.backend = backend
        self.max_frame_age = max_frame_age
        self.stale_reads = 0
        self._last_index = -1

    def read_latest(self) -> tuple[Frame | None, str]:
        """(frame, "ok") for a fresh frame; (None, reason) when there is none or it is too old."""
        frame = self.backend.latest()
        if frame is None:
            return None, "no frame yet"
        age = time.time() - frame.wall_time
        if age > self.max_frame_age:
            self.stale_reads += 1
            return None, f"newest frame is {age * 1e3:.0f} ms old (max {self.max_frame_age * 1e3:.0f} ms)"
        if frame.rgb.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
            return None, f"frame has shape {frame.rgb.shape}, expected {(IMAGE_SIZE, IMAGE_SIZE, 3)}"
        return frame, "ok"

    def read_new(self) -> tuple[Frame | None, str]:
        """Like :meth:`read_latest` but None (reason "no new frame") if it was already returned."""
        if self.backend.latest_index() == self._last_index:
            return None, "no new frame"  # cheap: no frame copied
        frame, reason = self.read_latest()
        if frame is None:
            return None, reason
        if frame.index == self._last_index:
            return None, "no new frame"
        self._last_index = frame.index
        return frame, reason
