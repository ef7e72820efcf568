"""CTAG2F90D backend: the real pymodbus client against the gripper emulator over ptys.

The link runs through a fault-injecting relay, so timeouts and CRC errors
are real serial events, not mocks. Timeouts and reconnect periods are short
to keep the suite fast.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import wait_for
from emulators.modbus_devices import CtagEmulator
from emulators.serial_link import FaultyLink, SocatPair

from aubo_bridge.backends.base import ArmMeasurement
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q
from gripper.ctag.modbus_backend import CtagConfig, CtagConfigError, CtagGripperBackend
from libero_workcell.contract import SOURCE_POLICY
from transports.errors import BackendError

ALARM_REG = 0x0412  # the emulator's alarm register (the real gripper documents none)


def fast_config(port: str, **kw: object) -> CtagConfig:
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


@pytest.fixture
def ctag(link: FaultyLink) -> Iterator[CtagEmulator]:
    emu = CtagEmulator(link.device_port, alarm_register=ALARM_REG)
    yield emu
    emu.close()


@pytest.fixture
def gripper(link: FaultyLink, ctag: CtagEmulator) -> Iterator[CtagGripperBackend]:
    backend = CtagGripperBackend(fast_config(link.client_port))
    yield backend
    backend.close()



# ------------------------------------------------------------------ config
def test_config_validates_and_rejects_unknown_keys() -> None:
    with pytest.raises(CtagConfigError, match="unknown gripper config keys"):
        CtagConfig.from_mapping({"sped": 10})
    with pytest.raises(CtagConfigError, match="speed"):
        CtagConfig(speed=300)
    with pytest.raises(CtagConfigError, match="slave_id"):
        CtagConfig(slave_id=0)
    with pytest.raises(CtagConfigError, match="max_age"):
        CtagConfig(poll_hz=10.0, max_age=0.25)  # two poll periods + retries exceed it
    defaults = CtagConfig.parameter_defaults()
    assert defaults["reg_feedback"] == 0x0418 and defaults["position_max"] == 9000 and defaults["baudrate"] == 115200
    assert all(isinstance(v, (str, int, float)) for v in defaults.values())
    assert CtagConfig.from_mapping(defaults) == CtagConfig()


def test_missing_port_is_a_clear_error() -> None:
    with pytest.raises(BackendError, match="does not exist"):
        CtagGripperBackend(CtagConfig(port="/dev/ttyNOPE_ctag"))


def test_unreadable_port_is_a_clear_error(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    port = tmp_path / "tty"
    port.touch(mode=0)
    if os.geteuid() == 0:  # root passes any access check: pretend to be a user outside 'dialout'
        monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(BackendError, match=r"permission.*dialout"):
        CtagGripperBackend(CtagConfig(port=str(port)))


# --------------------------------------------------------------- behaviour
def test_enable_and_settings_written_at_start(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    assert ctag.writes[:3] == [(0x0100, [1]), (0x0104, [255, 128]), (0x0106, [2000, 2000])]
    assert ctag.enabled
    m = gripper.read()
    assert m.fault is None and m.coord == 0.0 and not m.object_detected


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_command_is_refused_not_clamped(ctag: CtagEmulator, gripper: CtagGripperBackend, bad: float) -> None:
    """max(0.0, nan) is 0.0: clamping would open the fingers and drop a held part."""
    gripper.command(1.0)
    assert wait_for(lambda: gripper.read().coord > 0.99, 5.0)
    writes = len(ctag.writes)
    with pytest.raises(BackendError, match="not a finite coordinate"):
        gripper.command(bad)
    time.sleep(0.2)
    assert len(ctag.writes) == writes and gripper.read().coord > 0.99


def test_close_on_object_detects_grasp_then_open_releases(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    ctag.place_object(0.03)  # 30 mm object: fingers stall at 6000 of 9000
    gripper.command(1.0)
    assert not gripper.read().object_detected  # still moving
    assert wait_for(lambda: gripper.read().object_detected)
    m = gripper.read()
    assert m.fault is None and m.coord == pytest.approx(6000 / 9000, abs=0.01)
    assert (0x0102, [0, 9000]) in ctag.writes and ctag.writes[-1] == (0x0108, [1])
    gripper.command(0.98)  # a policy's continuous close value while holding: the grasp stays detected
    time.sleep(0.2)
    assert gripper.read().object_detected
    gripper.command(0.0)
    assert wait_for(lambda: gripper.read().coord == 0.0)
    m = gripper.read()
    assert not m.object_detected and m.fault is None
    assert (0x0102, [0, 0]) in ctag.writes


def test_close_without_object_reaches_closed_and_detects_nothing(
    ctag: CtagEmulator, gripper: CtagGripperBackend
) -> None:
    gripper.command(1.0)
    assert wait_for(lambda: gripper.read().coord == 1.0)
    time.sleep(0.3)
    assert not gripper.read().object_detected


def test_refused_motion_is_not_a_grasp(link: FaultyLink, ctag: CtagEmulator) -> None:
    """Without an alarm register the backend cannot see why the fingers do not move: still no grasp."""
    backend = CtagGripperBackend(fast_config(link.client_port, reg_alarm=-1))
    try:
        ctag.inject_alarm(1)  # the emulator refuses motion while alarmed
        backend.command(1.0)
        time.sleep(0.5)
        m = backend.read()
        assert m.coord == 0.0 and not m.object_detected and m.fault is None
    finally:
        backend.close()


def test_target_is_32_bit_high_word_first(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    gripper.command(0.5)
    assert wait_for(lambda: (0x0108, [1]) in ctag.writes)
    assert (0x0102, [0, 4500]) in ctag.writes
    assert wait_for(lambda: abs(gripper.read().coord - 0.5) < 1e-3)


def test_speed_force_change_is_written(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    gripper.set_speed_force(100, 50)
    assert wait_for(lambda: (0x0104, [100, 50]) in ctag.writes)


def test_alarm_faults_and_reset_clears_without_moving(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    gripper.command(0.4)
    assert wait_for(lambda: abs(gripper.read().coord - 0.4) < 1e-3)
    ctag.inject_alarm(5)
    assert wait_for(lambda: gripper.read().fault is not None)
    assert "alarm code 5" in (gripper.read().fault or "")
    n_writes = len(ctag.writes)
    gripper.acknowledge_fault()
    assert gripper.read().fault is None  # acknowledge waits for a fresh poll
    assert ctag.writes[n_writes:] == [(0x0110, [1])] and ctag.alarm_resets == 1
    time.sleep(0.1)
    assert gripper.read().coord == pytest.approx(0.4, abs=1e-3)


def test_dropped_replies_are_retried_then_fault_then_recover(
    link: FaultyLink, ctag: CtagEmulator, gripper: CtagGripperBackend
) -> None:
    link.drop_next(2)  # fewer than 1 + retries attempts: absorbed by retries
    assert wait_for(lambda: gripper.bus.stats["retries"] >= 2)
    assert gripper.read().fault is None
    link.drop = True
    # "stale" may show first (max_age < the time 3 attempts take); then the link fault with its reason.
    assert wait_for(lambda: "no valid reply after 3 attempts" in (gripper.read().fault or ""))
    link.heal()
    assert wait_for(lambda: gripper.read().fault is None)
    assert gripper.bus.stats["connects"] >= 2
    # Reconnected: settings rewritten, but no second enable/init (it may run a calibration stroke).
    assert ctag.writes.count((0x0100, [1])) == 1 and ctag.writes.count((0x0104, [255, 128])) >= 2


def test_crc_errors_are_retried_then_fault_then_recover(link: FaultyLink, gripper: CtagGripperBackend) -> None:
    link.corrupt_next(2)
    assert wait_for(lambda: link.replies_corrupted >= 2)
    time.sleep(0.1)
    assert gripper.read().fault is None and gripper.bus.stats["retries"] >= 2
    link.corrupt = True
    assert wait_for(lambda: gripper.read().fault is not None)
    link.heal()
    assert wait_for(lambda: gripper.read().fault is None)


def test_slow_device_makes_the_snapshot_stale(link: FaultyLink, ctag: CtagEmulator) -> None:
    backend = CtagGripperBackend(fast_config(link.client_port, timeout=0.5, retries=0, max_age=0.1))
    try:
        assert backend.read().fault is None
        link.delay = 0.3  # every reply late, but within the timeout: no link fault, only old data
        assert wait_for(lambda: "stale" in (backend.read().fault or ""))
    finally:
        link.heal()
        backend.close()


def test_read_and_command_never_block_on_a_dead_bus(link: FaultyLink, gripper: CtagGripperBackend) -> None:
    link.drop = True
    times: list[float] = []
    t_end = time.monotonic() + 0.6
    while time.monotonic() < t_end:
        t0 = time.perf_counter()
        gripper.read()
        times.append(time.perf_counter() - t0)
        time.sleep(0.001)
    # One dead-bus transaction takes >= 3 x 50 ms; outliers of a few ms are GIL hand-offs to the bus thread.
    assert float(np.median(times)) < 0.0005 and max(times) < 0.05
    t0 = time.perf_counter()
    gripper.command(1.0)
    assert time.perf_counter() - t0 < 0.05
    assert gripper.read().fault is not None


def test_socat_pair_link(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The HARDWARE.md recipe: emulator on one end of a socat pty pair, backend on the other."""
    pair = SocatPair()
    emu = CtagEmulator(pair.b)
    backend = CtagGripperBackend(CtagConfig(port=pair.a))
    try:
        backend.command(1.0)
        assert wait_for(lambda: backend.read().coord == 1.0)
    finally:
        backend.close()
        emu.close()
        pair.close()


# ------------------------------------------------------- with the ArmDriver
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


def test_arm_driver_drives_the_ctag(ctag: CtagEmulator, gripper: CtagGripperBackend) -> None:
    driver = ArmDriver(ArmConfig(), StillArm(), gripper, active_source=SOURCE_POLICY)
    assert driver.enable()[0]
    ctag.place_object(0.045)
    ticks: list[float] = []

    def run(grip: float, until, timeout: float = 3.0) -> bool:  # type: ignore[no-untyped-def]
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

    assert run(1.0, lambda: gripper.read().object_detected)
    assert driver.status().gripper == pytest.approx(0.5, abs=0.01)
    assert run(-1.0, lambda: driver.status().gripper == 0.0)
    # The 100 Hz tick never waits on the bus (a bus round trip is ~5 ms; outliers are GIL hand-offs).
    assert float(np.median(ticks)) < 0.003 and max(ticks) < 0.05
    ctag.inject_alarm(2)
    assert wait_for(lambda: (driver.tick(), driver.mode is ArmMode.FAULT)[1])
    assert "gripper" in (driver.status().fault or "")
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert ctag.alarm_resets == 1
