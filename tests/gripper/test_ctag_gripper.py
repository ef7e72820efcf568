"""CTAG2F90D backend: the real pymodbus client against the gripper emulator over ptys.

The link runs through a fault-injecting relay, so timeouts and CRC errors
are real serial events, not mocks. Timeouts and reconnect periods are short
to keep the suite fast. What the gripper does on either transport (start-up, commands, grasp, alarm,
link loss, the driver) is in test_gripper_contract.py; here what only the serial line has.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import numpy as np
import pytest
from conftest import wait_for
from ctag_rigs import ALARM_REG, fast_config
from emulators.modbus_devices import CtagEmulator
from emulators.serial_link import FaultyLink, SocatPair

from gripper.ctag.modbus_backend import CtagConfig, CtagConfigError, CtagGripperBackend
from transports.errors import BackendError


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


# --------------------------------------------------------- the serial line
# (the behaviour both transports share is in test_gripper_contract.py)
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
