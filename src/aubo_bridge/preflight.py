"""What ``workcell check`` checks for aubo_bridge (libero_workcell.preflight): the ARCS controller and the gripper.

The controller through pyaubo_sdk in a child process (:func:`probe_controller`: the SDK can crash or freeze its
process): the RPC port answers, the login works, the robot and safety modes let the bridge start the arm; the
RTDE port streams frames. The gripper as its model's read-only probe for its path sees it (the CTAG2F90D on its own
RS-485 adapter: holding-register reads at its Modbus ID, gripper/ctag/probe.py). Nothing is powered on, enabled or
moved.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from aubo_bridge.backends.factory import ARCS_PARAMS
from gripper import registry
from libero_workcell import faults
from libero_workcell import preflight as pf
from libero_workcell.contract import Params
from libero_workcell.preflight import FAIL, OK, SKIP, WARN, Check, Context

RTDE_FRAMES = 3  # frames that must arrive for the stream to count as streaming
NETWORK_TODO = ("check the network to the controller (`ping IP`, `nc -zv IP PORT`), that it is on, and "
                "aubo_bridge.arcs.ip / arcs.rpc_port in the cell file (docs/bringup.md, 0. Install)")  # fmt: skip


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    if params.get(Params.USE_SIM, True):
        return []
    return [*_controller(node, params, ctx), _gripper(node, params, ctx)]


# ------------------------------------------------------------------------------------------- the controller
def _controller(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    from aubo_bridge.backends.arcs_config import ArcsConfig
    from aubo_bridge.config import ConfigError

    try:
        arcs = ArcsConfig.from_mapping(pf.section(params, "arcs", ARCS_PARAMS))
    except ConfigError as exc:
        return [Check(node, "ARCS settings", FAIL, str(exc), "fix aubo_bridge.arcs.* in the cell file")]
    rpc = f"ARCS RPC {arcs.ip or '(no address)'}:{arcs.rpc_port}"
    if not arcs.ip:
        return [Check(node, rpc, FAIL, "aubo_bridge.arcs.ip is empty (nothing is contacted by default)",
                      "set the controller's address in the cell file: aubo_bridge: {arcs: {ip: ...}}")]  # fmt: skip
    arg = {"ip": arcs.ip, "port": arcs.rpc_port, "user": arcs.user, "password": arcs.password,
           "connect_timeout": arcs.connect_timeout, "request_timeout": max(arcs.request_timeout, 1.0),
           "rtde_port": arcs.rtde_port, "rtde_hz": arcs.rtde_hz, "wait": min(ctx.timeout / 2, 3.0)}  # fmt: skip
    try:
        got = pf.in_child("aubo_bridge.preflight:probe_controller", arg, ctx.timeout)
    except pf.ProbeError as exc:
        return [Check(node, rpc, FAIL, f"pyaubo_sdk: {exc}", NETWORK_TODO)]
    if "error" in got:
        return [Check(node, rpc, FAIL, str(got["error"]), NETWORK_TODO)]
    out = [_rpc_check(node, rpc, arcs.user, got)]
    if "mode" in got:
        out.append(_modes_check(node, got))
    rtde = f"ARCS RTDE {arcs.ip}:{arcs.rtde_port}"
    needed = arcs.state_source == "rtde"
    if got.get("rtde_error") or got.get("rtde_frames", 0) < RTDE_FRAMES:
        why = got.get("rtde_error") or f"{got.get('rtde_frames', 0)} frames in {arg['wait']:g} s"
        use = ("the bridge's state comes from it (arcs.state_source: rtde)" if needed else
               "not used by this graph (arcs.state_source: rpc), needed for arcs.state_source:=rtde")  # fmt: skip
        todo = f"{use}: check arcs.rtde_port (AUBO's: 30010) and that RTDE is enabled on the controller"
        out.append(Check(node, rtde, FAIL if needed else WARN, why, todo))
    else:
        out.append(Check(node, rtde, OK, f"streams ({got['rtde_frames']} frames at {arcs.rtde_hz:g} Hz asked)"))
    return out


def _rpc_check(node: str, what: str, user: str, got: Mapping[str, Any]) -> Check:
    if got.get("rpc_error"):
        text = str(got["rpc_error"])
        todo = ("set aubo_bridge.arcs.user / arcs.password in the cell file to the controller's" if "login" in text
                else NETWORK_TODO)  # fmt: skip
        return Check(node, what, FAIL, text, todo)
    return Check(node, what, OK, f"answers; logged in as {user!r}")


def _modes_check(node: str, got: Mapping[str, Any]) -> Check:
    modes = f"robot mode {got['mode']}, safety mode {got['safety']}"
    fault = got.get("fault")
    if fault:
        known = faults.classify(str(fault), (faults.ARM,))
        todo = f"[{known.code}] {known.recovery}" if known else "clear it on the teach pendant"
        said = str(got["safety"]) in fault or str(got["mode"]) in fault
        return Check(node, "arm state", FAIL, modes if said else f"{modes}: {fault}", todo)
    return Check(node, "arm state", OK, f"{modes} (the bridge powers the arm on and starts it up; it stays disabled)")


def probe_controller(arg: dict[str, Any]) -> dict[str, Any]:
    """In the child process: log in over RPC and read the modes; subscribe RTDE and count frames. Reads only."""
    from aubo_bridge.backends.arcs import classify
    from transports.arcs.rtde import RtdeState
    from transports.arcs.session import ArcsSession
    from transports.errors import BackendError

    out: dict[str, Any] = {}
    session = ArcsSession(arg["ip"], arg["port"], arg["user"], arg["password"], arg["connect_timeout"],
                          arg["request_timeout"])  # fmt: skip
    try:
        robot = session.open()
        state = session.call(robot.getRobotState)
        mode, safety = session.call(state.getRobotModeType), session.call(state.getSafetyModeType)
        collided = bool(session.call(state.isCollisionOccurred))
        out.update(mode=getattr(mode, "name", str(mode)), safety=getattr(safety, "name", str(safety)),
                   fault=classify(int(mode), int(safety), collided)[1])
    except BackendError as exc:
        out["rpc_error"] = str(exc)
    finally:
        session.close()
    frames: list[float] = []
    rtde = RtdeState(arg["ip"], arg["rtde_port"], arg["user"], arg["password"], arg["rtde_hz"],
                     arg["connect_timeout"], lambda frame: frames.append(frame.arrived))  # fmt: skip
    try:
        rtde.open()
        deadline = time.monotonic() + arg["wait"]
        while len(frames) < RTDE_FRAMES and time.monotonic() < deadline:
            time.sleep(0.01)
        out["rtde_frames"] = len(frames)
        if rtde.error:
            out["rtde_error"] = rtde.error
    except BackendError as exc:
        out["rtde_error"] = str(exc)
    finally:
        rtde.close()
    return out


# ------------------------------------------------------------------------------------------- the gripper
def _gripper(node: str, params: Mapping[str, Any], ctx: Context) -> Check:
    """The gripper as its model's read-only probe for its path sees it (gripper.model.ReadOnlyProbe)."""
    try:
        model = registry.model(str(params.get("gripper_model", registry.DEFAULT_MODEL)))
        path_name = str(params.get("gripper_path", "modbus"))
        path = model.path(path_name)
    except ValueError as exc:
        return Check(node, "gripper model", FAIL, str(exc),
                     "fix aubo_bridge.gripper_model / gripper_path in the cell file")  # fmt: skip
    if path.probe is None:
        return Check(node, f"gripper {model.name} ({path_name})", SKIP,
                     "checked by the bridge at start: this path has no read-only check")  # fmt: skip
    settings = pf.section(params, path.prefix, dict(path.defaults))
    try:
        what = path.probe.describe(settings)
    except ValueError as exc:
        return Check(node, "gripper settings", FAIL, str(exc), f"fix aubo_bridge.{path.prefix}.* in the cell file")
    if ctx.ports_busy:
        return pf.skipped_busy(node, what, ctx)
    answered, detail, todo = path.probe.read(settings, min(ctx.timeout, 2.0))
    return Check(node, what, OK if answered else FAIL, detail, todo)
