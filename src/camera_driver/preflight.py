"""What ``workcell check`` checks for a camera_driver node (libero_workcell.preflight): the camera gives a frame.

The RealSense by its serial (or the recording that stands in for it), the UVC camera by its device path (or
file): opened through the same source the node uses (:mod:`camera_driver.realsense_backend`,
:mod:`camera_driver.uvc_backend`), one frame grabbed, closed again. In a child process: pyrealsense2 can crash
its process on a pipeline stop, and a V4L2 read can block for OpenCV's select timeout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from camera_driver.config import DEFAULT_DEVICE_TYPE, CameraConfigError, RealSenseConfig, UvcConfig
from libero_workcell import preflight as pf
from libero_workcell.contract import Params
from libero_workcell.preflight import FAIL, OK, Check, Context

CONFIGS = {"realsense": RealSenseConfig, "uvc": UvcConfig}
TODO = {
    "realsense": "check the cable (USB 3) and realsense.serial (`rs-enumerate-devices` lists the connected ones)",
    "uvc": "check the cable and uvc.device (`v4l2-ctl --list-devices`); another program may hold the camera",
}


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    if params.get(Params.USE_SIM, True):
        return []
    camera = str(params.get(Params.CAMERA_NAME, "external"))
    kind = str(params.get("device_type") or DEFAULT_DEVICE_TYPE.get(camera, ""))
    if kind not in CONFIGS:
        return [Check(node, f"{camera} camera", FAIL, f"device_type {kind!r} is not one of {sorted(CONFIGS)}",
                      f"set {node}.device_type")]  # fmt: skip
    try:
        values = asdict(CONFIGS[kind].from_mapping(pf.section(params, kind, CONFIGS[kind].parameter_defaults())))
    except CameraConfigError as exc:
        return [Check(node, f"{camera} camera settings", FAIL, str(exc), f"fix {node}.{kind}.* in the cell file")]
    what = f"{camera} camera ({_which(kind, values)})"
    if ctx.ports_busy:
        return [pf.skipped_busy(node, what, ctx)]
    try:
        got = pf.in_child("camera_driver.preflight:grab_one", {"kind": kind, "config": values}, ctx.timeout)
    except pf.ProbeError as exc:
        got = {"error": str(exc)}
    if "error" in got:
        return [Check(node, what, FAIL, str(got["error"]), TODO[kind])]
    h, w, _ = got["shape"]
    return [Check(node, what, OK, f"gives frames ({w} x {h}, time stamps: {got['clock']})")]


def _which(kind: str, c: Mapping[str, Any]) -> str:
    if kind == "realsense":
        return f"RealSense, recording {c['playback_file']}" if c["playback_file"] else \
            f"RealSense {c['serial'] or 'the only one connected'}"  # fmt: skip
    return f"UVC {c['device']}"


def grab_one(arg: dict[str, Any]) -> dict[str, Any]:
    """In the child process: open the camera as the node does, grab one frame within its timeouts, close it."""
    from camera_driver.capture import SourceError

    if arg["kind"] == "realsense":
        from camera_driver.realsense_backend import RealSenseSource as Source
    else:
        from camera_driver.uvc_backend import UvcSource as Source
    config = CONFIGS[arg["kind"]].from_mapping(arg["config"])
    source = Source(config)
    try:
        source.open()
        deadline = time.monotonic() + 3 * config.grab_timeout  # a camera's first reads can come empty
        while True:
            try:
                frame = source.grab()
                return {"shape": list(frame.image.shape), "clock": frame.clock}
            except SourceError:
                if time.monotonic() > deadline:
                    raise
    except (SourceError, RuntimeError) as exc:  # pyrealsense2 raises RuntimeError (no device, busy)
        return {"error": str(exc)}
    finally:
        source.close()
