"""What ``workcell check`` checks for a camera_driver node (libero_workcell.preflight): the camera gives a frame.

The camera as its type's settings name it (a RealSense by its serial or the recording that stands in for it, a
UVC camera by its device path or file): opened through the same source the node uses (the type's
``source``, :mod:`camera_driver.registry`), one frame grabbed, closed again. In a child process: pyrealsense2 can
crash its process on a pipeline stop, and a V4L2 read can block for OpenCV's select timeout.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from camera_driver.config import CameraConfigError
from camera_driver.registry import TYPES, camera_type
from libero_workcell import preflight as pf
from libero_workcell.contract import Params
from libero_workcell.preflight import FAIL, OK, Check, Context


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    if params.get(Params.USE_SIM, True):
        return []
    camera = str(params.get(Params.CAMERA_NAME, "external"))
    try:
        kind = camera_type(str(params.get("device_type") or ""), camera)
    except ValueError as exc:
        return [Check(node, f"{camera} camera", FAIL, str(exc), f"set {node}.device_type")]
    try:
        config = kind.config.from_mapping(pf.section(params, kind.name, kind.config.parameter_defaults()))
    except CameraConfigError as exc:
        return [Check(node, f"{camera} camera settings", FAIL, str(exc), f"fix {node}.{kind.name}.* in the cell file")]
    what = f"{camera} camera ({kind.describe(config)})"
    if ctx.ports_busy:
        return [pf.skipped_busy(node, what, ctx)]
    try:
        got = pf.in_child("camera_driver.preflight:grab_one", {"kind": kind.name, "config": asdict(config)},
                          ctx.timeout)  # fmt: skip
    except pf.ProbeError as exc:
        got = {"error": str(exc)}
    if "error" in got:
        return [Check(node, what, FAIL, str(got["error"]), kind.todo)]
    h, w, _ = got["shape"]
    return [Check(node, what, OK, f"gives frames ({w} x {h}, time stamps: {got['clock']})")]


def grab_one(arg: dict[str, Any]) -> dict[str, Any]:
    """In the child process: open the camera as the node does, grab one frame within its timeouts, close it."""
    from camera_driver.capture import SourceError

    kind = TYPES[arg["kind"]]
    config = kind.config.from_mapping(arg["config"])
    source = kind.source()(config)
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
