"""Loopback emulator of an AUBO ARCS controller's JSON-RPC port, for the real ``pyaubo_sdk`` client.

Wire format (what pyaubo_sdk 0.24.1 sends and accepts, see HARDWARE.md): every frame is
``b"SOF" + b"\\x01" + 4-byte big-endian length + body``; bodies are JSON-RPC 2.0, except
the login frame ``__login__\\n<user>\\n<password digest>\\n<sdk version>\\n``. Enums are
answered as strings ("Running", "Normal"), as the controller does.

The server runs in a child process, not a thread: the SDK keeps the GIL while it waits
for a reply, so an in-process server could never answer. The parent-side
:class:`ArcsEmulator` drives it over the child's stdin/stdout (one JSON line each way)
for fault injection and inspection. It binds 127.0.0.1 on an ephemeral port only.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import numpy as np
from transforms3d.axangles import mat2axangle
from transforms3d.euler import mat2euler

HEADER = b"SOF\x01"
# The digest pyaubo_sdk 0.24.1 sends for the password "123456" (captured on loopback;
# the algorithm is not documented). A wrong password sends a different digest.
DIGEST_123456 = "3353545435353664345433434443435463466335333566235443434253142434333426365553"
VERSION_CODE_OK = 24000  # accepted by SDK 0.24.1 (anything up to at least 240000 is)
VERSION_CODE_INCOMPATIBLE = 99_999_999  # makes RpcClient.connect() return -15

MODE_NAMES = {3: "PowerOff", 4: "PowerOn", 5: "Idle", 6: "BrakeReleasing", 8: "Running", 10: "Error"}
SAFETY_NAMES = {
    1: "Normal",
    2: "ReducedMode",
    4: "Violation",
    5: "ProtectiveStop",
    6: "SafeguardStop",
    7: "SystemEmergencyStop",
    8: "RobotEmergencyStop",
    9: "Fault",
}
# How the emulated controller treats each stop (type_def.h; what powers off is inferred, see bringup.md):
# a protective (5) or safeguard (6) stop keeps the arm powered, and setUnlockProtectiveStop clears it
# once its cause is gone; an emergency stop (7, 8), a violation (4) or a fault (9) powers the arm off
# and no client call clears it: an e-stop stays latched after its release until restartInterfaceBoard,
# a violation or fault until the operator confirms on the pendant; poweron / startup are refused
# meanwhile (the SDK's own messages: "Failed to power on because the robot safety mode is in ...").
SAFETY_POWER_OFF = {4, 7, 8, 9}
SAFETY_ESTOP = {7, 8}
BAD_STATE = 1  # AUBO_BAD_STATE: a call refused for the safety mode
HOME_Q = [0.492702059, 0.3548380589, 1.7669445318, -0.1586898539, 1.5707963268, 2.0634983858]


# ----------------------------------------------------------------------------- child process
class _Controller:
    """The emulated controller: robot/safety modes, a rate-limited joint follower, injected faults."""

    def __init__(self, opts: dict[str, Any]) -> None:
        from aubo_bridge.model.kinematics import fk  # child process: imported here, path set by the parent

        self._fk = fk  # (the chain as Python: the emulator never imports numba, libero_workcell.kernels)
        self.lock = threading.Lock()
        self.opts = opts
        self.q = np.array(opts.get("q0", HOME_Q), float)
        self.qd = np.zeros(6)
        self.target = self.q.copy()
        self.mode = 3  # PowerOff
        self.safety = 1
        self.cause_active = False  # the reason for a stop is still there: unlock refused
        self.collided = False
        self.servo_mode = 0
        self.queue_full = 0
        self.refusals: dict[str, list[int]] = {}  # injected: method name -> return codes for its next calls
        # With the e-stop button still pressed, restartInterfaceBoard either refuses (AUBO_BAD_STATE)
        # or restarts and the board latches the e-stop again at once: which one the real controller
        # does is unknown (bringup.md), so both are modelled.
        self.estop_restart_pressed = str(opts.get("estop_restart_pressed", "refuse"))  # or "relatch"
        self.slow = 0.0
        self.slow_method: tuple[Any, ...] = ("", 0.0)  # (method name part, s[, jitter]): it answers up to s late
        self._rng = np.random.default_rng(0)
        self.refuse = False
        self.reject_logins = False
        self.version_code = int(opts.get("version_code", VERSION_CODE_OK))
        self.counts: dict[str, int] = {}
        self.servo_arrivals: deque[float] = deque(maxlen=100_000)  # CLOCK_MONOTONIC of each servoJoint request
        self.conns: list[socket.socket] = []
        self.max_speed = float(opts.get("max_joint_speed", 2.0))
        self.boot_delay = float(opts.get("boot_delay", 0.2))
        self._mode_at: tuple[float, int] | None = None  # (time, mode) a transition lands on
        self.tool = _ToolModbus(opts)  # RegisterControl Modbus signals + a CTAG on the tool RS-485
        self.digital_outputs = [False] * int(opts.get("do_count", 16))  # IoControl standard DOs
        self.do_stuck = False  # injected: setStandardDigitalOutput answers 0 but the output does not change

    # -- physics: a 1 kHz loop moving q toward the servo target, frozen in any stop
    def step(self, dt: float) -> None:
        with self.lock:
            if self._mode_at and time.monotonic() >= self._mode_at[0]:
                self.mode, self._mode_at = self._mode_at[1], None
            if self.mode != 8 or self.safety not in (1, 2) or self.collided:
                self.target = self.q.copy()
            step = np.clip(self.target - self.q, -self.max_speed * dt, self.max_speed * dt)
            self.q = self.q + step
            self.qd = step / dt

    def stop(self, safety: int, collided: bool = False) -> None:
        with self.lock:
            self.safety, self.cause_active, self.servo_mode = safety, True, 0
            self.collided = self.collided or collided
            self.target = self.q.copy()
            if safety in SAFETY_POWER_OFF:
                self.mode, self._mode_at = 3, None  # PowerOff: the drives lose power, the brakes fall

    def clear_cause(self) -> None:
        """The operator removed the stop's cause: obstacle gone, e-stop button released, or a
        violation / fault confirmed on the teach pendant (which ends that safety mode)."""
        with self.lock:
            self.cause_active = False
            if self.safety in SAFETY_POWER_OFF - SAFETY_ESTOP:
                self.safety = 1

    def tcp_pose(self) -> list[float]:
        """getTcpPose: position and the orientation as extrinsic x-y-z Euler angles (ARCS: R = Rz Ry Rx) or,
        with ``tcp_orientation: rotvec``, a rotation vector (transforms3d, not scipy: an emulator starts in every
        arm test, and scipy's import was most of its start-up)."""
        p, R = self._fk(self.q)
        if self.opts.get("tcp_orientation") == "rotvec":
            axis, angle = mat2axangle(R, unit_thresh=1e-5)
            ang = np.asarray(axis) * angle
        else:
            ang = mat2euler(R, "sxyz")
        return [*map(float, p), *map(float, ang)]

    # -- RPC methods; returns (result, error)
    def call(self, method: str, params: dict[str, Any], arrived: float = 0.0) -> Any:
        self.counts[method] = self.counts.get(method, 0) + 1
        name = method.split(".")[-1]
        if name == "servoJoint":
            self.servo_arrivals.append(arrived)
        with self.lock:
            if self.refusals.get(name):
                return self.refusals[name].pop(0)
            if method.startswith("RegisterControl.") or name.endswith("ToolVoltageOutputDomain"):
                return self.tool.call(name, params)
            if method == "SystemInfo.getInterfaceVersionCode":
                return self.version_code
            if method == "getRobotNames":
                return ["rob1"]
            if method == "getAxisNames":
                return []
            if name in ("poweron", "startup") and self.safety in SAFETY_POWER_OFF:
                return BAD_STATE
            if name == "poweron":
                if self.mode == 3:
                    self.mode, self._mode_at = 4, (time.monotonic() + self.boot_delay, 5)
                return 0
            if name == "startup":
                if self.mode in (4, 5):
                    self.mode, self._mode_at = 6, (time.monotonic() + self.boot_delay, 8)
                return 0
            if name == "poweroff":
                self.mode, self.servo_mode = 3, 0
                return 0
            if name == "getRobotModeType":
                return MODE_NAMES.get(self.mode, "Error")
            if name == "getSafetyModeType":
                return SAFETY_NAMES.get(self.safety, "Fault")
            if name == "getJointPositions":
                return [float(v) for v in self.q]
            if name == "getJointSpeeds":
                return [float(v) for v in self.qd]
            if name == "getTcpPose":
                return self.tcp_pose()
            if name == "isCollisionOccurred":
                return bool(self.collided)
            if name == "isSteady":
                return bool(np.all(np.abs(self.qd) < 1e-4))
            if name == "isPowerOn":
                return self.mode in (4, 5, 6, 8)
            if name == "setServoModeSelect":
                mode = int(params.get("mode", 0))
                if mode and (self.mode != 8 or self.safety not in (1, 2)):
                    return -1  # AUBO_BAD_STATE
                self.servo_mode = mode
                return 0
            if name == "getServoModeSelect":
                return self.servo_mode
            if name == "servoJoint":
                if self.queue_full > 0:
                    self.queue_full -= 1
                    return 2
                if self.servo_mode == 0:
                    return -13
                q = np.asarray(params.get("q", []), float)
                if q.shape != (6,) or not np.all(np.isfinite(q)):
                    return -5
                if self.mode == 8 and self.safety in (1, 2) and not self.collided:
                    self.target = q
                return 0
            if name == "stopJoint":
                self.target = self.q.copy()
                return 0
            if method.endswith("IoControl.setStandardDigitalOutput"):
                index = int(params.get("index", -1))
                if not 0 <= index < len(self.digital_outputs):
                    return -5  # invalid argument
                if not self.do_stuck:
                    self.digital_outputs[index] = bool(params.get("value"))
                return 0
            if method.endswith("IoControl.getStandardDigitalOutput"):
                index = int(params.get("index", -1))
                return 0 <= index < len(self.digital_outputs) and self.digital_outputs[index]
            if method.endswith("IoControl.getStandardDigitalOutputNum"):
                return len(self.digital_outputs)
            if name == "setUnlockProtectiveStop":
                if self.safety in SAFETY_POWER_OFF:
                    return BAD_STATE  # not a protective stop: unlocking does not clear it
                if self.cause_active:
                    return -1  # AUBO_BAD_STATE: the stop's cause is still there
                self.safety, self.collided = 1, False
                return 0
            if name == "restartInterfaceBoard":
                if self.safety in SAFETY_ESTOP:
                    if self.cause_active:  # the e-stop button is still pressed
                        return BAD_STATE if self.estop_restart_pressed == "refuse" else 0
                    self.safety = 1  # released: the board restarts with the e-stop cleared (arm stays off)
                return 0
        raise KeyError(method)


# ----------------------------------------------------------------------------- tool-flange Modbus (child)
TOOL_DEVICE_INFO = "/dev/ttyRobotTool,115200,N,8,1"  # the line the emulated CTAG answers on
MB_DISCONNECTED = -2  # ModbusErrorNum (register_control.h)


def _ctag_model(alarm_register: int) -> Any:
    """The CtagEmulator finger model (modbus_devices.py) on a plain register dict, without its RTU server."""
    try:
        from modbus_devices import CtagEmulator  # child process: this directory is sys.path[0]
    except ImportError:
        from emulators.modbus_devices import CtagEmulator

    class CtagModel(CtagEmulator):
        def __init__(self) -> None:  # no serial server: reuse on_write/step only
            self.alarm_register, self.full_speed = alarm_register, 18000.0
            self.position, self.target, self.enabled = 0.0, 0, False
            self.object_at: int | None = None
            self.alarm_resets = 0
            self.writes: list[tuple[int, list[int]]] = []
            self.regs: dict[int, int] = {}

        def reg(self, address: int) -> int:
            return self.regs.get(address, 0)

        def set_reg(self, address: int, value: int) -> None:
            self.regs[address] = int(value) & 0xFFFF

    return CtagModel()


class _ToolModbus:
    """RegisterControl Modbus signals + tool supply voltage, with a CTAG2F90D on the tool RS-485.

    The gripper answers only when the tool supply is 24 V, the signal's device_info is
    ``TOOL_DEVICE_INFO`` and its slave is 1; otherwise the signal's error is -2 (disconnected),
    as after ``unplug``. Output signals are written through at once; the model is stepped lazily.
    """

    def __init__(self, opts: dict[str, Any]) -> None:
        self.ctag = _ctag_model(int(opts.get("ctag_alarm_register", 0x0412)))
        self.signals: dict[str, dict[str, Any]] = {}  # name -> device_info, slave, address, type, value, error
        self.voltage = 0
        self.unplugged = False
        self._t = time.monotonic()

    def _step(self) -> None:
        now = time.monotonic()
        while now - self._t > 1e-4:
            dt = min(0.005, now - self._t)
            if self.voltage == 24 and not self.unplugged:
                self.ctag.step(dt)
            self._t += dt

    def _reachable(self, sig: dict[str, Any]) -> bool:
        return (
            self.voltage == 24 and not self.unplugged and sig["device_info"] == TOOL_DEVICE_INFO and sig["slave"] == 1
        )

    def _refresh(self, sig: dict[str, Any]) -> None:
        if self._reachable(sig):
            sig["value"], sig["error"] = self.ctag.reg(sig["address"]), 0
        else:
            sig["error"] = MB_DISCONNECTED

    def call(self, name: str, p: dict[str, Any]) -> Any:
        self._step()
        if name == "setToolVoltageOutputDomain":
            if int(p.get("domain", -1)) not in (0, 12, 24):
                return -5
            self.voltage = int(p["domain"])
            return 0
        if name == "getToolVoltageOutputDomain":
            return self.voltage
        if name == "modbusAddSignal":
            sig_name = str(p.get("signal_name", ""))
            if not sig_name or len(sig_name) > 20 or int(p.get("signal_type", -1)) not in (0, 1, 2, 3):
                return -5
            self.signals[sig_name] = {
                "device_info": p.get("device_info"), "slave": int(p.get("slave_number", 0)),
                "address": int(p.get("signal_address", 0)), "type": int(p["signal_type"]), "value": 0, "error": 0,
                "sequential": bool(p.get("sequential_mode")), "hz": 0,
            }  # fmt: skip
            self._refresh(self.signals[sig_name])
            return 0
        if name == "modbusDeleteSignal":
            return 0 if self.signals.pop(str(p.get("signal_name")), None) else -5
        if name == "modbusDeleteAllSignals":
            self.signals.clear()
            return 0
        if name == "modbusSetSignalUpdateFrequency":
            sig = self.signals.get(str(p.get("signal_name")))
            if sig is None or not 0 <= int(p.get("update_frequency", -1)) <= 125:
                return -5
            sig["hz"] = int(p["update_frequency"])
            return 0
        if name == "modbusSetOutputSignal":
            sig = self.signals.get(str(p.get("signal_name")))
            value = int(p.get("value", -1))
            if sig is None or sig["type"] not in (1, 3) or not 0 <= value <= 0xFFFF:
                return -5
            sig["value"] = value
            if self._reachable(sig):
                sig["error"] = 0
                self.ctag.writes.append((sig["address"], [value]))
                self.ctag.set_reg(sig["address"], value)
                self.ctag.on_write(sig["address"], [value])
            else:
                sig["error"] = MB_DISCONNECTED
            return 0
        for sig in self.signals.values():
            self._refresh(sig)
        if name == "modbusGetSignalStatus":
            sig = self.signals.get(str(p.get("signal_name")))
            return -1 if sig is None else sig["value"]
        if name == "modbusGetSignalError":
            sig = self.signals.get(str(p.get("signal_name")))
            return -1 if sig is None else sig["error"]
        if name == "modbusGetSignalNames":
            return list(self.signals)
        if name == "modbusGetSignalValues":
            return [s["value"] for s in self.signals.values()]
        if name == "modbusGetSignalErrors":
            return [s["error"] for s in self.signals.values()]
        if name == "modbusGetSignalTypes":
            return [s["type"] for s in self.signals.values()]
        if name == "getModbusDeviceStatus":
            device = str(p.get("device_name", ""))
            known = any(str(s["device_info"]).split(",")[0] == device for s in self.signals.values())
            if not known:
                return -1
            return -2 if self.unplugged or self.voltage != 24 else 0
        raise KeyError(name)

    def op(self, cmd: dict[str, Any]) -> Any:
        """Parent-side injection/inspection: place_object, inject_alarm, unplug, state."""
        self._step()
        action = cmd.get("action")
        if action == "place_object":
            width = cmd.get("width")
            self.ctag.object_at = None if width is None else round(9000 * (1.0 - float(width) / 0.09))
        elif action == "inject_alarm":
            self.ctag.set_reg(self.ctag.alarm_register, int(cmd.get("code", 1)))
        elif action == "unplug":
            self.unplugged = bool(cmd.get("unplugged", True))
        elif action == "clear_signals":
            self.signals.clear()
        return {
            "signals": self.signals,
            "writes": self.ctag.writes,
            "voltage": self.voltage,
            "position": self.ctag.position,
            "enabled": self.ctag.enabled,
            "alarm_resets": self.ctag.alarm_resets,
        }


def _recvn(conn: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = conn.recv(n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return buf


def _send(conn: socket.socket, obj: dict[str, Any]) -> None:
    body = json.dumps(obj).encode()
    conn.sendall(HEADER + struct.pack(">I", len(body)) + body)


def _serve_conn(ctl: _Controller, conn: socket.socket) -> None:
    logged_in = False
    try:
        while True:
            head = _recvn(conn, 8)
            body = _recvn(conn, struct.unpack(">I", head[4:8])[0])
            arrived = time.monotonic()
            if ctl.slow:
                time.sleep(ctl.slow)
            suffix, delay, *jitter = ctl.slow_method
            if delay and suffix and suffix.encode() in body:
                time.sleep(delay * (ctl._rng.random() if jitter != [False] else 1.0))  # a busy controller: late
            if body.startswith(b"__login__"):
                parts = body.decode().split("\n")
                logged_in = (
                    not ctl.reject_logins
                    and parts[1] == ctl.opts.get("user", "aubo")
                    and parts[2] == ctl.opts.get("digest", DIGEST_123456)
                )
                ctl.counts["__login__"] = ctl.counts.get("__login__", 0) + 1
                _send(conn, {"id": None, "jsonrpc": "2.0", "result": 0 if logged_in else -7})
                continue
            req = json.loads(body)
            reply: dict[str, Any] = {"id": req.get("id"), "jsonrpc": "2.0"}
            method = req.get("method", "")
            if not logged_in and method not in ("SystemInfo.getInterfaceVersionCode",):
                reply["error"] = {"code": -32001, "message": "login failed: wrong user name or password"}
            else:
                try:
                    reply["result"] = ctl.call(method, req.get("params") or {}, arrived)
                except KeyError:
                    reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
            _send(conn, reply)
    except (EOFError, OSError, ValueError):
        pass
    finally:
        conn.close()


def _child_main(opts: dict[str, Any]) -> None:
    if opts.get("realtime"):  # model a real-time controller (benchmarks): every thread inherits SCHED_FIFO
        with contextlib.suppress(AttributeError, PermissionError, OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(int(opts["realtime"])))
        # and a request is stamped on arrival without waiting out the physics thread's GIL slice (5 ms by default):
        # a controller's C++ is not what is measured
        sys.setswitchinterval(0.0001)
    ctl = _Controller(opts)
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def accept() -> None:
        while True:
            conn, _ = srv.accept()
            if ctl.refuse:
                conn.close()
                continue
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ctl.conns.append(conn)
            threading.Thread(target=_serve_conn, args=(ctl, conn), daemon=True).start()

    def physics() -> None:
        last = time.monotonic()
        while True:
            time.sleep(0.001)
            now = time.monotonic()
            ctl.step(max(now - last, 1e-4))
            last = now

    threading.Thread(target=accept, daemon=True).start()
    threading.Thread(target=physics, daemon=True).start()
    from arcs_rtde import RtdeServer  # the RTDE side, on its own port (this folder is on the child's path)

    rtde = RtdeServer(ctl, MODE_NAMES, SAFETY_NAMES, _drop).start()
    print(json.dumps({"port": srv.getsockname()[1], "rtde_port": rtde.port}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        out: Any = None
        op = cmd.pop("op")
        if op == "protective_stop":
            ctl.stop(5)
        elif op == "safeguard_stop":
            ctl.stop(6)
        elif op == "emergency_stop":
            ctl.stop(7 if cmd.get("system") else 8)
        elif op == "violation":
            ctl.stop(4)
        elif op == "controller_fault":
            ctl.stop(9)
        elif op == "collision":
            ctl.stop(5, collided=True)
        elif op == "clear_cause":
            ctl.clear_cause()
        elif op == "disconnect":
            ctl.refuse = bool(cmd.get("refuse", False))
            for conn in ctl.conns:
                _drop(conn)
            ctl.conns.clear()
        elif op == "accept_connections":
            ctl.refuse = False
        elif op == "set":
            for key, value in cmd.items():
                setattr(ctl, key, value)
        elif op == "refuse_next":
            with ctl.lock:
                ctl.refusals.setdefault(cmd["method"], []).extend(cmd["codes"])
        elif op == "set_do":
            with ctl.lock:
                ctl.digital_outputs[int(cmd["index"])] = bool(cmd["value"])
        elif op == "tool":
            with ctl.lock:
                out = ctl.tool.op(cmd)
        elif op == "servo_arrivals":  # and forget them
            with ctl.lock:
                out = list(ctl.servo_arrivals)
                ctl.servo_arrivals.clear()
        elif op.startswith("rtde_"):
            out = rtde.op({"op": op, **cmd})
        elif op == "state":
            with ctl.lock:
                out = {
                    "q": ctl.q.tolist(),
                    "target": ctl.target.tolist(),
                    "mode": MODE_NAMES.get(ctl.mode, "Error"),
                    "safety": SAFETY_NAMES.get(ctl.safety, "Fault"),
                    "servo_mode": ctl.servo_mode,
                    "collided": ctl.collided,
                    "tcp_pose": ctl.tcp_pose(),
                    "counts": dict(ctl.counts),
                    "digital_outputs": list(ctl.digital_outputs),
                }
        print(json.dumps({"ok": True, "out": out}), flush=True)
        if op == "quit":  # nothing is left to flush or close: skip the interpreter's tear-down of every module
            os._exit(0)


def _drop(conn: socket.socket) -> None:
    """Drop a client the hard way (shutdown first so the peer sees it at once)."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
        conn.close()
    except OSError:
        pass


# ----------------------------------------------------------------------------- parent side
class ArcsEmulator:
    """Start/stop the emulator process and inject faults; ``with ArcsEmulator() as emu: emu.port``.

    Options: ``user``/``digest`` (accepted credentials), ``version_code``, ``q0`` (initial joints),
    ``boot_delay`` (s per start-up stage), ``max_joint_speed`` (rad/s), ``tcp_orientation``
    ("zyx_euler" or "rotvec", what getTcpPose reports), ``do_count`` (standard digital outputs, 16),
    ``realtime`` (SCHED_FIFO priority for the emulator's threads, as a controller's RT kernel; benchmarks),
    ``estop_restart_pressed`` ("refuse" or "relatch": restartInterfaceBoard with the e-stop still pressed).
    """

    host = "127.0.0.1"

    def __init__(self, **opts: Any) -> None:
        self.opts = opts
        self._proc: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self.port = 0
        self.rtde_port = 0  # the RTDE side (tests/emulators/arcs_rtde.py)

    def start(self) -> ArcsEmulator:
        src = str(Path(__file__).resolve().parents[2] / "src")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([src, *sys.path]))
        self._proc = subprocess.Popen(
            [sys.executable, __file__, json.dumps(self.opts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("ARCS emulator failed to start")
        ports = json.loads(line)
        self.port, self.rtde_port = int(ports["port"]), int(ports["rtde_port"])
        return self

    def _cmd(self, op: str, **kw: Any) -> Any:
        assert self._proc is not None and self._proc.stdin is not None and self._proc.stdout is not None
        with self._lock:
            self._proc.stdin.write(json.dumps({"op": op, **kw}) + "\n")
            self._proc.stdin.flush()
            return json.loads(self._proc.stdout.readline())["out"]

    # the RTDE side
    def rtde_silence(self, on: bool = True) -> None:
        """Keep the RTDE connections but push nothing: a stream gone stale."""
        self._cmd("rtde_silence", on=bool(on))

    def rtde_drop(self) -> None:
        """Close every RTDE connection (the controller dropping its clients)."""
        self._cmd("rtde_drop")

    def rtde_no_greeting(self, on: bool = True) -> None:
        """Accept RTDE connections and never greet (the SDK's connect() then blocks until the socket closes)."""
        self._cmd("rtde_no_greeting", on=bool(on))

    def rtde_malformed(self, on: bool = True) -> None:
        """Push five joints instead of six."""
        self._cmd("rtde_malformed", on=bool(on))

    def rtde_outputs(self, names: list[str]) -> None:
        """Greet later clients offering only these output fields."""
        self._cmd("rtde_outputs", names=list(names))

    def rtde_sent(self) -> list[float]:
        """time.monotonic() (the caller's clock) at which each RTDE frame went out, since last asked."""
        return list(self._cmd("rtde_sent"))

    def rtde_state(self) -> dict[str, Any]:
        """The recipes received (in order), keepalives counted, frames pushed per channel, clients."""
        return self._cmd("rtde_state")

    # fault injection
    def protective_stop(self) -> None:
        self._cmd("protective_stop")

    def safeguard_stop(self) -> None:
        self._cmd("safeguard_stop")

    def emergency_stop(self, system: bool = False) -> None:
        """The e-stop button (RobotEmergencyStop; ``system``: the external e-stop input, SystemEmergencyStop).
        The arm powers off; after clear_cause() (released) the stop stays latched until restartInterfaceBoard."""
        self._cmd("emergency_stop", system=bool(system))

    def violation(self) -> None:
        """A safety limit violated (SafetyModeType Violation): the arm powers off until confirmed on the pendant."""
        self._cmd("violation")

    def controller_fault(self) -> None:
        """A hardware or system fault (SafetyModeType Fault): powered off until cleared on the pendant."""
        self._cmd("controller_fault")

    def collision(self) -> None:
        self._cmd("collision")

    def clear_cause(self) -> None:
        """The operator cleared the stop's cause: obstacle removed (an unlock now succeeds), e-stop
        released (a board restart now clears it), violation or fault confirmed on the pendant."""
        self._cmd("clear_cause")

    def disconnect(self, refuse: bool = True) -> None:
        """Drop every client socket; with ``refuse``, also close new connections until accept_connections()."""
        self._cmd("disconnect", refuse=refuse)

    def accept_connections(self) -> None:
        self._cmd("accept_connections")

    def refuse_connections(self) -> None:
        self._cmd("set", refuse=True)

    def slow_replies(self, seconds: float, method: str = "", jitter: bool = True) -> None:
        """Answer every request ``seconds`` late; with ``method``, only requests whose method name
        contains it, each late by a uniformly random 0..``seconds`` (a busy controller's jitter), or by
        ``seconds`` exactly without ``jitter`` (past the request timeout: every such RPC times out)."""
        if method:
            self._cmd("set", slow_method=[method, float(seconds), bool(jitter)])
        else:
            self._cmd("set", slow=float(seconds))

    def queue_full(self, n: int) -> None:
        self._cmd("set", queue_full=int(n))

    def refuse_next(self, method: str, *codes: int) -> None:
        """Injected: the next calls of ``method`` (e.g. "stopJoint") answer these return codes instead."""
        self._cmd("refuse_next", method=method, codes=[int(c) for c in codes])

    def reject_logins(self, reject: bool = True) -> None:
        self._cmd("set", reject_logins=bool(reject))

    def set_version_code(self, code: int) -> None:
        self._cmd("set", version_code=int(code))

    def set_mode(self, mode: int) -> None:
        """Force a RobotModeType value (e.g. 10 Error)."""
        self._cmd("set", mode=int(mode))

    def stick_digital_outputs(self, stuck: bool = True) -> None:
        """setStandardDigitalOutput still answers 0, but the outputs keep their level (a dead output driver)."""
        self._cmd("set", do_stuck=bool(stuck))

    def set_digital_output(self, index: int, value: bool) -> None:
        """Set an output from the controller side (pendant, another program)."""
        self._cmd("set_do", index=int(index), value=bool(value))

    # tool-flange CTAG (RegisterControl Modbus signals)
    def tool(self, action: str = "state", **kw: Any) -> dict[str, Any]:
        """Tool bus state (signals, writes the CTAG received, voltage, finger position, alarm resets)."""
        return self._cmd("tool", action=action, **kw)

    def tool_place_object(self, width_m: float | None) -> None:
        """An object of ``width_m`` between the tool CTAG's fingers (None removes it)."""
        self.tool("place_object", width=width_m)

    def tool_inject_alarm(self, code: int = 1) -> None:
        self.tool("inject_alarm", code=int(code))

    def tool_unplug(self, unplugged: bool = True) -> None:
        """The tool RS-485 link to the gripper is cut (signals report -2, the device disconnected)."""
        self.tool("unplug", unplugged=bool(unplugged))

    # inspection
    def digital_output(self, index: int) -> bool:
        return bool(self.state()["digital_outputs"][index])

    def state(self) -> dict[str, Any]:
        return self._cmd("state")

    def q(self) -> np.ndarray:
        return np.array(self.state()["q"])

    def servo_arrivals(self) -> list[float]:
        """time.monotonic() (same clock as the caller's) at which each servoJoint request arrived, since last asked."""
        return list(self._cmd("servo_arrivals"))

    def stop(self) -> None:
        if self._proc is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._cmd("quit")
        try:
            self._proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def __enter__(self) -> ArcsEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":
    _child_main(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
