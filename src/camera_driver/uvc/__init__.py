"""A UVC camera (or a video file / stream URL) through OpenCV."""

from __future__ import annotations

from typing import Any

from camera_driver.camera_type import CameraType
from camera_driver.uvc.config import UvcConfig


def _source() -> Any:
    from camera_driver.uvc.backend import UvcSource

    return UvcSource


def _backend() -> Any:
    from camera_driver.uvc.backend import UvcBackend

    return UvcBackend


TYPE = CameraType("uvc", UvcConfig, _source, _backend, lambda c: f"UVC {c.device}",
                  "check the cable and uvc.device (`v4l2-ctl --list-devices`); another program may hold the camera")
