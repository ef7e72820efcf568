"""UVC camera through OpenCV VideoCapture, on a capture thread.

The device is an index, a /dev/videoN path, a video file or a stream URL. A
read failure (unplugged, end of a file) closes and reopens the capture with
backoff, so a file or a re-plugged camera comes back by itself. A regular
file is paced at its own frame rate so it behaves like a live camera.
"""

from __future__ import annotations

import os
import time

import cv2

from camera_driver.capture import CLOCK_ARRIVAL, CLOCK_DEVICE_MAPPED, RawFrame, SourceError, ThreadedBackend
from camera_driver.uvc.config import UvcConfig

# A V4L2 buffer stamp this far behind time.monotonic() (s) is still trusted as the capture time.
_MAX_PLAUSIBLE_LATENCY = 1.0


class UvcSource:
    """FrameSource for one OpenCV VideoCapture."""

    def __init__(self, config: UvcConfig) -> None:
        self.config = config
        self._cap: cv2.VideoCapture | None = None
        self._is_file = False
        self._file_period = 0.0
        self._next_due = 0.0
        self._v4l2 = False

    def open(self) -> None:
        c = self.config
        timeout_ms = int(c.grab_timeout * 1000)
        target: int | str = c.index if c.index is not None else c.device
        self._is_file = isinstance(target, str) and os.path.isfile(target)
        self._v4l2 = not self._is_file and (isinstance(target, int) or target.startswith("/dev/video"))
        if self._v4l2:
            # No open() parameters: V4L2 takes none, and OpenCV fails an open whose parameters a
            # backend cannot apply. A hung V4L2 read ends after OpenCV's select timeout
            # (OPENCV_VIDEOIO_V4L_SELECT_TIMEOUT, 10 s): only this thread waits, readers see the frame age.
            cap = cv2.VideoCapture(target, cv2.CAP_V4L2)
        else:  # files and URLs go through FFmpeg, which honours both timeouts
            params = [cv2.CAP_PROP_OPEN_TIMEOUT_MSEC, max(timeout_ms, 2000), cv2.CAP_PROP_READ_TIMEOUT_MSEC, timeout_ms]
            cap = cv2.VideoCapture(target, cv2.CAP_ANY, params)
        if not cap.isOpened():
            cap.release()
            raise SourceError(f"cannot open {c.device!r}")
        if not self._is_file:
            if c.fourcc:  # before the size: V4L2 picks the sizes the chosen pixel format offers
                cap.set(cv2.CAP_PROP_FOURCC, cv2.VideoWriter_fourcc(*c.fourcc))
            if c.width and c.height:
                cap.set(cv2.CAP_PROP_FRAME_WIDTH, c.width)
                cap.set(cv2.CAP_PROP_FRAME_HEIGHT, c.height)
            if c.fps:
                cap.set(cv2.CAP_PROP_FPS, c.fps)
            cap.set(cv2.CAP_PROP_BUFFERSIZE, 1)  # the newest frame, not a queue of old ones (V4L2)
        fps = cap.get(cv2.CAP_PROP_FPS)
        self._file_period = 1.0 / fps if self._is_file and fps > 0 else 0.0
        self._next_due = time.monotonic()
        self._cap = cap

    def grab(self) -> RawFrame:
        assert self._cap is not None
        if self._file_period:
            delay = self._next_due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._next_due = max(self._next_due + self._file_period, time.monotonic() - self._file_period)
        ok, image = self._cap.read()
        arrival, mono = time.time(), time.monotonic()
        if not ok or image is None:
            raise SourceError(f"read from {self.config.device!r} failed (unplugged, stalled or end of file)")
        if image.ndim == 2:
            image = cv2.cvtColor(image, cv2.COLOR_GRAY2BGR)
        if self._v4l2:  # V4L2 reports the driver's buffer time stamp (CLOCK_MONOTONIC) as POS_MSEC
            stamp = self._cap.get(cv2.CAP_PROP_POS_MSEC) / 1000.0
            if 0.0 <= mono - stamp < _MAX_PLAUSIBLE_LATENCY:
                return RawFrame(image, True, arrival - (mono - stamp), CLOCK_DEVICE_MAPPED)
        return RawFrame(image, True, arrival, CLOCK_ARRIVAL)

    def close(self) -> None:
        if self._cap is not None:
            self._cap.release()
        self._cap = None

    def fovy(self, crop_height: int) -> float:
        return self.config.fovy  # configured for the square image; OpenCV does not know the lens


class UvcBackend(ThreadedBackend):
    """CameraBackend for a UVC camera: newest frame of a capture thread, never a wait."""

    source: UvcSource

    def __init__(self, name: str, config: UvcConfig) -> None:
        self.config = config
        super().__init__(name, UvcSource(config), join_timeout=config.grab_timeout + 2.0)
