"""CTAG2F90D on the AUBO tool flange: the real pyaubo_sdk client against the loopback ARCS emulator.

The emulator answers RegisterControl's Modbus-signal calls with the CtagEmulator finger model
behind an emulated tool RS-485; everything runs on 127.0.0.1. What the gripper does on either transport
(start-up, commands, grasp, alarm, link loss, the driver) is in test_gripper_contract.py; here what only the
controller path has (the tool line and signal set-up, the ARCS session, the controller's signal table).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import wait_for
from ctag_rigs import ALARM_REG, HOST
from ctag_rigs import tool_gripper as make
from ctag_rigs import tool_writes as writes
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.arcs import ArcsArmBackend
from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from gripper.ctag.tool_backend import (
    CtagToolConfig,
    CtagToolConfigError,
    CtagToolGripperBackend,
)
from libero_workcell.contract import SOURCE_POLICY
from transports.errors import BackendError


@pytest.fixture
def gripper(emu: ArcsEmulator) -> Iterator[CtagToolGripperBackend]:
    g = make(emu, reg_alarm=ALARM_REG)
    yield g
    g.close()


# ------------------------------------------------------------------ config
def test_config_validates_and_builds_the_device_string() -> None:
    c = CtagToolConfig()
    assert c.device_info == "/dev/ttyRobotTool,115200,N,8,1"
    assert c.reg_feedback == 0x0418 and c.reg_trigger == 0x0108 and c.position_max == 9000  # CtagConfig's map
    with pytest.raises(CtagToolConfigError, match="unknown tool gripper config keys"):
        CtagToolConfig.from_mapping({"baud": 9600})
    with pytest.raises(CtagToolConfigError, match="tool_voltage"):
        CtagToolConfig(tool_voltage=5)
    with pytest.raises(CtagToolConfigError, match="20 characters"):
        CtagToolConfig(signal_prefix="a_very_long_prefix_")
    with pytest.raises(CtagToolConfigError, match="update_hz"):
        CtagToolConfig(update_hz=200)
    defaults = CtagToolConfig.parameter_defaults()
    assert CtagToolConfig.from_mapping(defaults) == CtagToolConfig()


def test_unconfigured_ip_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match="ip is not configured"):
        CtagToolGripperBackend(CtagToolConfig())


# --------------------------------------------------------------- behaviour
def test_start_configures_tool_line_and_signals(emu: ArcsEmulator, gripper: CtagToolGripperBackend) -> None:
    """The tool supply and one controller signal per register on the tool line (the writes that follow, and
    the enable, are in test_gripper_contract.py)."""
    st = emu.tool()
    assert st["voltage"] == 24
    sig = st["signals"]
    assert sig["ctag_enable"]["device_info"] == "/dev/ttyRobotTool,115200,N,8,1"
    assert {s["type"] for s in sig.values()} == {3} and all(s["slave"] == 1 for s in sig.values())
    assert sig["ctag_fb_lo"]["address"] == 0x0419 and sig["ctag_fb_hi"]["hz"] == 100
    assert "ctag_alarm" in sig and all(s["sequential"] for s in sig.values())


def test_without_alarm_register_no_alarm_signal_is_added(emu: ArcsEmulator) -> None:
    g = make(emu)  # the real gripper's map: no alarm register polled
    try:
        assert "ctag_alarm" not in emu.tool()["signals"]
        assert wait_for(lambda: g.read().fault is None)
    finally:
        g.close()


def test_arcs_link_loss_is_a_fault_and_acknowledge_reconnects(
    emu: ArcsEmulator, gripper: CtagToolGripperBackend
) -> None:
    emu.tool_place_object(0.03)
    gripper.command(1.0)
    assert wait_for(lambda: gripper.read().object_detected)
    enables = sum(1 for a, _ in writes(emu) if a == 0x0100)
    emu.disconnect(refuse=True)
    assert wait_for(lambda: gripper.read().fault is not None)
    m = gripper.read()
    assert not m.object_detected and ("lost" in str(m.fault) or "ARCS" in str(m.fault))
    gripper.command(0.0)  # queued into the dead link: void, never executed after the reset
    with pytest.raises(BackendError):
        gripper.acknowledge_fault()  # controller still refusing
    emu.accept_connections()
    n_writes = len(writes(emu))
    gripper.acknowledge_fault()
    assert wait_for(lambda: gripper.read().fault is None)
    time.sleep(0.2)
    assert sum(1 for a, _ in writes(emu) if a == 0x0100) == enables  # no second init stroke while holding
    assert not [w for w in writes(emu)[n_writes:] if w[0] in (0x0102, 0x0103, 0x0108)]  # fingers not moved
    assert gripper.read().coord == pytest.approx(6000 / 9000, abs=0.01)


def test_wrong_line_settings_are_a_fault(emu: ArcsEmulator) -> None:
    g = make(emu, baudrate=9600)  # the gripper does not answer at 9600 baud
    try:
        m = g.read()
        assert m.fault is not None and "-2" in m.fault
    finally:
        g.close()


def test_signals_lost_on_the_controller_are_a_fault_acknowledge_adds_them(
    emu: ArcsEmulator, gripper: CtagToolGripperBackend
) -> None:
    assert wait_for(lambda: gripper.read().fault is None)
    emu.tool("clear_signals")  # e.g. the controller restarted
    assert wait_for(lambda: "missing" in str(gripper.read().fault))
    gripper.acknowledge_fault()
    assert wait_for(lambda: gripper.read().fault is None)


def test_driver_with_arcs_arm_and_tool_gripper_on_one_controller(emu: ArcsEmulator) -> None:
    """The production pairing: ArcsArmBackend and this backend, two sessions to one controller, one driver."""
    arm = ArcsArmBackend(ArcsConfig(ip=HOST, rpc_port=emu.port))
    arm.connect()
    grip = make(emu, reg_alarm=ALARM_REG)
    driver = ArmDriver(ArmConfig(servo_hz=100.0), arm, grip, active_source=SOURCE_POLICY)
    try:
        assert driver.enable() == (True, "enabled")
        emu.tool_place_object(0.03)
        close = np.array([0, 0, 0, 0, 0, 0, 1.0])

        def tick_close() -> bool:
            assert driver.submit_action(close, SOURCE_POLICY).accepted
            driver.tick()
            return grip.read().object_detected

        assert wait_for(tick_close)
        assert driver.status().gripper == pytest.approx(6000 / 9000, abs=0.01)
        emu.tool_inject_alarm(2)
        assert wait_for(lambda: (driver.tick(), driver.mode is ArmMode.FAULT)[1])
        assert "gripper alarm code 2" in str(driver.status().fault)
        ok, why = driver.reset_fault()
        assert ok, why
        assert emu.tool()["alarm_resets"] == 1
    finally:
        driver.close()
