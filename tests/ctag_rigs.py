"""The CTAG2F90D gripper on each of its two transports, with a handle on the emulator behind it.

* ``modbus_rtu``: :class:`~gripper.ctag.modbus_backend.CtagGripperBackend` (pymodbus, direct RS-485) against the
  ``CtagEmulator`` on a pty, through the fault-injecting relay (``tests/emulators/serial_link.py``);
* ``tool_flange``: :class:`~gripper.ctag.tool_backend.CtagToolGripperBackend` (the real ``pyaubo_sdk`` client,
  the controller's Modbus signals) against the ARCS emulator's tool RS-485 (``tests/emulators/arcs_emulator.py``).

Both emulators run the same finger model; a rig gives the register writes the gripper received, one
``(address, value)`` per register in order (the direct bus writes several registers per request, the
controller one per signal), so a test asserts the same wire sequence for either transport.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from aubo_bridge.backends.base import ArmMeasurement
from aubo_bridge.model.kinematics import HOME_Q
from gripper.ctag.modbus_backend import CtagConfig, CtagGripperBackend
from gripper.ctag.tool_backend import CtagToolConfig, CtagToolGripperBackend

HOST = "127.0.0.1"
ALARM_REG = 0x0412  # the emulators' alarm register (the real gripper documents none)
TRANSPORTS = ("modbus_rtu", "tool_flange")


def fast_config(port: str, **kw: object) -> CtagConfig:
    """The direct backend with short timeouts and reconnect period, to keep the suite fast."""
    values: dict[str, object] = {
        "port": port,
        "reg_alarm": ALARM_REG,
        "timeout": 0.05,
        "retries": 2,
        "reconnect_period": 0.2,
        "max_age": 0.4,
    }
    values.update(kw)
    return CtagConfig.from_mapping(values)


def tool_gripper(emu: Any, **kw: object) -> CtagToolGripperBackend:
    """A tool-flange backend on the ARCS emulator ``emu`` (the real gripper's map: no alarm register)."""
    return CtagToolGripperBackend(CtagToolConfig.from_mapping({"ip": HOST, "rpc_port": emu.port, **kw}))


def tool_writes(emu: Any) -> list[tuple[int, list[int]]]:
    """The writes the tool CTAG received, as the emulator records them: one register each."""
    return [(a, list(v)) for a, v in emu.tool()["writes"]]


def per_register(writes: list[tuple[int, list[int]]]) -> list[tuple[int, int]]:
    """Writes of several registers each -> one (address, value) per register, in order."""
    return [(address + i, v) for address, values in writes for i, v in enumerate(values)]


class ModbusRig:
    """The direct RS-485 backend and its emulator on a pty pair."""

    transport = "modbus_rtu"
    link_fault = "no valid reply"  # in the fault while the line is dead

    def __init__(self, link: Any) -> None:
        from emulators.modbus_devices import CtagEmulator

        self.link = link
        self.ctag = CtagEmulator(link.device_port, alarm_register=ALARM_REG)
        self._made: list[Any] = []
        self._gripper: CtagGripperBackend | None = None

    @property
    def gripper(self) -> CtagGripperBackend:
        """The backend under test (the emulator's alarm register polled), connected on first use."""
        if self._gripper is None:
            self._gripper = self.make(reg_alarm=ALARM_REG)
        return self._gripper

    def make(self, **kw: object) -> CtagGripperBackend:
        """A backend of its own on this emulator (closed with the rig); ``reg_alarm=-1``: the real gripper's map.
        One serial port has one client: a test uses either this or :attr:`gripper`."""
        backend = CtagGripperBackend(fast_config(self.link.client_port, **kw))
        self._made.append(backend)
        return backend

    def writes(self) -> list[tuple[int, int]]:
        return per_register(list(self.ctag.writes))

    def place_object(self, width_m: float | None) -> None:
        self.ctag.place_object(width_m)

    def inject_alarm(self, code: int) -> None:
        self.ctag.inject_alarm(code)

    def alarm_resets(self) -> int:
        return self.ctag.alarm_resets

    def enabled(self) -> bool:
        return self.ctag.enabled

    def cut_link(self) -> None:
        self.link.drop = True

    def heal_link(self) -> None:
        self.link.heal()

    def close(self) -> None:
        for backend in self._made:
            backend.close()
        self.ctag.close()


class ToolRig:
    """The tool-flange backend and the ARCS emulator whose tool RS-485 carries the gripper."""

    transport = "tool_flange"
    link_fault = "disconnected"  # the controller's ModbusErrorNum -2, the device status -2

    def __init__(self, emu: Any) -> None:
        self.emu = emu
        self._made: list[Any] = []
        self._gripper: CtagToolGripperBackend | None = None

    @property
    def gripper(self) -> CtagToolGripperBackend:
        if self._gripper is None:
            self._gripper = self.make(reg_alarm=ALARM_REG)
        return self._gripper

    def make(self, **kw: object) -> CtagToolGripperBackend:
        backend = tool_gripper(self.emu, **kw)
        self._made.append(backend)
        return backend

    def writes(self) -> list[tuple[int, int]]:
        return per_register(tool_writes(self.emu))

    def place_object(self, width_m: float | None) -> None:
        self.emu.tool_place_object(width_m)

    def inject_alarm(self, code: int) -> None:
        self.emu.tool_inject_alarm(code)

    def alarm_resets(self) -> int:
        return int(self.emu.tool()["alarm_resets"])

    def enabled(self) -> bool:
        return bool(self.emu.tool()["enabled"])

    def cut_link(self) -> None:
        self.emu.tool_unplug()

    def heal_link(self) -> None:
        self.emu.tool_unplug(False)

    def close(self) -> None:
        for backend in self._made:
            backend.close()


class StillArm:
    """A minimal arm double: measured joints = last servo target. The gripper is under test."""

    def __init__(self) -> None:
        self.q = HOME_Q.copy()

    def read(self) -> ArmMeasurement:
        return ArmMeasurement(time.monotonic(), self.q.copy(), np.zeros(6), True, None)

    def servo(self, q: np.ndarray) -> None:
        self.q = np.array(q, float)

    def hold(self) -> None:
        pass

    def acknowledge_fault(self) -> None:
        pass

    def close(self) -> None:
        pass
