"""CTAG2F90D through the AUBO arm controller's tool-flange RS-485 (``/dev/ttyRobotTool``).

The controller is the Modbus RTU master: each gripper register is a controller "Modbus
signal" (``RegisterControl.modbusAddSignal``), written with ``modbusSetOutputSignal`` and
read from the controller's cache (``modbusGetSignalNames/Values/Errors``). The tool line
settings travel in the signal's ``device_info`` string ("port,baud,parity,data_bits,stop_bits");
pyaubo_sdk 0.24.1 has no other tool RS-485 setting. The tool supply voltage is
``IoControl.setToolVoltageOutputDomain`` (0 / 12 / 24 V).

SDK surface used (pyaubo_sdk 0.24.1, wire names as the SDK sends them on loopback):

* ``RegisterControl.modbusAddSignal(device_info, slave_number, signal_address, signal_type,
  signal_name, sequential_mode) -> int``; signal_type 3 = "register output" (a holding
  register, the only type that reaches FC 0x03/0x06: feedback registers are added as type 3
  too and simply never written); names at most 20 characters.
* ``modbusSetOutputSignal(signal_name, value 0..65535) -> int``: one 16-bit register per call
  (there is no multi-register write: a 32-bit target is two writes, hi then lo, then the trigger).
* ``modbusGetSignalNames() / modbusGetSignalValues() / modbusGetSignalErrors()`` (parallel
  lists; errors are ``ModbusErrorNum``: 0 ok, -1 not initialised, -2 disconnected, 1..6 Modbus
  exceptions); ``getModbusDeviceStatus(device) -> 0 connected / -1 unknown / -2 disconnected``;
  ``modbusSetSignalUpdateFrequency(signal_name, 0..125 Hz)``.

What the controller does between a call and the wire is not documented: write ordering
(``sequential_mode`` is set to keep requests in order), whether an unchanged output value is
re-sent, and whether hi/lo feedback words come from one read. This backend re-writes the
trigger every command and reads the two feedback words separately (the 90D's 0..9000 range
lives in the low word, so a torn read can only matter near a negative reading). Unverified
on a real controller.

The arm driver reads the gripper every servo tick, so :meth:`read` only returns the poll
thread's latest result (:class:`transports.arcs.poller.Poller`, ``poll_hz``, a back-off after a failure);
:meth:`command` queues the target for the poll thread (latest wins) and wakes it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from gripper.base import GripperMeasurement
from gripper.ctag.modbus_backend import CtagConfig
from gripper.ctag.protocol import (
    GraspTracker,
    StallSettings,
    coord_to_counts,
    counts_to_coord,
    signed32,
    split32,
)
from libero_workcell.config_base import MappedConfig
from transports.arcs.poller import Poller, backoff_for
from transports.arcs.session import ArcsSession, code_meaning
from transports.errors import BackendError

log = logging.getLogger(__name__)

SIGNAL_REGISTER_OUTPUT = 3  # modbusAddSignal signal_type: holding register (read FC 0x03, write FC 0x06)
MODBUS_ERRORS = {
    -1: "Modbus unit not initialised",
    -2: "Modbus unit disconnected",
    1: "illegal function",
    2: "illegal data address",
    3: "illegal data value",
    4: "slave device failure",
    5: "acknowledge",
    6: "slave device busy",
}
DEVICE_STATUS = {-1: "device unknown to the controller", -2: "device disconnected"}
_CTAG = CtagConfig()  # the CTAG register map and motion defaults live in one place


class CtagToolConfigError(ValueError):
    pass


@dataclass(frozen=True)
class CtagToolConfig(MappedConfig):
    error = CtagToolConfigError
    label = "tool gripper"

    # ARCS session (fill from the arm's arcs.* parameters: one controller)
    ip: str = ""
    rpc_port: int = 30004
    user: str = "aubo"
    password: str = "123456"
    connect_timeout: float = 2.0
    request_timeout: float = 0.1
    # Tool-flange RS-485 line, as the controller's modbusAddSignal device_info
    device: str = "/dev/ttyRobotTool"
    baudrate: int = _CTAG.baudrate
    parity: str = _CTAG.parity
    data_bits: int = 8
    stopbits: int = _CTAG.stopbits
    slave_id: int = _CTAG.slave_id
    sequential_mode: bool = True  # controller waits for each reply before the next request (keeps order)
    tool_voltage: int = 24  # setToolVoltageOutputDomain at start: 0 / 12 / 24 V; -1 = leave as configured
    update_hz: int = 100  # modbusSetSignalUpdateFrequency for the feedback signals (0..125)
    signal_prefix: str = "ctag_"
    # Gripper behaviour (as the direct-Modbus backend)
    speed: int = _CTAG.speed
    force: int = _CTAG.force
    acceleration: int = _CTAG.acceleration
    deceleration: int = _CTAG.deceleration
    position_max: int = _CTAG.position_max
    poll_hz: float = 50.0  # RPC polling of the controller's signal cache
    max_age: float = 0.4  # s without a successful poll -> fault
    stall_time: float = _CTAG.stall_time
    stall_tolerance: int = _CTAG.stall_tolerance
    stall_margin: int = _CTAG.stall_margin
    # Register map (HARDWARE.md, CTAG2F90D)
    reg_enable: int = _CTAG.reg_enable
    reg_target: int = _CTAG.reg_target  # 32-bit, high word first
    reg_speed: int = _CTAG.reg_speed
    reg_force: int = _CTAG.reg_force
    reg_accel: int = _CTAG.reg_accel
    reg_decel: int = _CTAG.reg_decel
    reg_trigger: int = _CTAG.reg_trigger
    reg_alarm_reset: int = _CTAG.reg_alarm_reset
    reg_feedback: int = _CTAG.reg_feedback  # 32-bit, high word first
    reg_alarm: int = _CTAG.reg_alarm  # -1 = none documented, not polled

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "request_timeout", "poll_hz", "max_age", "stall_time"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise CtagToolConfigError(f"{name} must be a positive number, got {v!r}")
        if not 0 < self.rpc_port < 65536:
            raise CtagToolConfigError(f"rpc_port must be a TCP port, got {self.rpc_port!r}")
        if not self.device or "," in self.device:
            raise CtagToolConfigError(f"device must be a serial port path without commas, got {self.device!r}")
        if self.parity not in ("N", "E", "O"):
            raise CtagToolConfigError(f"parity must be N, E or O, got {self.parity!r}")
        if self.data_bits not in (5, 6, 7, 8) or self.stopbits not in (1, 2) or self.baudrate <= 0:
            raise CtagToolConfigError("data_bits must be 5..8, stopbits 1 or 2, baudrate positive")
        if not 0 <= self.slave_id <= 255:
            raise CtagToolConfigError(f"slave_id must be 0..255, got {self.slave_id}")
        if self.tool_voltage not in (-1, 0, 12, 24):
            raise CtagToolConfigError(f"tool_voltage must be 0, 12, 24 or -1 (leave), got {self.tool_voltage}")
        if not 0 <= self.update_hz <= 125:
            raise CtagToolConfigError(
                f"update_hz must be 0..125 (modbusSetSignalUpdateFrequency), got {self.update_hz}"
            )
        for name in ("speed", "force"):
            if not 0 <= getattr(self, name) <= 255:
                raise CtagToolConfigError(f"{name} must be 0..255, got {getattr(self, name)}")
        for name in ("acceleration", "deceleration"):
            if not 0 <= getattr(self, name) <= 0xFFFF:
                raise CtagToolConfigError(f"{name} must fit a register, got {getattr(self, name)}")
        if not 0 < self.position_max < 2**31:
            raise CtagToolConfigError(f"position_max must be positive, got {self.position_max}")
        if self.stall_tolerance < 0 or self.stall_margin < 0:
            raise CtagToolConfigError("stall_tolerance and stall_margin must be >= 0")
        for f in fields(self):
            if f.name.startswith("reg_") and not -1 <= getattr(self, f.name) <= 0xFFFF:
                raise CtagToolConfigError(f"{f.name} must be a register address, got {getattr(self, f.name)}")
        if self.max_age <= 2.0 / self.poll_hz + self.request_timeout:
            raise CtagToolConfigError("max_age must exceed two poll periods plus one request timeout")
        too_long = [n for n in self.signals().values() if len(n) > 20]
        if too_long:
            raise CtagToolConfigError(f"signal names longer than 20 characters (controller limit): {too_long}")

    @property
    def device_info(self) -> str:
        """modbusAddSignal's RTU device string: "serial_port,baud,parity,data_bits,stop_bits"."""
        return f"{self.device},{self.baudrate},{self.parity},{self.data_bits},{self.stopbits}"

    def signals(self) -> dict[str, str]:
        """Role -> controller signal name."""
        roles = ["enable", "target_hi", "target_lo", "speed", "force", "accel", "decel", "trigger", "alarm_reset"]
        roles += ["fb_hi", "fb_lo"] + (["alarm"] if self.reg_alarm >= 0 else [])
        return {r: f"{self.signal_prefix}{r}" for r in roles}

    def addresses(self) -> dict[str, int]:
        """Role -> register address."""
        out = {
            "enable": self.reg_enable,
            "target_hi": self.reg_target,
            "target_lo": self.reg_target + 1,
            "speed": self.reg_speed,
            "force": self.reg_force,
            "accel": self.reg_accel,
            "decel": self.reg_decel,
            "trigger": self.reg_trigger,
            "alarm_reset": self.reg_alarm_reset,
            "fb_hi": self.reg_feedback,
            "fb_lo": self.reg_feedback + 1,
        }
        if self.reg_alarm >= 0:
            out["alarm"] = self.reg_alarm
        return out



