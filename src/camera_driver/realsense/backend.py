"""RealSense color camera through pyrealsense2's pipeline, on a capture thread.

Hardware and recordings go through the same ``rs.pipeline``: ``enable_device(serial)``
for a camera, ``enable_device_from_file`` for a .db3/.bag recording (tests,
replay). ``try_wait_for_frames`` with a timeout means an unplugged camera
becomes a reported loss and a reopen, never a hang.
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from camera_driver.capture import (
    CLOCK_DEVICE,
    CLOCK_DEVICE_MAPPED,
    ClockMapper,
    EndOfStreamError,
    RawFrame,
    SourceError,
    ThreadedBackend,
    vertical_fov,
)
from camera_driver.realsense.config import RealSenseConfig

# Device time stamps this far behind arrival (s) still count as on the wall clock.
_MAX_PLAUSIBLE_LATENCY = 1.0


def import_pyrealsense2():
    """pyrealsense2, imported lazily (it needs libusb at import; the sim never does) and after rclpy.

    Imported before rclpy, a process that then creates an rclpy node segfaults
    at exit (pyrealsense2 2.59 bundles its own pybind11 and Fast DDS; rclpy
    first is fine), so rclpy is loaded first when it is installed.
    """
    with contextlib.suppress(ImportError):
        import rclpy  # noqa: F401

    import pyrealsense2 as rs

    return rs


_rs = import_pyrealsense2


class RealSenseSource:
    """FrameSource for one RealSense color stream (or its recording)."""

    def __init__(self, config: RealSenseConfig) -> None:
        self.config = config
        self._pipeline = None
        self._playback = None
        self._fy = float("nan")
        self._clock = ClockMapper()
        self._last_device_s = -float("inf")  # a looped recording's device clock starts over: the mapping too
        self.loops = 0  # times a looped recording started over
        self.domain = ""  # timestamp domain of the newest frame, e.g. "system_time"

    def open(self) -> None:
        rs = _rs()
        c = self.config
        cfg = rs.config()
        if c.playback_file:
            # A loop is librealsense's own repeat, never a stop and a reopen: its pipeline.stop() on a playback
            # crashes the process now and then (a native race: realsenseai/librealsense#8625, #10318), which at
            # every end of a short recording killed the camera node and with it the graph.
            cfg.enable_device_from_file(c.playback_file, repeat_playback=c.playback_loop)
            cfg.enable_stream(rs.stream.color)  # whatever the recording holds
        else:
            # Look first: pipeline.start() waits 15 s for a device that is not there, blocking close().
            devices = [d.get_info(rs.camera_info.serial_number) for d in rs.context().query_devices()]
            serial = c.serial
            if not serial:
                if len(devices) != 1:
                    raise SourceError(f"serial is empty and {len(devices)} RealSense devices are connected: {devices}")
                serial = devices[0]
            elif serial not in devices:
                raise SourceError(f"RealSense {serial} is not connected (connected: {devices})")
            cfg.enable_device(serial)
            cfg.enable_stream(rs.stream.color, c.width, c.height, rs.format.rgb8, c.fps)
        pipeline = rs.pipeline()
        profile = pipeline.start(cfg)
        self._pipeline = pipeline
        if c.playback_file:
            self._playback = profile.get_device().as_playback()
            self._playback.set_real_time(c.playback_real_time)
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        self._fy = float(color.get_intrinsics().fy)
        self._clock.reset()
        self._last_device_s = -float("inf")

    def grab(self) -> RawFrame:
        rs = _rs()
        assert self._pipeline is not None
        ok, frames = self._pipeline.try_wait_for_frames(int(self.config.grab_timeout * 1000))
        arrival = time.time()
        if not ok:
            if self._playback is not None and self._playback.current_status() == rs.playback_status.stopped:
                msg = f"end of playback file {self.config.playback_file}"
                raise SourceError(msg) if self.config.playback_loop else EndOfStreamError(msg)
            raise SourceError(f"no frame within {self.config.grab_timeout:.2f} s (unplugged or stalled)")
        color = frames.get_color_frame()
        if not color:
            raise SourceError("frameset without a color frame")
        fmt = color.get_profile().format()
        image = np.asanyarray(color.get_data())
        if fmt in (rs.format.rgba8, rs.format.bgra8):
            image = image[:, :, :3]
        elif fmt not in (rs.format.rgb8, rs.format.bgr8):
            raise SourceError(f"unsupported color format {fmt}")
        bgr = fmt in (rs.format.bgr8, rs.format.bgra8)
        device_s = color.get_timestamp() / 1000.0
        if device_s < self._last_device_s:  # a looped recording started over: its clock maps anew
            self._clock.reset()
            self.loops += 1
        self._last_device_s = device_s
        domain = color.get_frame_timestamp_domain()
        self.domain = domain.name
        on_wall_clock = domain in (rs.timestamp_domain.system_time, rs.timestamp_domain.global_time)
        # A recording's stamps are from when it was recorded: only live system/global stamps are "now".
        if self._playback is None and on_wall_clock and 0.0 <= arrival - device_s < _MAX_PLAUSIBLE_LATENCY:
            return RawFrame(image, bgr, device_s, CLOCK_DEVICE)
        return RawFrame(image, bgr, self._clock.wall_time(device_s, arrival), CLOCK_DEVICE_MAPPED)

    def close(self) -> None:
        if self._pipeline is not None:
            with contextlib.suppress(RuntimeError):  # already stopped (unplugged, playback ended)
                self._pipeline.stop()
        self._pipeline = None
        self._playback = None

    def fovy(self, crop_height: int) -> float:
        return vertical_fov(self._fy, crop_height)


class RealSenseBackend(ThreadedBackend):
    """CameraBackend for a RealSense: newest frame of a capture thread, never a wait."""

    source: RealSenseSource

    def __init__(self, name: str, config: RealSenseConfig) -> None:
        self.config = config
        super().__init__(name, RealSenseSource(config), join_timeout=config.grab_timeout + 2.0)
