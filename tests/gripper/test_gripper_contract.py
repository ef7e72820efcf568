"""The CTAG2F90D gripper's behaviour, once, on both of its transports (``tests/fixtures/ctag_rigs.py``).

Each test runs against the direct RS-485 backend (pymodbus, the CtagEmulator on a pty) and against the
tool-flange backend (the real ``pyaubo_sdk`` client, the ARCS emulator's tool RS-485). What only one
transport has (a serial line's retries and CRC errors; the controller's signal table, the ARCS session) is
tested in ``test_ctag_gripper.py`` and ``test_ctag_tool.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import wait_for
from ctag_rigs import TRANSPORTS, ModbusRig, StillArm, ToolRig

from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from libero_workcell.contract import SOURCE_POLICY
from transports.errors import BackendError

START = [(0x0100, 1), (0x0104, 255), (0x0105, 128), (0x0106, 2000), (0x0107, 2000)]  # enable, speed, force, acc, dec
TRIGGER = (0x0108, 1)
ALARM_RESET = (0x0110, 1)


def target(counts: int) -> list[tuple[int, int]]:
    """The motion command on the wire: the 32-bit target high word first, then the trigger."""
    return [(0x0102, counts >> 16), (0x0103, counts & 0xFFFF), TRIGGER]


def contains_run(writes: list[tuple[int, int]], run: list[tuple[int, int]]) -> bool:
    return any(writes[i : i + len(run)] == run for i in range(len(writes) - len(run) + 1))


@pytest.fixture(params=TRANSPORTS)
def rig(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A gripper backend (``rig.gripper``, connected on first use, the emulator's alarm register polled; or
    ``rig.make(**config)`` for one configured otherwise) and a handle on its emulator, for each transport."""
    if request.param == "modbus_rtu":
        r: Any = ModbusRig(request.getfixturevalue("link"))
    else:
        r = ToolRig(request.getfixturevalue("emu"))
    try:
        yield r
    finally:
        r.close()


def test_start_enables_once_and_writes_the_settings(rig: Any) -> None:
    g = rig.gripper  # connects
    assert rig.writes()[:5] == START
    assert rig.enabled()
    assert wait_for(lambda: g.read().fault is None)
    m = g.read()
    assert m.coord == 0.0 and not m.object_detected


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_command_is_refused_not_clamped(rig: Any, bad: float) -> None:
    """max(0.0, nan) is 0.0: clamping would open the fingers and drop a held part."""
    rig.gripper.command(1.0)
    assert wait_for(lambda: rig.gripper.read().coord > 0.99, 5.0)
    writes = len(rig.writes())
    with pytest.raises(BackendError, match="not a finite coordinate"):
        rig.gripper.command(bad)
    time.sleep(0.2)
    assert len(rig.writes()) == writes and rig.gripper.read().coord > 0.99


def test_close_on_object_detects_grasp_then_open_releases(rig: Any) -> None:
    g = rig.gripper
    rig.place_object(0.03)  # 30 mm object: fingers stall at 6000 of 9000
    g.command(1.0)
    assert not g.read().object_detected  # still moving
    assert wait_for(lambda: g.read().object_detected)
    m = g.read()
    assert m.fault is None and m.coord == pytest.approx(6000 / 9000, abs=0.01)
    assert rig.writes()[-3:] == target(9000)  # hi, lo, then the trigger
    g.command(0.98)  # a policy's continuous close value while holding: the grasp stays detected
    time.sleep(0.2)
    assert g.read().object_detected
    g.command(0.0)
    assert wait_for(lambda: g.read().coord == 0.0)
    m = g.read()
    assert not m.object_detected and m.fault is None
    assert rig.writes()[-3:] == target(0)


def test_close_without_object_reaches_closed_and_detects_nothing(rig: Any) -> None:
    rig.gripper.command(1.0)
    assert wait_for(lambda: rig.gripper.read().coord == 1.0)
    time.sleep(0.3)
    assert not rig.gripper.read().object_detected


