"""The aubo_bridge node on its REAL backends, against protocol emulators, on real rclpy.

The same executable and graph entry as on the robot PC (``use_sim:=false``):
the AUBO ARCS backend talks to the ARCS emulator through pyaubo_sdk on
loopback, the CTAG2F90D backend to a pymodbus gripper emulator over a pty
pair. It must pass what the sim graph passes (an action moves the TCP by
the commanded amount) and stop safely on a protective stop.

Each device answers on its own hardware, whatever load this machine is under: the emulators' threads run at
real-time priority where allowed, as in test_physical_workflow.py (beside a CPU hog, Modbus emulators at normal
priority in this process once missed three 0.5 s reply deadlines in a row at start-up).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import ros_probe, wait_for
from emulated_cell import bus_overrides
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator, DeltaVfdEmulator
from emulators.serial_link import FaultyLink
from real_graph_probe import Probe, settle

from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import ACTION_POS_SCALE, Services
from libero_workcell.rate import CONTROL_PRIORITY
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]

RT = CONTROL_PRIORITY + 1  # the devices' emulators: above the graph's control threads (serial_link.device_priority)


@pytest.fixture(scope="module")
def devices() -> Iterator[tuple[ArcsEmulator, CtagEmulator, str]]:
    link = FaultyLink(RT)
    gripper = CtagEmulator(link.device_port, realtime=RT)
    arm = ArcsEmulator(q0=[float(v) for v in HOME_Q], realtime=RT).start()
    try:
        yield arm, gripper, link.client_port
    finally:
        arm.stop()
        gripper.close()
        link.close()


@pytest.fixture(scope="module")
def belt() -> Iterator[tuple[DeltaVfdEmulator, str]]:
    """The conveyor's drive (a Delta VFD on RS-485), for the cell interlock."""
    link = FaultyLink(RT)
    vfd = DeltaVfdEmulator(link.device_port, realtime=RT)
    try:
        yield vfd, link.client_port
    finally:
        vfd.close()
        link.close()


@pytest.fixture(scope="module")
def node(devices, belt, tmp_path_factory) -> Iterator[Any]:
    arm, _, gripper_port = devices
    specs = [
        s
        for s in Graph.load().resolve(
            [
                "use_sim:=false",
                "aubo_bridge.active_source:=policy",
                "action_response:=goal_delta",  # exact displacements (see test_ros_graph.py)
                "aubo_bridge.arcs.ip:=127.0.0.1",
                f"aubo_bridge.arcs.rpc_port:={arm.port}",
                f"aubo_bridge.gripper.port:={gripper_port}",
                f"conveyor_driver.modbus.port:={belt[1]}",
                *bus_overrides(),  # the emulators answer from this process's threads (tests/fixtures/emulated_cell.py)
            ]
        )
        if s.name in ("aubo_bridge", "conveyor_driver")
    ]
    running = launch(specs, env=dict(os.environ), log_dir=tmp_path_factory.mktemp("test_real_graph"))
    try:
        yield running
    finally:
        codes = running.stop(timeout=10)
        assert codes == {"aubo_bridge": 0, "conveyor_driver": 0}, codes




@pytest.fixture(scope="module")
def probe(node) -> Iterator[Probe]:
    with ros_probe("real_probe") as ros_node:
        p = Probe(ros_node)
        came_up = wait_for(lambda: p.state is not None and p.diag_seq > 0, 60)
        node.check()
        assert came_up, "aubo_bridge on the real backends did not come up"
        yield p




def test_real_profile_starts_disabled_and_reports_the_controller_state(probe, devices) -> None:
    arm, _, _ = devices
    assert probe.fresh_diag()["mode"] == "disabled"  # on hardware nothing moves by itself
    np.testing.assert_allclose(probe.state[:3], fk(arm.q())[0], atol=1e-4)


def test_action_moves_the_emulated_tcp_by_the_commanded_amount(probe, devices) -> None:
    arm, _, _ = devices
    ok, msg = probe.call(Services.ARM_ENABLE)
    assert ok, msg
    p0 = fk(settle(arm))[0]
    probe.stream([0.2, 0.0, -0.1, 0, 0, 0, -1.0], 10)
    p1 = fk(settle(arm))[0]
    np.testing.assert_allclose(p1 - p0, np.array([0.2, 0.0, -0.1]) * ACTION_POS_SCALE * 10, atol=2e-3)
    assert wait_for(lambda: np.linalg.norm(probe.state[:3] - p1) < 1e-3, 2.0)  # the state reports it


def test_protective_stop_faults_and_never_resumes_by_itself(probe, devices) -> None:
    arm, _, _ = devices
    probe.call(Services.ARM_ENABLE)
    running = probe.stream([0.0, 0.0, 0.0, 0, 0, 0, 0], 2)  # a source driving when the stop comes
    arm.protective_stop()
    assert wait_for(lambda: probe.fresh_diag()["mode"] == "fault", 5.0), probe.diag
    q_stopped = settle(arm)
    probe.stream([0.0, 0.2, 0.0, 0, 0, 0, 0], 10, turn=running)  # refused: the arm stays
    np.testing.assert_allclose(settle(arm), q_stopped, atol=1e-6)
    ok, msg = probe.call(Services.ARM_RESET_FAULT)
    assert not ok, msg  # the cause is still there
    arm.clear_cause()
    ok, msg = probe.call(Services.ARM_RESET_FAULT)
    assert ok, msg
    assert probe.fresh_diag()["mode"] == "disabled"  # acknowledged, but it does not move until enabled
    probe.stream([0.0, 0.2, 0.0, 0, 0, 0, 0], 5)
    np.testing.assert_allclose(settle(arm), q_stopped, atol=1e-6)
    ok, msg = probe.call(Services.ARM_ENABLE)
    assert ok, msg
    probe.stream([0.0, 0.2, 0.0, 0, 0, 0, 0], 10, turn=running)  # the stream the stop ended stays ended
    np.testing.assert_allclose(settle(arm), q_stopped, atol=1e-6)
    probe.stream([0.0, 0.2, 0.0, 0, 0, 0, 0], 5)  # a source started again drives
    assert fk(settle(arm))[0][1] - fk(q_stopped)[0][1] == pytest.approx(5 * 0.2 * ACTION_POS_SCALE, abs=2e-3)


def test_an_arm_fault_stops_the_belt_which_starts_again_only_when_told(probe, devices, belt) -> None:
    """The cell interlock (conveyor_driver stop_on_arm_fault, on by default): an e-stop or protective stop of
    the arm stops the belt; resetting the arm does not restart it."""
    arm, _, _ = devices
    vfd, _ = belt
    ok, msg = probe.call(Services.CONVEYOR_START)
    assert ok and wait_for(lambda: vfd.running and vfd.output_hz > 1.0, 5.0), msg
    arm.protective_stop()
    assert wait_for(lambda: not vfd.running, 5.0)  # the drive was told to stop, not just the arm
    arm.clear_cause()
    assert wait_for(lambda: probe.call(Services.ARM_RESET_FAULT)[0], 10.0, interval=0.5)
    assert probe.fresh_diag()["mode"] == "disabled"
    time.sleep(1.0)
    assert not vfd.running  # an acknowledged arm fault does not restart the belt
    ok, msg = probe.call(Services.CONVEYOR_START)
    assert ok and wait_for(lambda: vfd.running, 5.0), msg
    assert probe.call(Services.CONVEYOR_STOP)[0]
