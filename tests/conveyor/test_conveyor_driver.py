"""ConveyorDriver over the sim backend: validated speeds, emergency stop latches until an operator resets."""

from __future__ import annotations

import pytest

from conveyor_driver.driver import ConveyorConfig, ConveyorDriver, ConveyorError
from conveyor_driver.sim_backend import SimConveyorBackend
from transports.errors import BackendError
from transports.sim_link import SimLink


@pytest.fixture()
def rig():
    link = SimLink.in_memory()
    return link, ConveyorDriver(ConveyorConfig(speed=0.03, max_speed=0.2), SimConveyorBackend(link))


@pytest.mark.parametrize("bad", [-0.01, 0.21, float("nan"), float("inf"), "fast", None])
def test_bad_speeds_are_refused_and_the_set_speed_kept(rig, bad) -> None:
    link, driver = rig
    driver.start()
    ok, msg = driver.set_speed(bad)
    assert not ok and "belt speed" in msg
    assert driver.set_speed_value == 0.03
    assert link.read_belt_command().speed == 0.03


def test_start_stop_and_speed_reach_the_belt(rig) -> None:
    link, driver = rig
    assert driver.start()[0]
    assert link.read_belt_command().run and link.read_belt_command().speed == 0.03
    assert driver.set_speed(0.05)[0]
    assert link.read_belt_command().speed == 0.05
    assert driver.stop()[0]
    assert not link.read_belt_command().run


def test_emergency_stop_latches_until_reset_then_needs_start(rig) -> None:
    link, driver = rig
    driver.start()
    ok, _ = driver.emergency_stop()
    assert ok and not link.read_belt_command().run
    ok, msg = driver.start()
    assert not ok and "emergency stop" in msg  # no restart before an operator reset
    assert not link.read_belt_command().run
    assert driver.reset_fault()[0]
    assert not link.read_belt_command().run  # the reset alone does not start the belt
    assert driver.start()[0] and link.read_belt_command().run


def test_bad_config_rejected() -> None:
    with pytest.raises(ConveyorError):
        ConveyorConfig(speed=0.5, max_speed=0.2)


def test_a_drive_refusing_the_speed_is_reported_and_nothing_changes(rig) -> None:
    link, driver = rig
    driver.start()
    backend = driver._backend

    def refuse(speed: float) -> None:
        raise BackendError("setpoint needs 3200 rpm > max_motor_rpm 3000")

    backend.run = refuse
    ok, msg = driver.set_speed(0.15)
    assert not ok and "refused" in msg and "3200 rpm" in msg
    assert driver.set_speed_value == 0.03 and link.read_belt_command().speed == 0.03
    driver.stop()
    ok, msg = driver.start()
    assert not ok and "refused" in msg
    assert not link.read_belt_command().run
