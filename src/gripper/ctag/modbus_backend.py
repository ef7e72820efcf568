"""CTAG2F90D gripper over Modbus RTU (register map from HARDWARE.md, overridable in config).

The arm driver reads the gripper every servo tick, so :meth:`CtagGripperBackend.read`
only turns the bus thread's latest snapshot into a measurement; commands are
queued. The gripper has no documented object-detected register: a grasp is
inferred when the fingers stop short of a close command.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields

from gripper.base import GripperMeasurement
from gripper.ctag.protocol import GraspTracker, StallSettings, coord_to_counts, counts_to_coord, signed32, split32
from libero_workcell.config_base import MappedConfig
from transports.errors import BackendError
from transports.modbus_bus import BusError, ModbusDevice, SerialLineConfig, Snapshot

# s an operator's reset waits for the alarm reset to land and a poll after it (at least 4 request timeouts): the
# reset is not time-critical and nothing moves meanwhile, while a loaded robot PC answered it in more than 0.5 s
ALARM_RESET_WAIT_S = 2.0


class CtagConfigError(ValueError):
    pass


@dataclass(frozen=True)
class CtagConfig(SerialLineConfig, MappedConfig):
    error = CtagConfigError
    label = "gripper"

    port: str = "/dev/ttyUSB0"
    baudrate: int = 115200
    parity: str = "N"
    stopbits: int = 1
    slave_id: int = 1
    speed: int = 255  # 0..255
    force: int = 128  # 0..255
    acceleration: int = 2000  # what the maker's drivers write
    deceleration: int = 2000
    position_max: int = 9000  # counts at fully closed (0 = open)
    poll_hz: float = 50.0
    timeout: float = 0.05  # s per Modbus attempt
    retries: int = 2
    reconnect_period: float = 1.0  # s
    max_age: float = 0.4  # s: an older snapshot is a fault (stale)
    stall_time: float = 0.15  # s of no motion short of a close target -> object detected
    stall_tolerance: int = 20  # counts of movement that still count as "not moving"
    stall_margin: int = 200  # counts the fingers must stop short of the target
    # Register map (HARDWARE.md, CTAG2F90D)
    reg_enable: int = 0x0100
    reg_target: int = 0x0102  # 32-bit, high word first
    reg_speed: int = 0x0104
    reg_force: int = 0x0105
    reg_accel: int = 0x0106
    reg_decel: int = 0x0107
    reg_trigger: int = 0x0108
    reg_alarm_reset: int = 0x0110
    reg_feedback: int = 0x0418  # 32-bit, high word first
    # No alarm/status register is documented for this gripper: -1 = do not poll one.
    reg_alarm: int = -1

    def __post_init__(self) -> None:
        for name in ("speed", "force"):
            if not 0 <= getattr(self, name) <= 255:
                raise CtagConfigError(f"{name} must be 0..255, got {getattr(self, name)}")
        for name in ("acceleration", "deceleration"):
            if not 0 <= getattr(self, name) <= 0xFFFF:
                raise CtagConfigError(f"{name} must fit a register, got {getattr(self, name)}")
        if not 0 < self.position_max < 2**31:
            raise CtagConfigError(f"position_max must be positive, got {self.position_max}")
        for name in ("poll_hz", "timeout", "reconnect_period", "max_age", "stall_time"):
            if not getattr(self, name) > 0:
                raise CtagConfigError(f"{name} must be positive, got {getattr(self, name)}")
        if self.retries < 0 or self.stall_tolerance < 0 or self.stall_margin < 0:
            raise CtagConfigError("retries, stall_tolerance and stall_margin must be >= 0")
        for f in fields(self):
            if f.name.startswith("reg_") and not -1 <= getattr(self, f.name) <= 0xFFFF:
                raise CtagConfigError(f"{f.name} must be a register address, got {getattr(self, f.name)}")
        try:
            budget = self.serial().retry_budget() + 2.0 / self.poll_hz
        except BusError as exc:
            raise CtagConfigError(str(exc)) from exc
        if self.max_age < budget:
            raise CtagConfigError(
                f"max_age {self.max_age} s is below {budget:.3f} s (retries x (timeout + flush) + two poll periods): "
                "a glitch absorbed by retries would read as stale"
            )

    def poll_blocks(self) -> list[tuple[int, int]]:
        """The registers read every poll (the feedback, the alarm if there is one): reads only."""
        return [(self.reg_feedback, 2)] + ([(self.reg_alarm, 1)] if self.reg_alarm >= 0 else [])



class CtagGripperBackend:
    """GripperBackend for the CTAG2F90D: enable + settings at (re)connect, queued commands, cached reads."""

    def __init__(self, config: CtagConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        self._grasp = GraspTracker(StallSettings(config.stall_time, config.stall_tolerance, config.stall_margin))
        self._settings = (config.speed, config.force)
        self._enabled = False
        self._bus = ModbusDevice(
            config.serial(), config.poll_blocks(), config.poll_hz, on_connect=self._on_connect, on_poll=self._on_poll,
            clock=clock, name="ctag_gripper",
        )  # fmt: skip
        try:
            self._bus.start()
        except BusError as exc:
            raise BackendError(f"gripper: {exc}") from exc

    def _on_connect(self, bus: ModbusDevice) -> None:
        """Enable/init once per backend: on similar grippers init runs a calibration stroke, which must
        not happen on a reconnect after a bus glitch (it would drop a held object). Settings every time."""
        c = self.config
        if not self._enabled:
            bus.transact_write(c.reg_enable, [1])
            self._enabled = True
        bus.transact_write(c.reg_speed, list(self._settings))
        bus.transact_write(c.reg_accel, [c.acceleration, c.deceleration])

    def _position(self, snap: Snapshot) -> int:
        raw = snap.u32(self.config.reg_feedback)
        return signed32(raw >> 16, raw)  # a slightly negative reading must not become "closed"

    def _on_poll(self, snap: Snapshot) -> None:
        """Grasp inference (ctag_protocol.GraspTracker): stalled clearly short of a close target."""
        self._grasp.observe(self._position(snap), snap.stamp)

    def read(self) -> GripperMeasurement:
        snap = self._bus.snapshot()
        now = self._clock()
        c = self.config
        coord = counts_to_coord(self._position(snap), c.position_max) if snap.regs else 0.0
        fault = snap.fault
        if fault is None and now - snap.stamp > c.max_age:
            fault = f"gripper state stale ({now - snap.stamp:.3f} s old, max {c.max_age} s)"
        if fault is None and c.reg_alarm >= 0 and snap.regs.get(c.reg_alarm, 0):
            fault = f"gripper alarm code {snap.regs[c.reg_alarm]}"
        return GripperMeasurement(now, coord, fault, self._grasp.object_detected and fault is None)

    def command(self, coord: float) -> None:
        """Queue target = round(coord * position_max) then the motion trigger; never blocks."""
        c = self.config
        target = coord_to_counts(coord, c.position_max)
        self._grasp.commanded(target)  # a continued close keeps the grasp inference, anything else re-arms it
        try:
            self._bus.write(c.reg_target, list(split32(target)))
            self._bus.write(c.reg_trigger, [1])
        except BusError as exc:
            raise BackendError(f"gripper: {exc}") from exc

    def set_speed_force(self, speed: int, force: int) -> None:
        """Change speed/force (0..255) for the next motions; written now and at every reconnect."""
        if not (0 <= speed <= 255 and 0 <= force <= 255):
            raise BackendError(f"gripper speed/force must be 0..255, got {speed}/{force}")
        if (speed, force) != self._settings:
            self._settings = (speed, force)
            self._bus.write(self.config.reg_speed, [speed, force])

    def acknowledge_fault(self) -> None:
        """Alarm reset (0x0110 = 1), then wait for a fresh poll. Never moves the fingers."""
        try:
            wait = max(ALARM_RESET_WAIT_S, 4 * self.config.timeout)
            self._bus.write_and_wait(self.config.reg_alarm_reset, [1], timeout=wait)
        except BusError as exc:
            raise BackendError(f"gripper: {exc}") from exc

    @property
    def bus(self) -> ModbusDevice:
        return self._bus

    def close(self) -> None:
        self._bus.close()
