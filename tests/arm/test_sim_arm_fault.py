"""A fault injected in the simulated controller (sim_world's ``arm_fault``): the link carries its reason, the arm's
sim backend reports it as a real controller's protective stop, and the driver latches FAULT, refuses actions and
resets only once the fault is cleared. In one process, on the in-memory link (the graph: test_ros_graph.py)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from aubo_bridge.backends.sim import PROTECTIVE_STOP, SimArmBackend
from aubo_bridge.driver import ArmMode
from aubo_bridge.model.kinematics import HOME_Q
from libero_workcell.contract import SOURCE_POLICY
from libero_workcell.task import TaskSpec
from sim_cell.episode import make_sim_rig
from transports.sim_link import SimLink, WorldState

REASON = "protective stop: collision at the tray"


def write(link: SimLink, arm_fault: str = "", age: float = 0.0) -> None:
    link.write_state(WorldState(1.0, time.time() - age, 1, HOME_Q.copy(), np.zeros(6), np.zeros(3),
                                np.array([0.0, 0.0, 0.0, 1.0]), 0.0, 0.0, 0.0, False, arm_fault))  # fmt: skip


@pytest.mark.parametrize("stale_after", [0.5, None])  # on the wall clock; in lockstep (the world is the clock)
def test_the_backend_reports_the_controllers_protective_stop_while_it_is_set(stale_after) -> None:
    link = SimLink.in_memory()
    backend = SimArmBackend(link, stale_after=stale_after)
    write(link)
    m = backend.read()
    assert m.ready and m.fault is None
    write(link, REASON)
    m = backend.read()
    assert not m.ready and m.fault == f"{PROTECTIVE_STOP}: {REASON}"
    np.testing.assert_array_equal(m.q, HOME_Q)  # the joints are still measured
    backend.acknowledge_fault()  # an operator reset does not clear it: only the world does
    assert backend.read().fault == f"{PROTECTIVE_STOP}: {REASON}"
    write(link)
    m = backend.read()
    assert m.ready and m.fault is None


def test_a_stalled_world_is_reported_before_its_last_protective_stop() -> None:
    link = SimLink.in_memory()
    write(link, REASON, age=2.0)
    m = SimArmBackend(link, stale_after=0.5).read()
    assert not m.ready and "stopped or stalled" in m.fault


def test_the_driver_faults_holds_refuses_actions_and_resets_only_once_the_fault_is_cleared() -> None:
    rig = make_sim_rig(TaskSpec.from_seed(0), active_source=SOURCE_POLICY)
    try:
        rig.act(np.array([0.3, 0, 0, 0, 0, 0, -1.0]), SOURCE_POLICY, "moving")  # in motion when the stop comes
        rig.world.arm_fault = REASON  # out with the world's next state; the driver reads it at its next tick
        rig.servo_tick()
        rig.servo_tick()
        status = rig.driver.status()
        assert status.mode is ArmMode.FAULT and status.fault == f"{PROTECTIVE_STOP}: {REASON}"
        for _ in range(30):  # the controller stopped the arm: it stays where it stopped
            rig.servo_tick()
        stopped = rig.world.arm_q
        rig.link.write_arm_command(stopped + 0.2)  # a servo target the stopped controller refuses
        for _ in range(20):
            rig.servo_tick()
        np.testing.assert_allclose(rig.world.arm_q, stopped, atol=1e-3)
        refused = rig.driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, -1.0]), SOURCE_POLICY)
        assert not refused.accepted and REASON in refused.reason
        ok, msg = rig.driver.enable()
        assert not ok and REASON in msg
        ok, msg = rig.driver.reset_fault()
        assert not ok and "fault still present" in msg and REASON in msg
        assert rig.driver.mode is ArmMode.FAULT

        rig.world.arm_fault = ""
        rig.servo_tick()
        rig.servo_tick()
        assert rig.driver.mode is ArmMode.FAULT  # latched: cleared only by the operator's reset
        ok, msg = rig.driver.reset_fault()
        assert ok, msg
        assert rig.driver.mode is ArmMode.DISABLED and rig.driver.status().fault is None
        ok, msg = rig.driver.enable()
        assert ok, msg
        before = rig.world.tcp_pos
        for _ in range(5):  # the stream that ran into the stop never drives again ...
            ended = rig.driver.submit_action(np.array([0.0, 0.3, 0, 0, 0, 0, -1.0]), SOURCE_POLICY)
            assert not ended.accepted and "start the source again" in ended.reason
            rig.control_period(rig.servo_per_control)
        np.testing.assert_allclose(rig.world.tcp_pos, before, atol=1e-4)
        for _ in range(5):  # ... a source started again (a new turn) does
            rig.act(np.array([0.0, 0.3, 0, 0, 0, 0, -1.0]), SOURCE_POLICY, "after the reset", turn=1)
        assert rig.world.tcp_pos[1] - before[1] > 0.005
    finally:
        rig.world.close()


def test_the_reported_fault_finds_its_code_and_the_operators_command_names_the_worlds_parameter() -> None:
    from libero_workcell.faults import classify
    from sim_cell.world_node import PARAMETERS
    from workcell.operator_cli import ARM_FAULT_PARAM

    link = SimLink.in_memory()
    write(link, "collision detected at the tray")  # a reason that names another fault: the rehearsal's code wins
    assert classify(SimArmBackend(link).read().fault).code == "ARM-SIM-STOP"
    assert PARAMETERS[ARM_FAULT_PARAM] == ""  # `workcell call sim fault` sets sim_world's own parameter
