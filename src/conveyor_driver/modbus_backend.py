"""Conveyor belt on a Modbus RTU drive: a Delta VFD or a Leadshine RS-485 stepper.

A preset supplies the drive's register map (HARDWARE.md); any register can
be overridden in config (0 = take the preset's, -1 = the drive has none).
Belt speed and motor speed are converted in exactly one place each way
(:func:`belt_to_motor_rpm`, :func:`motor_rpm_to_belt`). The bus thread polls
the drive; :meth:`ModbusConveyorBackend.read` never touches the bus, and
belt position is integrated from the measured speed at each poll. Commands
(run, halt, emergency stop) return only once the drive acknowledged every
register write (the RTU echo), and raise BackendError when it refused one or
did not answer within ``command_timeout``.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from conveyor_driver.driver import BeltState
from libero_workcell.config_base import MappedConfig
from transports.errors import BackendError
from transports.modbus_bus import FLUSH_DELAY, MAX_READ, BusError, ModbusDevice, SerialLineConfig, Snapshot

PRESETS: dict[str, dict[str, int]] = {
    # Delta VFD-EL/E/M communication map. Reset = 0x2002 bit 1 (the manuals' "2002H bit1: reset");
    # EF / e-stop over the bus is not used: the e-stop is a stop command.
    "delta_vfd": {
        "reg_command": 0x2000,
        "reg_setpoint": 0x2001,
        "reg_reset": 0x2002,
        "reg_fault": 0x2100,
        "reg_speed_feedback": 0x2103,
        "reg_mode": -1,
        "reg_accel": -1,
        "reg_decel": -1,
        "value_run": 0x12,
        "value_stop": 0x01,
        "value_estop": 0x01,
        "value_reset": 0x0002,
        "value_mode": 0,
    },
    # Leadshine EM2RS / CL2C-RS velocity mode. Fault and speed feedback registers are not
    # documented here: -1 until set (no fault register; measured speed = commanded, open loop).
    "leadshine_rs485": {
        "reg_command": 0x6002,
        "reg_setpoint": 0x6203,
        "reg_reset": 0x1801,
        "reg_fault": -1,
        "reg_speed_feedback": -1,
        "reg_mode": 0x6200,
        "reg_accel": 0x6204,
        "reg_decel": 0x6205,
        "value_run": 0x10,
        "value_stop": 0x10,  # halt = setpoint 0 then run: decelerates on the configured ramp
        "value_estop": 0x40,
        "value_reset": 0x1111,
        "value_mode": 2,
    },
}


class ConveyorConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ConveyorModbusConfig(SerialLineConfig, MappedConfig):
    error = ConveyorConfigError
    label = "conveyor"

    @classmethod
    def parameter_defaults(cls) -> dict[str, Any]:
        """As for every config, but register fields stay 0 (= from the preset) whatever the preset."""
        return {k: (0 if k.startswith(("reg_", "value_")) else v) for k, v in super().parameter_defaults().items()}

    preset: str = "delta_vfd"
    port: str = "/dev/ttyUSB1"
    baudrate: int = 115200
    parity: str = "N"
    stopbits: int = 1
    slave_id: int = 1
    roller_diameter: float = 0.05  # m, drive roller
    gear_ratio: float = 10.0  # motor turns per roller turn
    rpm_per_hz: float = 30.0  # VFD: motor rpm per Hz of output frequency (4-pole, 50 Hz: 1500/50)
    max_motor_rpm: float = 3000.0  # setpoints above this are refused
    accel: int = 100  # stepper ramp register values, drive units (Leadshine: ms per 1000 rpm)
    decel: int = 100
    poll_hz: float = 10.0
    timeout: float = 0.1  # s per Modbus attempt
    retries: int = 2
    reconnect_period: float = 1.0
    max_age: float = 1.0  # s: an older snapshot is a fault (stale)
    command_timeout: float = 2.0  # s for the drive to acknowledge a command's writes (queued behind a poll)
    # Register map: 0 = from the preset, -1 = not present on this drive.
    reg_command: int = 0
    reg_setpoint: int = 0
    reg_reset: int = 0
    reg_fault: int = 0
    reg_speed_feedback: int = 0
    reg_mode: int = 0
    reg_accel: int = 0
    reg_decel: int = 0
    value_run: int = 0
    value_stop: int = 0
    value_estop: int = 0
    value_reset: int = 0
    value_mode: int = 0

    def __post_init__(self) -> None:
        if self.preset not in PRESETS:
            raise ConveyorConfigError(f"preset must be one of {sorted(PRESETS)}, got {self.preset!r}")
        for key, value in PRESETS[self.preset].items():
            if getattr(self, key) == 0:
                object.__setattr__(self, key, value)
        positive = ("roller_diameter", "gear_ratio", "rpm_per_hz", "max_motor_rpm", "poll_hz", "max_age")
        positive += ("command_timeout",)
        for name in positive:
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise ConveyorConfigError(f"{name} must be a positive number, got {value!r}")
        if not (0 <= self.accel <= 0xFFFF and 0 <= self.decel <= 0xFFFF):
            raise ConveyorConfigError(f"accel/decel must fit a register, got {self.accel}/{self.decel}")
        for f in fields(self):
            if f.name.startswith(("reg_", "value_")) and not -1 <= getattr(self, f.name) <= 0xFFFF:
                raise ConveyorConfigError(f"{f.name} must be a register address/value, got {getattr(self, f.name)}")
        for name in ("reg_command", "reg_setpoint"):
            if getattr(self, name) < 0:
                raise ConveyorConfigError(f"{name} is required")
        if (span := self.poll_blocks()[0][1]) > MAX_READ:
            raise ConveyorConfigError(
                f"reg_fault and reg_speed_feedback span {span} registers: one read (at most {MAX_READ}) must "
                "answer both, so a late reply to one is never taken for the other's"
            )
        try:
            budget = self.serial().retry_budget() + 2.0 / self.poll_hz
        except BusError as exc:
            raise ConveyorConfigError(str(exc)) from exc
        if self.max_age < budget:
            raise ConveyorConfigError(
                f"max_age {self.max_age} s is below {budget:.3f} s (retries x (timeout + flush) + two poll periods): "
                "a glitch absorbed by retries would read as stale"
            )
        # A command's writes may wait behind one poll (up to two registers), then take their own turns.
        worst = 4 * (self.serial().retries + 1) * (self.timeout + FLUSH_DELAY)
        if self.command_timeout < worst:
            raise ConveyorConfigError(
                f"command_timeout {self.command_timeout} s is below {worst:.3f} s (a poll and two writes, each "
                "with all its retries): a command that the retries would get through would read as unconfirmed"
            )

    @property
    def is_vfd(self) -> bool:
        return self.preset == "delta_vfd"

    def poll_blocks(self) -> list[tuple[int, int]]:
        """The registers read every poll: the fault and speed feedback, or with neither the setpoint (a link
        check); reads only. One read spans both: an RTU read reply names no address, so a late reply to a
        read of one register would be taken for another read of one (the speed read as the fault code)."""
        regs = [r for r in (self.reg_fault, self.reg_speed_feedback) if r >= 0] or [self.reg_setpoint]
        return [(min(regs), max(regs) - min(regs) + 1)]


def belt_to_motor_rpm(speed: float, cfg: ConveyorModbusConfig) -> float:
    """Belt m/s -> motor rpm: roller rpm = v / (pi D) * 60, times the gear ratio."""
    return speed * 60.0 * cfg.gear_ratio / (math.pi * cfg.roller_diameter)


def motor_rpm_to_belt(rpm: float, cfg: ConveyorModbusConfig) -> float:
    """Motor rpm -> belt m/s (inverse of :func:`belt_to_motor_rpm`)."""
    return math.pi * cfg.roller_diameter * rpm / cfg.gear_ratio / 60.0


def setpoint_register(speed: float, cfg: ConveyorModbusConfig) -> int:
    """The setpoint register value for a belt speed: VFD Hz x 100, stepper rpm."""
    rpm = belt_to_motor_rpm(speed, cfg)
    if not (math.isfinite(rpm) and 0 <= rpm <= cfg.max_motor_rpm):
        raise BackendError(f"conveyor: {speed} m/s needs {rpm:.0f} motor rpm (limit {cfg.max_motor_rpm:.0f})")
    value = round(rpm / cfg.rpm_per_hz * 100) if cfg.is_vfd else round(rpm)
    if value > 0xFFFF:
        raise BackendError(f"conveyor: setpoint {value} does not fit a register")
    return value


def feedback_to_rpm(raw: int, cfg: ConveyorModbusConfig) -> float:
    return raw / 100.0 * cfg.rpm_per_hz if cfg.is_vfd else float(raw)


class ModbusConveyorBackend:
    """ConveyorBackend over one Modbus drive (see module doc). Safety checks live in ConveyorDriver."""

    def __init__(self, config: ConveyorModbusConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._lock = threading.Lock()
        self._running = False
        self._set_rpm = 0.0  # commanded motor rpm (open-loop estimate when there is no feedback register)
        self._position = 0.0
        self._reported = 0.0
        self._speed = 0.0
        self._last_stamp: float | None = None
        self._bus = ModbusDevice(
            config.serial(), config.poll_blocks(), config.poll_hz, on_connect=self._on_connect, on_poll=self._on_poll,
            clock=clock, name=f"conveyor_{config.preset}",
        )  # fmt: skip
        try:
            self._bus.start()
        except BusError as exc:
            raise BackendError(f"conveyor: {exc}") from exc

    def _on_connect(self, bus: ModbusDevice) -> None:
        """After (re)connect the belt is commanded stopped: it never restarts on its own."""
        c = self.config
        with self._lock:
            self._running, self._set_rpm = False, 0.0
        if c.reg_mode >= 0:
            bus.transact_write(c.reg_mode, [c.value_mode])
        if c.reg_accel >= 0:
            bus.transact_write(c.reg_accel, [c.accel])
        if c.reg_decel >= 0:
            bus.transact_write(c.reg_decel, [c.decel])
        bus.transact_write(c.reg_setpoint, [0])
        bus.transact_write(c.reg_command, [c.value_stop])

    def _measured_rpm(self, snap: Snapshot) -> float:
        c = self.config
        if c.reg_speed_feedback >= 0:
            return feedback_to_rpm(snap.get(c.reg_speed_feedback), c)
        return self._set_rpm if self._running else 0.0

    def _on_poll(self, snap: Snapshot) -> None:
        with self._lock:
            speed = motor_rpm_to_belt(self._measured_rpm(snap), self.config)
            if self._last_stamp is not None:
                self._position += 0.5 * (speed + self._speed) * (snap.stamp - self._last_stamp)
            self._speed, self._last_stamp = speed, snap.stamp

    def read(self) -> BeltState:
        snap = self._bus.snapshot()
        now = self._clock()
        c = self.config
        fault = snap.fault
        if fault is None and now - snap.stamp > c.max_age:
            fault = f"conveyor state stale ({now - snap.stamp:.3f} s old, max {c.max_age} s)"
        if fault is None and c.reg_fault >= 0 and (code := snap.regs.get(c.reg_fault, 0)):
            fault = f"{c.preset} fault code {code} (0x{code:04X})"
        with self._lock:
            position = self._position
            if fault is None and self._last_stamp is not None:  # carry the last poll forward to now
                position += self._speed * max(0.0, now - self._last_stamp)
            position = self._reported = max(position, self._reported)  # forward-only belt: never step back
            return BeltState(now, position, self._speed, self._running and fault is None, fault)

    def _confirm(self, writes: list[tuple[int, int]], what: str) -> None:
        """Queue the writes in order and wait until the drive acknowledged each; raise BackendError if not."""
        timeout = self.config.command_timeout
        try:
            futures = [self._bus.write(address, [value]) for address, value in writes]
        except BusError as exc:
            raise BackendError(f"conveyor: {what}: {exc}") from exc
        deadline = time.monotonic() + timeout
        for (address, _), fut in zip(writes, futures, strict=True):
            try:
                fut.result(max(0.0, deadline - time.monotonic()))
            except TimeoutError as exc:
                raise BackendError(f"conveyor: {what} not confirmed by the drive within {timeout} s") from exc
            except Exception as exc:
                raise BackendError(f"conveyor: {what}: write to 0x{address:04X} failed ({exc})") from exc

    def run(self, speed: float) -> None:
        """Setpoint, then the run command (VFD 0x12 run forward; stepper 0x10 trigger); returns once acknowledged."""
        c = self.config
        value = setpoint_register(speed, c)
        self._confirm([(c.reg_setpoint, value), (c.reg_command, c.value_run)], f"run at {speed} m/s")
        with self._lock:
            self._running, self._set_rpm = True, belt_to_motor_rpm(speed, c)

    def halt(self) -> None:
        """Controlled stop on the drive's ramp (VFD 0x01; stepper setpoint 0 + trigger); returns once acknowledged.

        Unconfirmed, the belt counts as still running (open-loop position keeps integrating)."""
        c = self.config
        stop = [(c.reg_command, c.value_stop)]
        self._confirm(stop if c.is_vfd else [(c.reg_setpoint, 0), *stop], "stop")
        with self._lock:
            self._running, self._set_rpm = False, 0.0

    def emergency_stop(self) -> None:
        """Stop now (stepper 0x40 emergency stop; the VFD map has only its stop command); returns once acknowledged."""
        c = self.config
        self._confirm([(c.reg_command, c.value_estop), (c.reg_setpoint, 0)], "emergency stop")
        with self._lock:
            self._running, self._set_rpm = False, 0.0

    def acknowledge_fault(self) -> None:
        """Drive alarm reset (VFD 0x2002 bit 1; stepper 0x1801 = 0x1111), then a fresh poll. Never starts.

        A dead link is not raised here (ConveyorDriver.reset_fault does not catch): the
        read that follows still shows the link fault, so the reset is refused there.
        """
        c = self.config
        if c.reg_reset >= 0:
            with contextlib.suppress(BusError):
                self._bus.write_and_wait(c.reg_reset, [c.value_reset], timeout=max(1.0, 4 * c.timeout))

    @property
    def bus(self) -> ModbusDevice:
        return self._bus

    def close(self) -> None:
        with contextlib.suppress(BusError):
            c = self.config
            stop = [(c.reg_command, c.value_stop)]
            for address, value in stop if c.is_vfd else [(c.reg_setpoint, 0), *stop]:
                self._bus.write(address, [value])  # queued before close: the I/O thread sends it before it ends
        self._bus.close()
