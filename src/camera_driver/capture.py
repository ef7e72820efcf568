"""Capture thread shared by the real camera backends: grab fast, keep only the newest frame.

One thread per camera grabs frames as fast as the device delivers them and
publishes the newest into a lock-protected slot; readers take it without ever
waiting on the device. When grabbing fails or times out the thread closes the
device, records why (``status``/``last_error``) and reopens it with backoff
until closed. The slot keeps the last frame meanwhile: its age grows, so
``CameraDriver``'s ``max_frame_age`` refuses it, and nobody blocks.

Image policy (one for every backend, so recordings match): center-crop to
the largest square, then resize to IMAGE_SIZE with cv2.INTER_AREA (INTER_LINEAR
when upscaling), RGB uint8. The crop keeps the full vertical field of view of
a landscape sensor and never distorts the aspect ratio; AREA averages pixels
on downscale instead of aliasing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import Protocol

import cv2
import numpy as np

from camera_driver.driver import Frame
from libero_workcell.contract import IMAGE_SIZE

log = logging.getLogger(__name__)

# Frame timestamp sources (CaptureThread.clock): how wall_time was obtained.
CLOCK_DEVICE = "device"  # device timestamp already on the wall clock (RealSense system_time domain)
CLOCK_DEVICE_MAPPED = "device_mapped"  # device clock + estimated offset to the wall clock
CLOCK_ARRIVAL = "arrival"  # time.time() when the frame reached this process


class SourceError(RuntimeError):
    """The device failed to open or deliver a frame: close and reopen it."""


class EndOfStreamError(SourceError):
    """The source is finished for good (a playback file without looping): do not reopen."""


@dataclass(frozen=True)
class RawFrame:
    image: np.ndarray  # (h, w, 3) uint8 as delivered
    bgr: bool  # channel order of ``image``
    wall_time: float  # capture time on time.time()'s clock
    clock: str  # CLOCK_* the wall_time came from


class FrameSource(Protocol):
    """A device seen from the capture thread; every call is made from that one thread."""

    def open(self) -> None:
        """Open and start streaming; raise SourceError (or anything) on failure."""

    def grab(self) -> RawFrame:
        """The next frame, waiting at most the source's own timeout; raise SourceError on loss."""

    def close(self) -> None:
        """Release the device; must not raise, may be called when not open."""

    def fovy(self, crop_height: int) -> float:
        """Vertical field of view in degrees of the centered crop_height rows (NaN: unknown)."""


def to_square_rgb(image: np.ndarray, bgr: bool, size: int = IMAGE_SIZE) -> np.ndarray:
    """Center-crop to a square and resize to ``size`` x ``size`` RGB uint8 (a new, contiguous array)."""
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise SourceError(f"expected an (h, w, 3) uint8 image, got {image.shape} {image.dtype}")
    h, w = image.shape[:2]
    side = min(h, w)
    y0, x0 = (h - side) // 2, (w - side) // 2
    square = image[y0 : y0 + side, x0 : x0 + side]
    if side != size:
        interp = cv2.INTER_AREA if side > size else cv2.INTER_LINEAR
        square = cv2.resize(square, (size, size), interpolation=interp)  # a new array
    else:
        square = square.copy()  # never alias the device's buffer
    return cv2.cvtColor(square, cv2.COLOR_BGR2RGB) if bgr else square


class ClockMapper:
    """Map a device clock (seconds) to wall time: offset = smallest (arrival - device) seen recently.

    The smallest observed latency is the best estimate of the clock offset
    (transport delay only adds); a sliding window lets it follow clock drift.
    """

    def __init__(self, window: int = 120) -> None:
        self._window = window
        self._offsets: list[float] = []

    def reset(self) -> None:
        self._offsets.clear()

    def wall_time(self, device_s: float, arrival: float) -> float:
        self._offsets.append(arrival - device_s)
        if len(self._offsets) > self._window:
            del self._offsets[0]
        return device_s + min(self._offsets)


def vertical_fov(fy: float, crop_height: int) -> float:
    """Vertical field of view (deg) of crop_height pixel rows with focal length fy pixels."""
    return math.degrees(2.0 * math.atan(crop_height / (2.0 * fy))) if fy > 0 else math.nan