FEEDBACK_ROLES = ("fb_hi", "fb_lo", "alarm")


class CtagToolGripperBackend:
    """GripperBackend for a CTAG2F90D on the AUBO tool flange, driven through the controller's Modbus signals."""

    def __init__(
        self,
        config: CtagToolConfig,
        clock: Callable[[], float] = time.monotonic,
        session: ArcsSession | None = None,
        enable: bool = True,
    ) -> None:
        """Connect and configure. ``enable=False`` when re-attaching to a gripper that was enabled
        before (a restarted SDK process): no second enable/init stroke while it may hold a part."""
        self.config = config
        self._clock = clock
        c = config
        self._session = session or ArcsSession(
            c.ip, c.rpc_port, c.user, c.password, connect_timeout=c.connect_timeout, request_timeout=c.request_timeout
        )
        self._names = c.signals()
        self._grasp = GraspTracker(StallSettings(c.stall_time, c.stall_tolerance, c.stall_margin))
        self._lock = threading.Lock()
        self._pending: int | None = None  # target counts waiting for the poll thread
        self._settings = (c.speed, c.force)
        self._settings_dirty = False
        self._enabled = not enable  # enabled already: _configure skips the enable write
        self._regs: Any = None
        self._pos: int | None = None
        self._alarm = 0
        self._fault: str | None = "not connected"
        self._last_ok = -math.inf
        self.polls = 0
        # Called after every poll attempt on the poller thread (the process host pushes read() then).
        self.on_update: Callable[[], None] | None = None
        # A queued command wakes the poll thread at once (wake_ends_wait) to write it.
        self._poller = Poller(
            self._poll_or_void, 1.0 / c.poll_hz, backoff=backoff_for(c.request_timeout), on_error=self._set_fault,
            what="tool gripper poll", name="ctag-tool-poll", on_attempt=self._notify, wake_ends_wait=True,
        )  # fmt: skip
        try:
            self._session.open()
            self._configure()
            self._poll_once()
        except BackendError as exc:
            self._session.close()
            raise BackendError(f"tool gripper: {exc}") from exc
        self._poller.start()

    # ---------------------------------------------------------------- set-up
    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return self._session.call(fn, *args)

    def _check(self, what: str, ret: Any) -> None:
        if ret != 0:
            raise BackendError(f"{what} refused by {self._session.where}: {code_meaning(int(ret))}")

    def _set(self, role: str, value: int) -> None:
        name = self._names[role]
        self._check(
            f"modbusSetOutputSignal({name!r}, {value})", self._call(self._regs.modbusSetOutputSignal, name, value)
        )

    def _configure(self) -> None:
        """Tool supply, one signal per register, settings; enable/init once per backend (on similar grippers
        init runs a calibration stroke, which must not happen again on a reconnect while holding)."""
        c = self.config
        rpc = self._session.rpc
        self._regs = self._call(rpc.getRegisterControl)
        if c.tool_voltage >= 0:
            io = self._call(self._session.robot.getIoControl)
            self._check(
                f"setToolVoltageOutputDomain({c.tool_voltage})",
                self._call(io.setToolVoltageOutputDomain, c.tool_voltage),
            )
        addresses = c.addresses()
        for role, name in self._names.items():
            ret = self._call(
                self._regs.modbusAddSignal, c.device_info, c.slave_id, addresses[role], SIGNAL_REGISTER_OUTPUT, name,
                c.sequential_mode,
            )  # fmt: skip
            self._check(f"modbusAddSignal({c.device_info!r}, {c.slave_id}, {addresses[role]:#06x}, {name!r})", ret)
            if role in FEEDBACK_ROLES and c.update_hz:
                self._check(
                    f"modbusSetSignalUpdateFrequency({name!r})",
                    self._call(self._regs.modbusSetSignalUpdateFrequency, name, c.update_hz),
                )
        if not self._enabled:
            self._set("enable", 1)
            self._enabled = True
        speed, force = self._settings
        self._set("speed", speed)
        self._set("force", force)
        self._set("accel", c.acceleration)
        self._set("decel", c.deceleration)

    # ------------------------------------------------------------------ poll
    def _flush_writes(self) -> None:
        with self._lock:
            target, self._pending = self._pending, None
            dirty, self._settings_dirty = self._settings_dirty, False
            speed, force = self._settings
        try:
            if dirty:
                self._set("speed", speed)
                self._set("force", force)
            if target is not None:
                hi, lo = split32(target)
                self._set("target_hi", hi)
                self._set("target_lo", lo)
                self._set("trigger", 1)
        except BackendError:
            with self._lock:  # settings are retried; a failed target is dropped (as the direct bus fails it)
                self._settings_dirty = self._settings_dirty or dirty
            raise

    def _poll_once(self) -> None:
        c = self.config
        if not self._session.connected():
            raise BackendError(f"connection to ARCS controller at {self._session.where} lost")
        self._flush_writes()
        status = self._call(self._regs.getModbusDeviceStatus, c.device)
        names = self._call(self._regs.modbusGetSignalNames)
        values = self._call(self._regs.modbusGetSignalValues)
        errors = self._call(self._regs.modbusGetSignalErrors)
        now = self._clock()
        table = {n: (v, e) for n, v, e in zip(names, values, errors, strict=False)}
        fault: str | None = None
        missing = [n for n in self._names.values() if n not in table]
        if missing:
            fault = f"tool Modbus signals missing on the controller: {missing} (acknowledge to add them again)"
        elif status != 0:
            fault = f"tool RS-485 {c.device}: {DEVICE_STATUS.get(status, f'status {status}')}"
        else:
            bad = {n: table[n][1] for n in self._names.values() if table[n][1] != 0}
            if bad:
                fault = "tool Modbus signal errors: " + ", ".join(
                    f"{n} {e} ({MODBUS_ERRORS.get(e, 'unknown')})" for n, e in bad.items()
                )
        if fault is None:
            pos = signed32(table[self._names["fb_hi"]][0], table[self._names["fb_lo"]][0])
            self._grasp.observe(pos, now)
            alarm = int(table[self._names["alarm"]][0]) if "alarm" in self._names else 0
            with self._lock:
                self._pos, self._alarm, self._last_ok = pos, alarm, now
        self._fault = fault
        self.polls += 1

    def _poll_or_void(self) -> None:
        """One poll on the poller's thread; a target queued into a link that failed is void."""
        try:
            self._poll_once()
        except BackendError:
            with self._lock:  # it must not move the fingers after the link returns
                self._pending = None  # (acknowledge_fault never moves them)
            raise

    def _set_fault(self, error: str) -> None:
        self._fault = error

    def _notify(self) -> None:
        if self.on_update is not None:
            self.on_update()

    # ----------------------------------------------------------------- API
    def read(self) -> GripperMeasurement:
        c = self.config
        now = self._clock()
        with self._lock:
            pos, alarm, last_ok = self._pos, self._alarm, self._last_ok
        fault = self._fault
        if fault is None and now - last_ok > c.max_age:
            fault = f"tool gripper state stale ({now - last_ok:.3f} s old, max {c.max_age} s)"
        if fault is None and alarm:
            fault = f"gripper alarm code {alarm}"
        coord = counts_to_coord(pos, c.position_max) if pos is not None else 0.0
        return GripperMeasurement(now, coord, fault, self._grasp.object_detected and fault is None)

    def command(self, coord: float) -> None:
        """Queue target = round(coord * position_max) (then hi, lo, trigger on the poll thread); never blocks."""
        if self._poller.stopped:
            raise BackendError("tool gripper closed")
        target = coord_to_counts(coord, self.config.position_max)
        self._grasp.commanded(target)
        with self._lock:
            self._pending = target
        self._poller.wake()

    def set_speed_force(self, speed: int, force: int) -> None:
        """Change speed/force (0..255) for the next motions; written by the poll thread and at every reconnect."""
        if not (0 <= speed <= 255 and 0 <= force <= 255):
            raise BackendError(f"gripper speed/force must be 0..255, got {speed}/{force}")
        with self._lock:
            if (speed, force) != self._settings:
                self._settings, self._settings_dirty = (speed, force), True
        self._poller.wake()

    def acknowledge_fault(self) -> None:
        """Reconnect a lost ARCS link (signals added again, no re-enable), write the alarm reset, poll once.
        Never moves the fingers."""
        if self._poller.stopped:
            raise BackendError("tool gripper closed")
        try:
            if not self._session.connected():
                with self._lock:  # a target queued while the link was down is void
                    self._pending = None
                self._session.open()
                self._configure()
            elif any(n not in self._call(self._regs.modbusGetSignalNames) for n in self._names.values()):
                self._configure()  # the controller lost its signal table (restart): add them again
            self._set("alarm_reset", 1)
            self._poll_once()
        except BackendError as exc:
            raise BackendError(f"tool gripper: {exc}") from exc
        self._poller.wake()

    def close(self) -> None:
        """Stop polling, log out. The signals stay on the controller (harmless; re-added at the next start)."""
        if self._poller.stopped:
            return
        self._poller.stop(timeout=2.0)
        self._session.close()
        self._regs = None
