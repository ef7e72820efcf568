"""Real camera configurations, validated once at start-up (a bad value names itself there, not mid-run).

The node fills these from ROS parameters (``parameter_defaults()`` gives the
typed defaults to declare; ``from_mapping`` rejects unknown keys so a typo
cannot silently fall back to a default).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import IMAGE_SIZE

# Which real device each camera is by default (LIBERO-Industry workcell: RealSense on the wrist, UVC outside).
DEFAULT_DEVICE_TYPE = {"wrist": "realsense", "external": "uvc"}
DEVICE_TYPES = ("realsense", "uvc")


class CameraConfigError(ValueError):
    pass


def _check_int(cfg: object, name: str, lo: int, hi: int) -> None:
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CameraConfigError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")


def _check_positive(cfg: object, name: str) -> None:
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise CameraConfigError(f"{name} must be a positive number, got {v!r}")
    object.__setattr__(cfg, name, float(v))


def _check_type(cfg: object, name: str, kind: type) -> None:
    v = getattr(cfg, name)
    if not isinstance(v, kind):
        raise CameraConfigError(f"{name} must be a {kind.__name__}, got {v!r}")


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
            _check_type(self, name, str)
        for name in ("playback_loop", "playback_real_time"):
            _check_type(self, name, bool)
        _check_int(self, "width", IMAGE_SIZE // 4, 4096)
        _check_int(self, "height", IMAGE_SIZE // 4, 4096)
        _check_int(self, "fps", 1, 300)
        _check_positive(self, "grab_timeout")


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
        _check_type(self, "device", str)
        _check_type(self, "fourcc", str)
        if not self.device.strip():
            raise CameraConfigError("device must be an index, a /dev/video path, a file or a URL, got ''")
        if self.fourcc and len(self.fourcc) != 4:
            raise CameraConfigError(f"fourcc must be 4 characters or '', got {self.fourcc!r}")
        _check_int(self, "width", 0, 8192)
        _check_int(self, "height", 0, 8192)
        if isinstance(self.fps, bool) or not isinstance(self.fps, (int, float)) or not 0 <= self.fps <= 1000:
            raise CameraConfigError(f"fps must be a number in [0, 1000], got {self.fps!r}")
        object.__setattr__(self, "fps", float(self.fps))
        if isinstance(self.fovy, bool) or not isinstance(self.fovy, (int, float)):
            raise CameraConfigError(f"fovy must be a number (NaN: unknown), got {self.fovy!r}")
        if not math.isnan(self.fovy) and not 0 < self.fovy < 180:
            raise CameraConfigError(f"fovy must be in (0, 180) degrees or NaN, got {self.fovy!r}")
        object.__setattr__(self, "fovy", float(self.fovy))
        _check_positive(self, "grab_timeout")

    @property
    def index(self) -> int | None:
        """The device as an OpenCV index when it is one ("0", "2"), else None."""
        return int(self.device) if self.device.strip().isdigit() else None