class CaptureThread:
    """Runs one FrameSource on a daemon thread and serves its newest frame.

    Attributes read by the node's diagnostics: ``status`` (opening, streaming,
    reconnecting, ended, closed), ``last_error``, ``clock`` (CLOCK_* of the
    newest frame), ``frames``, ``reconnects``, ``fps``, ``latency``; or all of them via ``diagnostics()``.
    """

    def __init__(
        self,
        name: str,
        source: FrameSource,
        backoff_initial: float = 0.05,
        backoff_max: float = 1.0,
        join_timeout: float = 3.0,
    ) -> None:
        self.name = name
        self._source = source
        self._backoff_initial = backoff_initial
        self._backoff_max = backoff_max
        self._join_timeout = join_timeout
        self._lock = threading.Lock()
        self._frame: Frame | None = None
        self._index = 0
        self._stop = threading.Event()
        self.status = "opening"
        self.last_error = ""
        self.clock = ""
        self.frames = 0
        self.reconnects = 0
        self.latency = math.nan  # s from capture time to the slot, newest frame
        self.fps = math.nan  # delivered frame rate, smoothed
        self._last_publish = math.nan
        self._period = math.nan
        self._thread = threading.Thread(target=self._run, name=f"camera-{name}", daemon=True)
        self._thread.start()

    # -- readers (any thread, never wait on the device) --
    def latest(self) -> Frame | None:
        """The newest frame; its array is read-only, so sharing it without a copy is safe."""
        with self._lock:
            return self._frame

    def latest_index(self) -> int:
        with self._lock:
            return self._index

    def close(self) -> None:
        """Stop the thread (it closes the device itself) and wait for it up to join_timeout."""
        self._stop.set()
        self._thread.join(timeout=self._join_timeout)
        if self._thread.is_alive():
            log.warning("camera %s: capture thread still in a device call after %.1f s", self.name, self._join_timeout)
        self.status = "closed"

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def diagnostics(self) -> dict[str, str | int | float]:
        """Key values for the node's diagnostics message."""
        return {
            "status": self.status,
            "last_error": self.last_error,
            "clock": self.clock,
            "frames": self.frames,
            "reconnects": self.reconnects,
            "fps": round(self.fps, 1),
            "latency_ms": round(self.latency * 1e3, 1),
        }

    # -- capture thread --
    def _publish(self, raw: RawFrame) -> None:
        rgb = to_square_rgb(raw.image, raw.bgr)
        rgb.flags.writeable = False
        h, w = raw.image.shape[:2]
        fovy = self._source.fovy(min(h, w))
        with self._lock:
            self._index += 1
            self._frame = Frame(self.name, self._index, raw.wall_time, rgb, fovy)
        now = time.time()
        self.latency = now - raw.wall_time
        dt = now - self._last_publish  # NaN on the first frame
        if dt >= 0:  # smooth the period, not its inverse: one burst must not spike the rate
            self._period = dt if math.isnan(self._period) else 0.9 * self._period + 0.1 * dt
            self.fps = 1.0 / self._period if self._period > 0 else math.nan
        self._last_publish = now
        self.clock = raw.clock
        self.frames += 1

    def _run(self) -> None:
        backoff = self._backoff_initial
        while not self._stop.is_set():
            try:
                self.status = "opening" if self.frames == 0 and self.reconnects == 0 else "reconnecting"
                self._source.open()
                self.status = "streaming"
                while not self._stop.is_set():
                    self._publish(self._source.grab())
                    backoff = self._backoff_initial
            except EndOfStreamError as e:
                self.last_error = str(e)
                self.status = "ended"
                log.info("camera %s: %s", self.name, e)
                break
            except Exception as e:  # any device error: report, close, reopen
                error = f"{type(e).__name__}: {e}"
                # Warn once per distinct error, not once per retry of an unplugged camera.
                level = logging.DEBUG if error == self.last_error else logging.WARNING
                log.log(level, "camera %s: %s; reopening in %.2f s", self.name, error, backoff)
                self.last_error = error
                self.status = "reconnecting"
            self._close_source()
            if self._stop.wait(backoff):
                break
            backoff = min(backoff * 2.0, self._backoff_max)
            self.reconnects += 1
        self._close_source()

    def _close_source(self) -> None:
        try:
            self._source.close()
        except Exception as e:  # a failing close must not end the thread that reopens the device
            log.warning("camera %s: closing the device failed: %s", self.name, e)


class ThreadedBackend:
    """CameraBackend over a CaptureThread: the newest frame, never a wait on the device."""

    def __init__(self, name: str, source: FrameSource, join_timeout: float) -> None:
        self.name = name
        self.source = source
        self.capture = CaptureThread(name, source, join_timeout=join_timeout)

    def latest(self) -> Frame | None:
        return self.capture.latest()

    def latest_index(self) -> int:
        return self.capture.latest_index()

    def close(self) -> None:
        self.capture.close()

    @property
    def status(self) -> str:
        return self.capture.status

    @property
    def last_error(self) -> str:
        return self.capture.last_error

    def diagnostics(self) -> dict[str, str | int | float]:
        return self.capture.diagnostics()
