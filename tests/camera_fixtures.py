"""Camera test sources made with the real libraries: a RealSense recording and a video file.

Every frame i is one flat color, rgb_of(i), with a white band outside the
centered square (the crop must remove it) and distinct R/G/B, so a test can
read the frame number back and catch an RGB/BGR swap.
"""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np


def rgb_of(i: int) -> tuple[int, int, int]:
    """Color of frame i: R encodes the frame number modulo 29, G and B are fixed and differ from R."""
    return (20 + 8 * (i % 29), 90, 210)


def frame_number(rgb: np.ndarray) -> int:
    """Inverse of rgb_of (frame number modulo 29) from the center pixel of a captured frame."""
    r = float(rgb[rgb.shape[0] // 2, rgb.shape[1] // 2, 0])
    return round((r - 20) / 8)


def pattern(i: int, width: int, height: int) -> np.ndarray:
    """(height, width, 3) RGB: rgb_of(i), white outside the centered square."""
    img = np.full((height, width, 3), 255, np.uint8)
    side = min(width, height)
    y0, x0 = (height - side) // 2, (width - side) // 2
    img[y0 : y0 + side, x0 : x0 + side] = rgb_of(i)
    return img


def make_realsense_recording(
    path: Path,
    n_frames: int = 20,
    width: int = 320,
    height: int = 240,
    fps: int = 30,
    hardware_clock: bool = False,
    bgr: bool = False,
) -> Path:
    """Record n_frames color frames from a pyrealsense2 software_device to a .db3 (this version wants .db3).

    hardware_clock: stamp frames in the hardware_clock domain starting at 1000 ms
    (like a camera's own clock), else system_time (wall-clock ms, as recorded).
    bgr: store bgr8 pixels (same colors) instead of rgb8.
    """
    from camera_driver.realsense_backend import import_pyrealsense2

    rs = import_pyrealsense2()
    dev = rs.software_device()
    sensor = dev.add_sensor("Color")
    vs = rs.video_stream()
    vs.type, vs.index, vs.uid = rs.stream.color, 0, 0
    vs.width, vs.height, vs.fps, vs.bpp = width, height, fps, 3
    vs.fmt = rs.format.bgr8 if bgr else rs.format.rgb8
    intr = rs.intrinsics()
    intr.width, intr.height, intr.fx, intr.fy, intr.ppx, intr.ppy = width, height, 200.0, 200.0, width / 2, height / 2
    vs.intrinsics = intr
    profile = sensor.add_video_stream(vs).as_video_stream_profile()
    recorder = rs.recorder(str(path), dev)
    queue = rs.frame_queue(n_frames + 4)
    sensor.open(profile)
    sensor.start(queue)
    t0 = 1000.0 if hardware_clock else time.time() * 1000.0
    domain = rs.timestamp_domain.hardware_clock if hardware_clock else rs.timestamp_domain.system_time
    start = time.monotonic()
    for i in range(n_frames):
        f = rs.software_video_frame()
        img = pattern(i, width, height)
        f.pixels = np.ascontiguousarray(img[:, :, ::-1]) if bgr else img
        f.stride, f.bpp = width * 3, 3
        f.timestamp, f.domain, f.frame_number = t0 + i * 1000.0 / fps, domain, i
        f.profile = profile
        sensor.on_video_frame(f)
        # The recorder stores arrival times and playback is paced by them: keep them on the fps grid.
        time.sleep(max(0.0, start + (i + 1) / fps - time.monotonic()))
    sensor.stop()
    sensor.close()
    del recorder  # the file is finished when the recorder goes away
    return path


def make_video(path: Path, n_frames: int = 20, width: int = 320, height: int = 240, fps: float = 20.0) -> Path:
    """Write an MJPG .avi (the codec headless OpenCV always has) of pattern frames."""
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, (width, height))
    if not writer.isOpened():
        raise RuntimeError(f"cv2.VideoWriter cannot write {path}")
    for i in range(n_frames):
        writer.write(cv2.cvtColor(pattern(i, width, height), cv2.COLOR_RGB2BGR))
    writer.release()
    return path
