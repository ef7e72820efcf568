"""A UVC camera's configuration: a device index, a /dev/videoN path, or a video file / stream URL."""

from __future__ import annotations

import math
from dataclasses import dataclass

from camera_driver.config import CameraConfigError, check_int, check_positive, check_type
from libero_workcell.config_base import MappedConfig


@dataclass(frozen=True)
class UvcConfig(MappedConfig):
    """A UVC camera through OpenCV: a device index, a /dev/videoN path, or a video file / stream URL."""

    error = CameraConfigError
    label = "UVC"

    device: str = "0"  # "0" -> index 0; "/dev/video2"; "/path/clip.avi" (replayed at its fps); "rtsp://..."
    width: int = 640  # requested capture size (0: the device default); cropped/resized after capture
    height: int = 480
    fps: float = 30.0  # requested rate (0: the device default)
    fourcc: str = ""  # e.g. "MJPG" (USB 2 bandwidth for 30 fps at 640x480+); "" = the device default
    fovy: float = math.nan  # vertical field of view of the square image, degrees (NaN: unknown)
    grab_timeout: float = 1.0  # s a file/URL read may take (FFmpeg); V4L2 reads end at OpenCV's select timeout

    def __post_init__(self) -> None:
        check_type(self, "device", str)
        check_type(self, "fourcc", str)
        if not self.device.strip():
            raise CameraConfigError("device must be an index, a /dev/video path, a file or a URL, got ''")
        if self.fourcc and len(self.fourcc) != 4:
            raise CameraConfigError(f"fourcc must be 4 characters or '', got {self.fourcc!r}")
        check_int(self, "width", 0, 8192)
        check_int(self, "height", 0, 8192)
        if isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)) or not 0 <= self.fps <= 1000:
            raise CameraConfigError(f"fps must be a number in [0, 1000], got {self.fps!r}")
        object.__setattr__(self, "fps", float(self.fps))
        if isinstance(self.fovy, bool) or not isinstance(self.fovy, (int, float)):
            raise CameraConfigError(f"fovy must be a number (NaN: unknown), got {self.fovy!r}")
        if not math.isnan(self.fovy) and not 0 < self.fovy < 180:
            raise CameraConfigError(f"fovy must be in (0, 180) degrees or NaN, got {self.fovy!r}")
        object.__setattr__(self, "fovy", float(self.fovy))
        check_positive(self, "grab_timeout")

    @property
    def index(self) -> int | None:
        """The device as an OpenCV index when it is one ("0", "2"), else None."""
        return int(self.device) if self.device.strip().isdigit() else None
