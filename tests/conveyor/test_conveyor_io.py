"""Relay-switched conveyor on an arm-controller digital output: the real pyaubo_sdk vs the ARCS emulator.

Everything runs on 127.0.0.1: the emulator binds an ephemeral loopback port.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from conftest import wait_for
from emulators.arcs_emulator import ArcsEmulator

from conveyor_driver.driver import ConveyorConfig, ConveyorDriver
from conveyor_driver.io_backend import ConveyorIoConfig, ConveyorIoConfigError, IoConveyorBackend
from transports.errors import BackendError

HOST = "127.0.0.1"
DO = 3
SPEED = 0.05



def config(emu: ArcsEmulator, **kw: object) -> ConveyorIoConfig:
    values: dict[str, object] = {
        "ip": HOST, "port": emu.port, "do_index": DO, "nominal_speed": SPEED, "poll_hz": 20.0, "stale_after": 0.5,
    }  # fmt: skip
    values.update(kw)
    return ConveyorIoConfig.from_mapping(values)


@pytest.fixture
def belt(emu: ArcsEmulator) -> Iterator[IoConveyorBackend]:
    b = IoConveyorBackend(config(emu))
    yield b
    b.close()


def test_config_validation() -> None:
    with pytest.raises(ConveyorIoConfigError, match="unknown"):
        ConveyorIoConfig.from_mapping({"do": 1})
    for bad in ({"do_index": -1}, {"nominal_speed": 0.0}, {"port": 0}, {"active_high": 1}, {"stale_after": 0.1}):
        with pytest.raises(ConveyorIoConfigError):
            ConveyorIoConfig.from_mapping(bad)
    d = ConveyorIoConfig.parameter_defaults()
    assert d["port"] == 30004 and d["do_index"] == 0 and d["active_high"] is True and d["nominal_speed"] == 0.03
    assert ConveyorIoConfig.from_mapping(d) == ConveyorIoConfig()


def test_no_ip_refused() -> None:
    with pytest.raises(BackendError, match="ip is not configured"):
        IoConveyorBackend(ConveyorIoConfig())


def test_connect_switches_belt_off(emu: ArcsEmulator) -> None:
    emu.set_digital_output(DO, True)  # left on by someone else: the driver starts with the belt off
    b = IoConveyorBackend(config(emu))
    try:
        assert emu.digital_output(DO) is False
        s = b.read()
        assert not s.running and s.speed == 0.0 and s.fault is None
    finally:
        b.close()


def test_missing_output_refused_at_start(emu: ArcsEmulator) -> None:
    with pytest.raises(BackendError, match="do_index 16 does not exist"):
        IoConveyorBackend(config(emu, do_index=16))


@pytest.fixture
def patient_belt(emu: ArcsEmulator) -> Iterator[IoConveyorBackend]:
    """A belt whose read-back may come late without a fault: beside a busy loop (ci66) a read-back came 0.5 s late,
    the belt rightly read stale and stopped, and the travel the test checks was cut short."""
    b = IoConveyorBackend(config(emu, request_timeout=2.0, stale_after=10.0))
    yield b
    b.close()


def test_run_and_halt_toggle_the_output(emu: ArcsEmulator, patient_belt: IoConveyorBackend) -> None:
    belt = patient_belt
    belt.run(SPEED)
    assert emu.digital_output(DO) is True
    assert [emu.digital_output(i) for i in range(16) if i != DO] == [False] * 15
    s = belt.read()
    assert s.running and s.speed == SPEED and s.fault is None
    time.sleep(0.3)
    s2 = belt.read()
    assert s2.fault is None and s2.running, s2
    assert s2.position - s.position == pytest.approx(SPEED * (s2.stamp - s.stamp), abs=0.002)
    belt.halt()
    assert emu.digital_output(DO) is False
    s3 = belt.read()
    assert not s3.running and s3.speed == 0.0
    time.sleep(0.1)
    assert belt.read().position == pytest.approx(s3.position, abs=1e-6)  # stopped belt does not travel
    belt.run(SPEED)
    belt.emergency_stop()
    assert emu.digital_output(DO) is False and not belt.read().running
    counts = emu.state()["counts"]
    assert counts["rob1.IoControl.setStandardDigitalOutput"] >= 4
    assert counts["rob1.IoControl.getStandardDigitalOutput"] >= 4


def test_active_low(emu: ArcsEmulator) -> None:
    b = IoConveyorBackend(config(emu, active_high=False))
    try:
        assert emu.digital_output(DO) is True  # off = high
        b.run(SPEED)
        assert emu.digital_output(DO) is False and b.read().running
    finally:
        b.close()
    assert emu.digital_output(DO) is True  # closed: belt off


def test_other_speed_refused_output_untouched(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    before = emu.state()["counts"].get("rob1.IoControl.setStandardDigitalOutput", 0)
    with pytest.raises(BackendError, match=r"runs only at its nominal speed 0.05 m/s.*not 0.03 m/s"):
        belt.run(0.03)
    assert emu.digital_output(DO) is False
    assert emu.state()["counts"].get("rob1.IoControl.setStandardDigitalOutput", 0) == before
    belt.run(SPEED)
    with pytest.raises(BackendError, match="nominal speed"):
        belt.run(0.0)
    assert emu.digital_output(DO) is True and belt.read().running


def test_output_that_does_not_follow_is_refused(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    emu.stick_digital_outputs()
    with pytest.raises(BackendError, match="reports it off"):
        belt.run(SPEED)
    assert not belt.read().running


def test_output_changed_elsewhere_is_read_back(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    emu.set_digital_output(DO, True)  # e.g. from the pendant
    assert wait_for(lambda: belt.read().running)
    emu.set_digital_output(DO, False)
    assert wait_for(lambda: not belt.read().running)


def test_read_never_blocks(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    emu.slow_replies(0.05)
    t0 = time.perf_counter()
    for _ in range(100):
        belt.read()
    assert time.perf_counter() - t0 < 0.05


def test_lost_link_faults_and_reset_reconnects(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    belt.run(SPEED)
    emu.disconnect(refuse=True)
    assert wait_for(lambda: belt.read().fault is not None)
    s = belt.read()
    assert not s.running and s.speed == 0.0 and "lost" in s.fault
    p = s.position
    time.sleep(0.1)
    assert belt.read().position == pytest.approx(p, abs=1e-6)
    belt.acknowledge_fault()  # controller still refusing: the fault stays, with the reason
    assert "connect" in (belt.read().fault or "")
    with pytest.raises(BackendError):
        belt.run(SPEED)
    emu.accept_connections()
    assert emu.digital_output(DO) is True  # the controller kept the output while the link was down
    belt.acknowledge_fault()
    s = belt.read()
    assert s.fault is None and not s.running
    assert emu.digital_output(DO) is False  # reconnect switches the belt off: never restarts by itself
    belt.run(SPEED)
    assert emu.digital_output(DO) is True


def test_close_leaves_the_output_off(emu: ArcsEmulator) -> None:
    b = IoConveyorBackend(config(emu))
    b.run(SPEED)
    assert emu.digital_output(DO) is True
    b.close()
    assert emu.digital_output(DO) is False
    assert b.read().fault == "closed"
    b.close()  # idempotent
    with pytest.raises(BackendError, match="closed"):
        b.run(SPEED)


def test_driver_on_io_backend(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=SPEED, max_speed=0.2), belt)
    ok, msg = driver.start()
    assert ok, msg
    assert emu.digital_output(DO) is True and driver.read().running
    ok, msg = driver.set_speed(0.03)
    assert not ok and "nominal speed" in msg and driver.set_speed_value == SPEED
    assert emu.digital_output(DO) is True  # refused: the belt keeps running as it was
    ok, _ = driver.stop()
    assert ok and emu.digital_output(DO) is False
    ok, msg = driver.set_speed(0.03)  # stopped: accepted as set-point, refused at start
    assert ok
    ok, msg = driver.start()
    assert not ok and "nominal speed" in msg and emu.digital_output(DO) is False
    assert driver.set_speed(SPEED)[0] and driver.start()[0]
    driver.emergency_stop()
    assert emu.digital_output(DO) is False
    assert not driver.start()[0]  # latched until reset
    assert driver.reset_fault()[0] and emu.digital_output(DO) is False
    assert driver.start()[0] and emu.digital_output(DO) is True
    driver.stop()
    driver.close()
    assert emu.digital_output(DO) is False


def test_driver_refuses_start_after_disconnect_until_reset(emu: ArcsEmulator, belt: IoConveyorBackend) -> None:
    driver = ConveyorDriver(ConveyorConfig(speed=SPEED, max_speed=0.2), belt)
    assert driver.start()[0]
    emu.disconnect(refuse=True)
    assert wait_for(lambda: driver.read().fault is not None)
    ok, msg = driver.start()
    assert not ok and "fault" in msg
    ok, msg = driver.reset_fault()
    assert not ok and "still present" in msg
    emu.accept_connections()
    assert not driver.start()[0]  # link back, but the latch holds until reset
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert emu.digital_output(DO) is False  # stopped until started
    assert driver.start()[0] and emu.digital_output(DO) is True
    driver.stop()