def test_refused_motion_is_not_a_grasp(rig: Any) -> None:
    """Without an alarm register the backend cannot see why the fingers do not move: still no grasp."""
    backend = rig.make(reg_alarm=-1)
    rig.inject_alarm(1)  # the emulator refuses motion while alarmed
    backend.command(1.0)
    time.sleep(0.5)
    m = backend.read()
    assert m.coord == 0.0 and not m.object_detected and m.fault is None


def test_target_is_32_bit_high_word_first(rig: Any) -> None:
    rig.gripper.command(0.5)
    assert wait_for(lambda: TRIGGER in rig.writes())
    assert contains_run(rig.writes(), target(4500))
    assert wait_for(lambda: abs(rig.gripper.read().coord - 0.5) < 1e-3)


def test_speed_force_change_is_written(rig: Any) -> None:
    rig.gripper.set_speed_force(100, 50)
    assert wait_for(lambda: contains_run(rig.writes(), [(0x0104, 100), (0x0105, 50)]))


def test_alarm_faults_and_reset_clears_without_moving(rig: Any) -> None:
    g = rig.gripper
    g.command(0.4)
    assert wait_for(lambda: abs(g.read().coord - 0.4) < 1e-3)
    rig.inject_alarm(5)
    assert wait_for(lambda: g.read().fault is not None)
    assert g.read().fault == "gripper alarm code 5"
    n_writes = len(rig.writes())
    g.acknowledge_fault()
    assert g.read().fault is None  # acknowledge waits for a fresh poll
    assert rig.writes()[n_writes:] == [ALARM_RESET] and rig.alarm_resets() == 1
    time.sleep(0.1)
    assert g.read().coord == pytest.approx(0.4, abs=1e-3)


def test_acknowledge_without_alarm_register_still_writes_reset(rig: Any) -> None:
    backend = rig.make(reg_alarm=-1)  # the real gripper's map: no alarm register polled
    backend.acknowledge_fault()
    assert rig.writes()[-1] == ALARM_RESET


def test_gripper_link_loss_is_a_fault_and_recovers_by_itself(rig: Any) -> None:
    g = rig.gripper
    assert wait_for(lambda: g.read().fault is None)
    rig.cut_link()
    # "stale" may show first; then the link fault with its reason
    assert wait_for(lambda: rig.link_fault in str(g.read().fault))
    rig.heal_link()
    assert wait_for(lambda: g.read().fault is None)


def test_close_is_idempotent_and_commands_after_close_fail(rig: Any) -> None:
    backend = rig.make()
    backend.close()
    backend.close()
    with pytest.raises(BackendError, match="closed"):
        backend.command(1.0)


def test_arm_driver_drives_the_gripper(rig: Any) -> None:
    g = rig.gripper
    driver = ArmDriver(ArmConfig(), StillArm(), g, active_source=SOURCE_POLICY)
    assert driver.enable()[0]
    rig.place_object(0.045)
    ticks: list[float] = []

    def run(grip: float, until: Any, timeout: float = 3.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert driver.submit_action(np.array([0, 0, 0, 0, 0, 0, grip]), SOURCE_POLICY).accepted
            for _ in range(5):
                t0 = time.perf_counter()
                driver.tick()
                ticks.append(time.perf_counter() - t0)
                time.sleep(0.01)
            if until():
                return True
        return False

    assert run(1.0, lambda: g.read().object_detected)
    assert driver.status().gripper == pytest.approx(0.5, abs=0.01)
    assert run(-1.0, lambda: driver.status().gripper == 0.0)
    # The 100 Hz tick never waits on the bus (a round trip is ~5 ms; outliers are GIL hand-offs).
    assert float(np.median(ticks)) < 0.003 and max(ticks) < 0.05
    rig.inject_alarm(2)
    assert wait_for(lambda: (driver.tick(), driver.mode is ArmMode.FAULT)[1])
    assert "gripper alarm code 2" in str(driver.status().fault)
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert rig.alarm_resets() == 1
