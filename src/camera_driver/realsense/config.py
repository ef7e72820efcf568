"""A RealSense camera's configuration: its color stream by serial, or a recording instead."""

from __future__ import annotations

from dataclasses import dataclass

from camera_driver.config import CameraConfigError, check_int, check_positive, check_type
from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import IMAGE_SIZE


@dataclass(frozen=True)
class RealSenseConfig(MappedConfig):
    """Color stream of one RealSense, selected by serial; or a recording (``playback_file``) instead."""

    error = CameraConfigError
    label = "RealSense"

    serial: str = ""  # device serial number; "" = the only connected device (refused if several)
    width: int = 640  # requested color stream; cropped/resized to IMAGE_SIZE after capture
    height: int = 480
    fps: int = 30
    playback_file: str = ""  # a .db3 (or .bag) recording played through the same pipeline; "" = hardware
    playback_loop: bool = False  # at the end of the file: start over (True) or stop with status "ended"
    playback_real_time: bool = True  # pace playback by the recorded timestamps
    grab_timeout: float = 1.0  # s without a frame -> device lost, reopen

    def __post_init__(self) -> None:
        for name in ("serial", "playback_file"):
            check_type(self, name, str)
        for name in ("playback_loop", "playback_real_time"):
            check_type(self, name, bool)
        check_int(self, "width", IMAGE_SIZE // 4, 4096)
        check_int(self, "height", IMAGE_SIZE // 4, 4096)
        check_int(self, "fps", 1, 300)
        check_positive(self, "grab_timeout")
