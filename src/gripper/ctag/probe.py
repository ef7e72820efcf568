"""The CTAG2F90D's read-only check on its own RS-485 adapter (``workcell check``): holding-register reads at its
Modbus ID (its position and alarm), never an enable (which runs a calibration stroke)."""

from __future__ import annotations

from typing import Any

from gripper.ctag.modbus_backend import CtagConfig
from gripper.model import ReadOnlyProbe
from libero_workcell import faults


def _describe(settings: dict[str, Any]) -> str:
    cfg = CtagConfig.from_mapping(settings)
    return f"gripper at Modbus ID {cfg.slave_id} on {cfg.port} ({cfg.baudrate} 8{cfg.parity}{cfg.stopbits})"


def _read(settings: dict[str, Any], timeout: float) -> tuple[bool, str, str]:
    from transports.modbus_bus import BusError, read_once

    cfg = CtagConfig.from_mapping(settings)
    try:
        regs = read_once(cfg.serial(), cfg.poll_blocks(), timeout=timeout, name="gripper")
    except BusError as exc:
        return False, str(exc), ("check the adapter's name (udev), the cable, and aubo_bridge.gripper.slave_id / "
                                 "gripper.baudrate against the gripper's configuration tool (docs/bringup.md, "
                                 "0. Install)")  # fmt: skip
    position = (regs[cfg.reg_feedback] << 16) | regs[cfg.reg_feedback + 1]
    if cfg.reg_alarm >= 0 and regs.get(cfg.reg_alarm):
        return False, f"answers with alarm code {regs[cfg.reg_alarm]}", faults.BY_CODE["GRIP-ALARM"].recovery
    return True, f"answers (fingers at {position} of {cfg.position_max}; read only, not enabled)", ""


MODBUS_PROBE = ReadOnlyProbe(_describe, _read)
