"""Modbus conveyor backend: the real pymodbus client against VFD / stepper emulators over ptys."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import pytest
from conftest import wait_for
from emulators.modbus_devices import DeltaVfdEmulator, LeadshineEmulator
from emulators.serial_link import FaultyLink

from conveyor_driver.driver import ConveyorConfig, ConveyorDriver
from conveyor_driver.modbus_backend import (
    ConveyorConfigError,
    ConveyorModbusConfig,
    ModbusConveyorBackend,
    belt_to_motor_rpm,
    motor_rpm_to_belt,
    setpoint_register,
)

STEPPER_SPEED_REG, STEPPER_ALARM_REG = 0x600A, 0x600B  # the emulator's; undocumented on the real drive


def config(port: str, preset: str = "delta_vfd", **kw: object) -> ConveyorModbusConfig:
    values: dict[str, object] = {
        "preset": preset,
        "port": port,
        "roller_diameter": 0.05,
        "gear_ratio": 10.0,
        "poll_hz": 20.0,
        "timeout": 0.05,
        "reconnect_period": 0.2,
        "max_age": 0.5,
    }
    values.update(kw)
    return ConveyorModbusConfig.from_mapping(values)



@pytest.fixture
def vfd(link: FaultyLink) -> Iterator[DeltaVfdEmulator]:
    emu = DeltaVfdEmulator(link.device_port)
    yield emu
    emu.close()


@pytest.fixture
def vfd_belt(link: FaultyLink, vfd: DeltaVfdEmulator) -> Iterator[ModbusConveyorBackend]:
    backend = ModbusConveyorBackend(config(link.client_port))
    yield backend
    backend.close()


@pytest.fixture
def stepper(link: FaultyLink) -> Iterator[LeadshineEmulator]:
    emu = LeadshineEmulator(link.device_port, speed_register=STEPPER_SPEED_REG, alarm_register=STEPPER_ALARM_REG)
    yield emu
    emu.close()


@pytest.fixture
def stepper_belt(link: FaultyLink, stepper: LeadshineEmulator) -> Iterator[ModbusConveyorBackend]:
    cfg = config(link.client_port, "leadshine_rs485", reg_speed_feedback=STEPPER_SPEED_REG, reg_fault=STEPPER_ALARM_REG)
    backend = ModbusConveyorBackend(cfg)
    yield backend
    backend.close()


# ------------------------------------------------------------------ config
def test_conversion_one_function_each_way() -> None:
    cfg = ConveyorModbusConfig(roller_diameter=0.05, gear_ratio=10.0)
    rpm = belt_to_motor_rpm(0.03, cfg)
    assert rpm == pytest.approx(0.03 / (math.pi * 0.05) * 60 * 10)
    assert motor_rpm_to_belt(rpm, cfg) == pytest.approx(0.03)
    assert setpoint_register(0.03, cfg) == 382  # 114.6 rpm / 30 rpm/Hz = 3.82 Hz
    assert setpoint_register(0.05, cfg) == 637
    stepper = ConveyorModbusConfig(preset="leadshine_rs485", roller_diameter=0.05, gear_ratio=10.0)
    assert setpoint_register(0.03, stepper) == 115 and setpoint_register(0.05, stepper) == 191


def test_config_presets_overrides_and_validation() -> None:
    vfd = ConveyorModbusConfig()
    assert (vfd.reg_command, vfd.reg_setpoint, vfd.reg_fault, vfd.reg_speed_feedback) == (
        0x2000,
        0x2001,
        0x2100,
        0x2103,
    )
    st = ConveyorModbusConfig(preset="leadshine_rs485", reg_fault=0x2203)
    assert (st.reg_mode, st.value_mode, st.reg_setpoint, st.value_estop, st.reg_fault) == (
        0x6200,
        2,
        0x6203,
        0x40,
        0x2203,
    )
    with pytest.raises(ConveyorConfigError, match="preset"):
        ConveyorModbusConfig(preset="plc")
    with pytest.raises(ConveyorConfigError, match="unknown conveyor config keys"):
        ConveyorModbusConfig.from_mapping({"roller": 0.05})
    with pytest.raises(ConveyorConfigError, match="roller_diameter"):
        ConveyorModbusConfig(roller_diameter=0.0)
    defaults = ConveyorModbusConfig.parameter_defaults()
    assert defaults["reg_command"] == 0 and defaults["preset"] == "delta_vfd"
    assert ConveyorModbusConfig.from_mapping({**defaults, "preset": "leadshine_rs485"}).reg_command == 0x6002


def test_missing_port_is_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="does not exist"):
        ModbusConveyorBackend(ConveyorModbusConfig(port="/dev/ttyNOPE_belt"))


# --------------------------------------------------------------------- VFD
@pytest.mark.parametrize(("speed", "hz100"), [(0.03, 382), (0.05, 637)])
def test_vfd_runs_at_set_speed_and_integrates_position(
    vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend, speed: float, hz100: int
) -> None:
    vfd_belt.run(speed)
    assert wait_for(lambda: vfd.reg(0x2000) == 0x12)
    assert vfd.reg(0x2001) == hz100
    assert wait_for(lambda: abs(vfd_belt.read().speed - speed) < 0.001 * speed)
    s0 = vfd_belt.read()
    assert s0.running and s0.fault is None
    time.sleep(0.5)
    s1 = vfd_belt.read()
    assert (s1.position - s0.position) / (s1.stamp - s0.stamp) == pytest.approx(speed, rel=0.15)


def test_vfd_halt_and_emergency_stop(vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend) -> None:
    vfd_belt.run(0.05)
    assert wait_for(lambda: vfd_belt.read().speed > 0.04)
    vfd_belt.halt()
    assert wait_for(lambda: vfd_belt.read().speed == 0.0)
    assert vfd.writes[-1] == (0x2000, [0x01]) and not vfd_belt.read().running
    pos = vfd_belt.read().position
    time.sleep(0.2)
    assert vfd_belt.read().position == pytest.approx(pos)
    vfd_belt.run(0.05)
    assert wait_for(lambda: vfd_belt.read().speed > 0.04)
    vfd_belt.emergency_stop()
    assert wait_for(lambda: vfd_belt.read().speed == 0.0)
    assert vfd.writes[-2:] == [(0x2000, [0x01]), (0x2001, [0])]


def test_vfd_fault_latches_in_driver_until_reset(vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=0.03), vfd_belt)
    assert driver.start()[0]
    assert wait_for(lambda: driver.read().speed > 0.029)
    vfd.inject_fault(7)
    assert wait_for(lambda: driver.read().fault is not None)
    assert "fault code 7" in (driver.read().fault or "") and not driver.read().running
    assert wait_for(lambda: (0x2000, [0x01]) in vfd.writes)  # the driver halted the drive
    ok, msg = driver.start()
    assert not ok and "fault" in msg
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert (0x2002, [0x0002]) in vfd.writes and vfd.resets == 1
    assert not vfd.running  # the reset never starts the belt
    assert driver.start()[0]
    assert wait_for(lambda: driver.read().speed > 0.029)


def test_vfd_link_loss_faults_the_driver_and_recovers(
    link: FaultyLink, vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend
) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=0.03), vfd_belt)
    assert driver.start()[0]
    link.drop = True
    assert wait_for(lambda: driver.read().fault is not None)
    assert not driver.start()[0]
    ok, msg = driver.reset_fault()  # a reset over a dead link is refused, not raised
    assert not ok and "fault still present" in msg
    link.heal()
    assert wait_for(lambda: vfd_belt.read().fault is None)
    assert vfd.reg(0x2000) == 0x01  # reconnect leaves the belt stopped
    assert driver.reset_fault()[0]


# ----------------------------------------------------------------- stepper
@pytest.mark.parametrize(("speed", "rpm"), [(0.03, 115), (0.05, 191)])
def test_stepper_runs_at_set_speed(
    stepper: LeadshineEmulator, stepper_belt: ModbusConveyorBackend, speed: float, rpm: int
) -> None:
    assert stepper.reg(0x6200) == 2  # velocity mode set at connect
    assert stepper.reg(0x6204) == 100 and stepper.reg(0x6205) == 100
    stepper_belt.run(speed)
    assert wait_for(lambda: stepper.writes[-2:] == [(0x6203, [rpm]), (0x6002, [0x10])])
    assert wait_for(lambda: abs(stepper_belt.read().speed - speed) < 0.01 * speed)
    s0 = stepper_belt.read()
    time.sleep(0.3)
    s1 = stepper_belt.read()
    assert (s1.position - s0.position) / (s1.stamp - s0.stamp) == pytest.approx(speed, rel=0.15)


def test_stepper_halt_estop_alarm_and_reset(stepper: LeadshineEmulator, stepper_belt: ModbusConveyorBackend) -> None:
    stepper_belt.run(0.05)
    assert wait_for(lambda: stepper_belt.read().speed > 0.045)
    stepper_belt.halt()
    assert wait_for(lambda: stepper_belt.read().speed == 0.0)
    assert stepper.writes[-2:] == [(0x6203, [0]), (0x6002, [0x10])] and stepper.estops == 0
    stepper_belt.run(0.05)
    assert wait_for(lambda: stepper_belt.read().speed > 0.045)
    stepper_belt.emergency_stop()
    assert wait_for(lambda: stepper.estops == 1)
    assert wait_for(lambda: stepper_belt.read().speed == 0.0)
    stepper.inject_alarm(3)
    assert wait_for(lambda: stepper_belt.read().fault is not None)
    stepper_belt.acknowledge_fault()
    assert stepper_belt.read().fault is None
    assert (0x1801, [0x1111]) in stepper.writes and not stepper.running


def test_stepper_without_feedback_reports_commanded_speed(link: FaultyLink, stepper: LeadshineEmulator) -> None:
    backend = ModbusConveyorBackend(config(link.client_port, "leadshine_rs485"))  # preset: no feedback registers
    try:
        backend.run(0.03)
        assert wait_for(lambda: backend.read().speed > 0)
        assert backend.read().speed == pytest.approx(
            motor_rpm_to_belt(belt_to_motor_rpm(0.03, backend.config), backend.config)
        )
        backend.halt()
        assert wait_for(lambda: backend.read().speed == 0.0)
    finally:
        backend.close()


# ------------------------------------------------ commands answer after the drive confirmed (issue 7)
def test_start_over_a_dead_link_fails_with_the_reason_instead_of_running(
    link: FaultyLink, vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend
) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=0.03), vfd_belt)
    link.drop = True  # the drive hears nothing back... as far as the client can tell
    t0 = time.monotonic()
    ok, msg = driver.start()
    assert not ok and "did not confirm" in msg and "failed" in msg, msg
    assert time.monotonic() - t0 < vfd_belt.config.command_timeout + 1.0
    state = driver.read()
    assert not state.running and not state.confirmed  # commanded, never confirmed
    link.heal()
    assert wait_for(lambda: vfd_belt.read().fault is None, 5.0)
    assert driver.stop()[0] and driver.read().confirmed


def test_state_says_commanded_but_unconfirmed_while_the_drive_is_answering(
    link: FaultyLink, vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend
) -> None:
    import threading

    driver = ConveyorDriver(ConveyorConfig(speed=0.03), vfd_belt)
    link.delay = 0.04  # a slow drive: each reply 40 ms late (within the 50 ms timeout)
    result: list[tuple[bool, str]] = []
    worker = threading.Thread(target=lambda: result.append(driver.start()))
    worker.start()
    seen = set()
    while worker.is_alive():
        s = driver.read()
        seen.add((s.commanded, s.confirmed, s.running))
        time.sleep(0.005)
    worker.join()
    assert result and result[0][0], result
    assert ("run", False, False) in seen  # the service had not answered yet, and the state said so
    s = driver.read()
    assert (s.commanded, s.confirmed) == ("run", True) and vfd.reg(0x2000) == 0x12


def test_unconfirmed_emergency_stop_is_a_loud_fault_and_is_resent_until_confirmed(
    link: FaultyLink, vfd: DeltaVfdEmulator, vfd_belt: ModbusConveyorBackend, caplog: pytest.LogCaptureFixture
) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=0.03), vfd_belt)
    assert driver.start()[0]
    assert wait_for(lambda: vfd.running)
    link.drop = True
    ok, msg = driver.emergency_stop()
    assert not ok and "EMERGENCY STOP NOT CONFIRMED" in msg
    state = driver.read()
    assert "emergency stop not confirmed" in (state.fault or "") and not state.confirmed
    assert any(r.levelname == "ERROR" and "emergency stop not confirmed" in r.getMessage() for r in caplog.records)
    ok, msg = driver.reset_fault()
    assert not ok and "hardware e-stop" in msg
    writes_before = len(vfd.writes)
    link.heal()  # the retries get through
    assert wait_for(lambda: driver.read().confirmed, 10.0)
    assert (0x2001, [0]) in vfd.writes[writes_before:] and not vfd.running
    state = driver.read()
    assert state.commanded == "emergency_stop" and state.fault == "emergency stop requested"
    assert not driver.start()[0]  # still latched until the operator resets
    assert driver.reset_fault()[0]
    driver.close()


def test_command_timeout_must_cover_the_retries() -> None:
    with pytest.raises(ConveyorConfigError, match="command_timeout"):
        ConveyorModbusConfig(command_timeout=0.1)
