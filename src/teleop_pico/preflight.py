"""What ``workcell check`` checks for teleop_pico (libero_workcell.preflight): where the controller samples come from.

The headset: the XRoboToolkit PC service streams (its time stamps advance), read through ``xrobotoolkit-sdk`` in
a child process (:func:`probe_headset`; the SDK keeps process-wide state and threads, and without its service it
answers zeros instead of failing). A scripted session: its file reads as a session.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from libero_workcell import faults
from libero_workcell import preflight as pf
from libero_workcell.preflight import FAIL, OK, WARN, Check, Context

SERVICE = "XRoboToolkit PC service (127.0.0.1:60061)"  # where the SDK looks for it (HARDWARE.md)
STAMPS = 3  # distinct time stamps that make a stream


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    source = str(params.get("source", "headset"))
    if source == "scripted":
        return [_session(node, str(params.get("session_file", "")))]
    if source != "headset":
        return [Check(node, "controller source", FAIL, f"source {source!r} is neither headset nor scripted",
                      f"set {node}.source (teleop_source:=headset)")]  # fmt: skip
    wait = min(ctx.timeout / 2, 3.0)
    try:
        got = pf.in_child("teleop_pico.preflight:probe_headset", {"wait": wait}, ctx.timeout)
    except pf.ProbeError as exc:
        got = {"error": f"xrobotoolkit-sdk: {exc}"}
    todo = faults.BY_CODE["TELEOP-NO-TRACKING"].recovery
    if "error" in got:
        return [Check(node, SERVICE, FAIL, str(got["error"]), todo)]
    if got["stamps"] == 0:
        return [Check(node, SERVICE, FAIL, f"no data within {wait:g} s", todo)]
    if got["stamps"] == 1:
        return [Check(node, SERVICE, FAIL, f"one sample, then nothing within {wait:g} s (the stream is frozen)",
                      faults.BY_CODE["TELEOP-FROZEN"].recovery)]  # fmt: skip
    if got["pose_zero"]:
        return [Check(node, SERVICE, WARN, "streams, but the right controller has no pose (not tracked)",
                      "turn the right controller on and keep it in the headset's view")]  # fmt: skip
    return [Check(node, SERVICE, OK, f"streams ({got['stamps']} time stamps in {got['seconds']:.2f} s); the right "
                  "controller is tracked")]  # fmt: skip


def _session(node: str, path: str) -> Check:
    from libero_workcell.config_files import find_config_file
    from teleop_pico.sources import SessionFileError, load_session

    what = f"scripted session {path}"
    try:
        script = load_session(find_config_file(path))
    except (FileNotFoundError, SessionFileError) as exc:
        return Check(node, what, FAIL, str(exc), "set teleop_session:= to a session file (teleop_pico/sources.py)")
    return Check(node, what, OK, f"{len(script.times)} keyframes, {script.duration:.1f} s")


def probe_headset(arg: dict[str, Any]) -> dict[str, Any]:
    """In the child process: start the SDK, count distinct time stamps for up to ``wait`` s, read the pose."""
    import xrobotoolkit_sdk as sdk

    sdk.init()
    try:
        stamps: set[int] = set()
        t0 = time.monotonic()
        while len(stamps) < STAMPS and time.monotonic() - t0 < arg["wait"]:
            if stamp := int(sdk.get_time_stamp_ns()):
                stamps.add(stamp)
            time.sleep(0.02)
        pose = [float(v) for v in sdk.get_right_controller_pose()]
        return {"stamps": len(stamps), "seconds": time.monotonic() - t0, "pose_zero": not any(pose)}
    finally:
        sdk.close()
