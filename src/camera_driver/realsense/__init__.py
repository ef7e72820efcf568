"""An Intel RealSense's color stream through pyrealsense2 (or a .db3/.bag recording through the same pipeline)."""

from __future__ import annotations

from typing import Any

from camera_driver.camera_type import CameraType
from camera_driver.realsense.config import RealSenseConfig


def _source() -> Any:
    from camera_driver.realsense.backend import RealSenseSource

    return RealSenseSource


def _backend() -> Any:
    from camera_driver.realsense.backend import RealSenseBackend

    return RealSenseBackend


def _describe(c: RealSenseConfig) -> str:
    return f"RealSense, recording {c.playback_file}" if c.playback_file else \
        f"RealSense {c.serial or 'the only one connected'}"  # fmt: skip


TYPE = CameraType("realsense", RealSenseConfig, _source, _backend, _describe,
                  "check the cable (USB 3) and realsense.serial (`rs-enumerate-devices` lists the connected ones)")
