"""What ``workcell check`` checks for conveyor_driver (libero_workcell.preflight): the drive answers.

A Modbus drive (``backend: modbus``) answers at its ID by holding-register reads only (the registers the node
polls: fault code and speed feedback), and reports no fault. A relay on the arm controller's digital output
(``backend: io``) is read through pyaubo_sdk in a child process: the login works and the output exists. Nothing
is written: the belt neither starts nor stops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from libero_workcell import faults
from libero_workcell import preflight as pf
from libero_workcell.contract import Params
from libero_workcell.preflight import FAIL, OK, Check, Context


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    if params.get(Params.USE_SIM, True):
        return []
    backend = str(params.get("backend", "modbus"))
    return [_relay(node, params, ctx) if backend == "io" else _drive(node, params, ctx)]


def _drive(node: str, params: Mapping[str, Any], ctx: Context) -> Check:
    from conveyor_driver.modbus_backend import ConveyorConfigError, ConveyorModbusConfig
    from transports.modbus_bus import BusError, read_once

    try:
        cfg = ConveyorModbusConfig.from_mapping(pf.section(params, "modbus", ConveyorModbusConfig.parameter_defaults()))
    except ConveyorConfigError as exc:
        return Check(node, "conveyor drive settings", FAIL, str(exc), "fix conveyor_driver.modbus.* in the cell file")
    what = f"{cfg.preset} at Modbus ID {cfg.slave_id} on {cfg.port} ({cfg.baudrate} 8{cfg.parity}{cfg.stopbits})"
    if ctx.ports_busy:
        return pf.skipped_busy(node, what, ctx)
    try:
        regs = read_once(cfg.serial(), cfg.poll_blocks(), timeout=min(ctx.timeout, 2.0), name="conveyor drive")
    except BusError as exc:
        return Check(node, what, FAIL, str(exc),
                     "check the adapter's name (udev), the cable, conveyor_driver.modbus.slave_id / modbus.baudrate "
                     "and the drive's own communication settings (its manual: station address, baud rate, RTU)")
    code = regs.get(cfg.reg_fault, 0) if cfg.reg_fault >= 0 else 0
    if code:
        return Check(node, what, FAIL, f"answers with fault code {code} (0x{code:04X})",
                     faults.BY_CODE["BELT-DRIVE"].recovery)  # fmt: skip
    return Check(node, what, OK, "answers, no fault (read only: the belt was not started)")


def _relay(node: str, params: Mapping[str, Any], ctx: Context) -> Check:
    from conveyor_driver.io_backend import ConveyorIoConfig, ConveyorIoConfigError

    try:
        cfg = ConveyorIoConfig.from_mapping(pf.section(params, "io", ConveyorIoConfig.parameter_defaults()))
    except ConveyorIoConfigError as exc:
        return Check(node, "conveyor relay settings", FAIL, str(exc), "fix conveyor_driver.io.* in the cell file")
    what = f"belt relay on digital output {cfg.do_index} of {cfg.ip or '(no address)'}:{cfg.port}"
    if not cfg.ip:
        return Check(node, what, FAIL, "conveyor_driver.io.ip is empty", "set the arm controller's address in the "
                     "cell file: conveyor_driver: {io: {ip: ...}}")  # fmt: skip
    arg = {"ip": cfg.ip, "port": cfg.port, "user": cfg.user, "password": cfg.password,
           "connect_timeout": cfg.connect_timeout, "request_timeout": max(cfg.request_timeout, 1.0),
           "do_index": cfg.do_index}  # fmt: skip
    try:
        got = pf.in_child("conveyor_driver.preflight:probe_output", arg, ctx.timeout)
    except pf.ProbeError as exc:
        got = {"error": f"pyaubo_sdk: {exc}"}
    if "error" in got:
        return Check(node, what, FAIL, str(got["error"]), "check the network to the controller and "
                     "conveyor_driver.io.ip / io.user / io.password in the cell file")  # fmt: skip
    if not 0 <= cfg.do_index < int(got["outputs"]):
        return Check(node, what, FAIL, f"the controller has {got['outputs']} standard digital outputs",
                     f"set conveyor_driver.io.do_index to the output wired to the relay (0..{int(got['outputs']) - 1})")
    state = "on" if got["level"] == cfg.active_high else "off"
    return Check(node, what, OK, f"the controller answers; the output exists and reads {state} (read only)")


def probe_output(arg: dict[str, Any]) -> dict[str, Any]:
    """In the child process: log in, count the standard digital outputs, read the relay's. Reads only."""
    from transports.arcs.session import ArcsSession
    from transports.errors import BackendError

    session = ArcsSession(arg["ip"], arg["port"], arg["user"], arg["password"], arg["connect_timeout"],
                          arg["request_timeout"])  # fmt: skip
    try:
        robot = session.open()
        io = session.call(robot.getIoControl)
        outputs = int(session.call(io.getStandardDigitalOutputNum))
        level = bool(session.call(io.getStandardDigitalOutput, arg["do_index"])) if arg["do_index"] < outputs else \
            False  # fmt: skip
        return {"outputs": outputs, "level": level}
    except BackendError as exc:
        return {"error": str(exc)}
    finally:
        session.close()
