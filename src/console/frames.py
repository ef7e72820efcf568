"""The newest frame of each camera, and its JPEG for the page, encoded once per frame and only when asked.

Why newest-only: a page that cannot keep up (a slow link, a busy laptop) must show the newest picture late,
never a queue of old ones, and a lagging page must cost the graph nothing. Why on demand: a camera's frames are
the console's largest cost, so it takes them only while a page watches (:meth:`FrameStore.want`). The node
stores each frame (a copy of its bytes, nothing more) on its executor; the web server encodes the frame a client
asks for, once, and every client of that camera shares the result.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import cv2
import numpy as np

RAW: Final = "raw"
POLICY: Final = "policy"
VIEWS: Final = (RAW, POLICY)
JPEG_QUALITY: Final = 80
RATE_WINDOW_S: Final = 2.0  # the frame rate shown is over this many seconds of arrivals


@dataclass(frozen=True)
class Frame:
    seq: int  # counts frames of this camera received by the console, from 1
    rgb: np.ndarray  # (H, W, 3) uint8, upright, the console's own copy
    received: float  # wall time


class FrameStore:
    """Per camera: the newest frame, its arrival rate, and a cache of its JPEG per view.

    ``policy_transform``: what the policy is shown of a frame (the deploy graph's view and resize), or None
    when there is no policy view to show."""

    def __init__(self, cameras: tuple[str, ...], policy_transform: Callable[[np.ndarray], np.ndarray] | None = None,
                 quality: int = JPEG_QUALITY, clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.cameras = tuple(cameras)
        self._policy = policy_transform
        self._quality = int(quality)
        self._clock = clock
        self._lock = threading.Lock()
        self._frames: dict[str, Frame] = {}
        self._arrivals: dict[str, deque[float]] = {c: deque(maxlen=256) for c in self.cameras}
        self._jpeg: dict[tuple[str, str], tuple[int, bytes]] = {}
        self._wanted: dict[str, float] = {}  # camera -> when a page last asked for it
        self.rejected: dict[str, int] = dict.fromkeys(self.cameras, 0)

    def want(self, camera: str) -> None:
        """A page is watching ``camera`` now (its feed asks for frames): the node keeps its subscription."""
        self._wanted[camera] = self._clock()

    def wanted(self, camera: str, within: float) -> bool:
        """Whether a page asked for ``camera`` in the last ``within`` s (no page: the console takes no frames)."""
        return self._clock() - self._wanted.get(camera, -float("inf")) <= within

    def put(self, camera: str, height: int, width: int, encoding: str, data: bytes | memoryview) -> bool:
        """Store a frame from an image message's fields; False (and counted) for one that is not rgb8 of its
        stated size."""
        if camera not in self._arrivals:
            return False
        size = int(height) * int(width) * 3
        if encoding != "rgb8" or height <= 0 or width <= 0 or len(data) != size:
            self.rejected[camera] += 1
            return False
        rgb = np.frombuffer(bytes(data), dtype=np.uint8).reshape(int(height), int(width), 3)
        now = self._clock()
        with self._lock:
            previous = self._frames.get(camera)
            self._frames[camera] = Frame((previous.seq if previous else 0) + 1, rgb, now)
            self._arrivals[camera].append(now)
        return True

    def seq(self, camera: str) -> int:
        """The newest frame's number (0: none yet)."""
        with self._lock:
            frame = self._frames.get(camera)
            return frame.seq if frame else 0

    def rate_hz(self, camera: str) -> float:
        """Frames per second received over the last :data:`RATE_WINDOW_S`."""
        now = self._clock()
        with self._lock:
            recent = [t for t in self._arrivals.get(camera, ()) if now - t <= RATE_WINDOW_S]
        if len(recent) < 2:
            return 0.0
        return (len(recent) - 1) / max(recent[-1] - recent[0], 1e-6)

    def stats(self) -> dict[str, dict[str, float | int]]:
        now = self._clock()
        out: dict[str, dict[str, float | int]] = {}
        for camera in self.cameras:
            with self._lock:
                frame = self._frames.get(camera)
            out[camera] = {"seq": frame.seq if frame else 0, "rate_hz": round(self.rate_hz(camera), 2),
                           "age_s": round(now - frame.received, 3) if frame else -1.0,
                           "rejected": self.rejected[camera]}  # fmt: skip
        return out

    @property
    def has_policy_view(self) -> bool:
        return self._policy is not None

    def jpeg(self, camera: str, view: str = RAW) -> tuple[int, bytes] | None:
        """(seq, JPEG bytes) of the newest frame in ``view``; None before the first frame (or no policy view)."""
        if view not in VIEWS or (view == POLICY and self._policy is None):
            return None
        self.want(camera)
        with self._lock:
            frame = self._frames.get(camera)
            cached = self._jpeg.get((camera, view))
        if frame is None:
            return None
        if cached is not None and cached[0] == frame.seq:
            return cached
        image = frame.rgb if view == RAW else self._policy(frame.rgb)  # type: ignore[misc]
        ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(image[:, :, ::-1]), [cv2.IMWRITE_JPEG_QUALITY,
                                                                                  self._quality])  # fmt: skip
        if not ok:
            return None
        encoded = (frame.seq, buf.tobytes())
        with self._lock:
            self._jpeg[(camera, view)] = encoded
        return encoded
