"""ArmDriver safety logic: scaling, clamping, validation, arbiter, watchdog, faults.

The arm here is an ideal servo (the measured joints equal the last target)
and the clock is manual, so every figure (watchdog time, motion per step)
is exact. The same driver runs against the MuJoCo world in
test_sim_episode.py and through ROS in test_ros_graph.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from arm_rig import (
    IdealArm,
    IdealGripper,
    LaggingArm,
    ManualClock,
    goal_delta_config,
    run_control_period,
    stop_between_compute_and_send,
    tcp,
)
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig, ConfigError
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import ACTION_POS_SCALE, ACTION_ROT_SCALE, SOURCE_POLICY, SOURCE_TELEOP


@pytest.fixture()
def rig():
    clock = ManualClock()
    arm, gripper = IdealArm(clock), IdealGripper(clock)
    cfg = goal_delta_config(max_tcp_speed=1.0, max_tcp_rot_speed=12.0)  # scaling tests: limits out of the way
    driver = ArmDriver(cfg, arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    ok, msg = driver.enable()
    assert ok, msg
    return driver, arm, gripper, clock


def test_action_moves_tcp_by_scaled_amount(rig) -> None:
    driver, arm, _, clock = rig
    p0, R0 = tcp(arm)
    a = np.array([0.2, -0.1, 0.3, 0.0, 0.0, 0.0, -1.0])
    res = driver.submit_action(a, SOURCE_POLICY)
    assert res.accepted, res.reason
    run_control_period(driver, clock)
    p1, R1 = tcp(arm)
    np.testing.assert_allclose(p1 - p0, a[:3] * ACTION_POS_SCALE, atol=1e-5)
    np.testing.assert_allclose(R1, R0, atol=1e-5)
    np.testing.assert_allclose(res.applied, a, atol=1e-9)


def test_rotation_action_is_axis_angle_in_base_frame(rig) -> None:
    driver, arm, _, clock = rig
    p0, R0 = tcp(arm)
    a = np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.15, 0.0])  # yaw about base z
    assert driver.submit_action(a, SOURCE_POLICY).accepted
    run_control_period(driver, clock)
    p1, R1 = tcp(arm)
    rotvec = Rotation.from_matrix(R1 @ R0.T).as_rotvec()
    np.testing.assert_allclose(rotvec, [0, 0, 0.15 * ACTION_ROT_SCALE], atol=1e-5)
    np.testing.assert_allclose(p1, p0, atol=1e-5)


def test_servo_targets_interpolate_over_the_control_period(rig) -> None:
    driver, arm, _, clock = rig
    q0 = arm.q.copy()
    driver.submit_action(np.array([0.4, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    targets = []
    for _ in range(5):  # the servo thread's ticks, the first right after the action
        driver.tick()
        targets.append(arm.q.copy())
        clock.t += driver.config.servo_period
    steps = np.linalg.norm(np.diff([q0, *targets], axis=0), axis=1)
    assert np.all(steps > 0)
    np.testing.assert_allclose(steps, steps.mean(), rtol=0.05)  # evenly spread, not one jump


def test_gripper_command_maps_to_coordinate(rig) -> None:
    driver, _, gripper, _ = rig
    driver.submit_action(np.array([0, 0, 0, 0, 0, 0, 1.0]), SOURCE_POLICY)
    driver.submit_action(np.array([0, 0, 0, 0, 0, 0, -1.0]), SOURCE_POLICY)
    driver.submit_action(np.array([0, 0, 0, 0, 0, 0, 0.0]), SOURCE_POLICY)
    assert gripper.commands == [1.0, 0.0, 0.5]


@pytest.mark.parametrize(
    "bad, match",
    [
        ([0.1, 0, 0, 0, 0, 0, float("nan")], "non-finite"),
        ([0.1, 0, float("inf"), 0, 0, 0, 0], "non-finite"),
        ([0.1, 0, 0, 0, 0, 0], "shape"),
        ([0.1, 0, 0, 0, 0, 0, 0, 0], "shape"),
        ([1.5, 0, 0, 0, 0, 0, 0], "out of range"),
        ([0, 0, 0, 0, 0, 0, -1.01], "out of range"),
        ("forward", "not numeric"),
        (None, "shape"),
    ],
)
def test_bad_actions_rejected_and_arm_holds(rig, bad, match) -> None:
    driver, arm, _, clock = rig
    driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    clock.t += driver.config.servo_period
    driver.tick()  # mid-motion
    q_mid = arm.q.copy()
    res = driver.submit_action(bad, SOURCE_POLICY)
    assert not res.accepted
    assert match in res.reason
    assert driver.mode is ArmMode.HOLDING
    run_control_period(driver, clock)
    np.testing.assert_allclose(arm.q, q_mid, atol=1e-12)  # the arm did not move on


def test_translation_clipped_to_tcp_speed_limit() -> None:
    clock = ManualClock()
    arm, gripper = IdealArm(clock), IdealGripper(clock)
    cfg = goal_delta_config(max_tcp_speed=0.2)  # 0.01 m per 20 Hz step
    driver = ArmDriver(cfg, arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    driver.enable()
    p0, _ = fk(arm.q)
    res = driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.accepted
    run_control_period(driver, clock)
    # The first tick came a servo period after the action, so the stream, itself held to
    # max_tcp_speed per tick, finishes the step one tick later.
    clock.t += driver.config.servo_period
    driver.tick()
    p1, _ = fk(arm.q)
    assert p1[0] - p0[0] == pytest.approx(0.01, abs=1e-6)
    assert res.applied[0] == pytest.approx(0.01 / ACTION_POS_SCALE)  # the applied action says so


def test_goal_clamped_to_workspace_box() -> None:
    clock = ManualClock()
    arm, gripper = IdealArm(clock), IdealGripper(clock)
    p_home, _ = fk(HOME_Q)
    cfg = goal_delta_config(workspace_max=[0.8, 0.6, p_home[2] + 0.02], max_tcp_speed=1.0)
    driver = ArmDriver(cfg, arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    driver.enable()
    for _ in range(5):
        driver.submit_action(np.array([0, 0, 1.0, 0, 0, 0, 0]), SOURCE_POLICY)
        run_control_period(driver, clock)
    p, _ = fk(arm.q)
    assert p[2] == pytest.approx(p_home[2] + 0.02, abs=1e-6)


def test_unreachable_goal_rejected_by_ik() -> None:
    clock = ManualClock()
    arm, gripper = IdealArm(clock), IdealGripper(clock)
    cfg = goal_delta_config(workspace_min=[-1.5, -1.5, -1.0], workspace_max=[1.5, 1.5, 1.5], max_tcp_speed=1.0)
    driver = ArmDriver(cfg, arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    driver.enable()
    rejected = None
    for _ in range(40):
        res = driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
        if not res.accepted:
            rejected = res
            break
        run_control_period(driver, clock)
    assert rejected is not None
    assert "unreachable" in rejected.reason or "joint" in rejected.reason
    assert np.all(np.abs(arm.q) <= 2 * np.pi)


def test_watchdog_holds_within_two_control_periods(rig) -> None:
    driver, arm, _, clock = rig
    driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    t_action = clock.t
    while driver.mode is ArmMode.ENABLED:
        clock.t += driver.config.servo_period
        driver.tick()
        assert clock.t - t_action < 1.0
    held_after = clock.t - t_action
    assert driver.mode is ArmMode.HOLDING
    assert held_after <= 2 * driver.config.control_period
    q_held = arm.q.copy()
    for _ in range(50):
        clock.t += driver.config.servo_period
        driver.tick()
    np.testing.assert_allclose(arm.q, q_held)
    assert driver.status().counters["watchdog_holds"] == 1
    # a fresh action resumes from where the arm is
    assert driver.submit_action(np.array([0, 0.2, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    assert driver.mode is ArmMode.ENABLED


def test_only_the_active_source_drives(rig) -> None:
    driver, arm, _, clock = rig
    q0 = arm.q.copy()
    res = driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_TELEOP)
    assert not res.accepted and "may not drive" in res.reason
    run_control_period(driver, clock)
    np.testing.assert_allclose(arm.q, q0)
    driver.arbiter.select(SOURCE_TELEOP)
    assert not driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    # teleop's stream from before the switch stays refused; teleop started again (a new turn) drives
    assert not driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_TELEOP).accepted
    assert driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_TELEOP, turn=1).accepted
    with pytest.raises(ValueError, match="unknown action source"):
        driver.arbiter.select("joystick")


def test_disabled_arm_ignores_actions_and_stop_holds(rig) -> None:
    driver, arm, _, clock = rig
    driver.stop()
    q0 = arm.q.copy()
    res = driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    assert not res.accepted and "disabled" in res.reason
    run_control_period(driver, clock)
    np.testing.assert_allclose(arm.q, q0)
    assert arm.holds >= 1


def test_backend_fault_latches_until_operator_reset(rig) -> None:
    driver, arm, _, clock = rig
    arm.fault = "protective stop"
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.mode is ArmMode.FAULT
    arm.fault = None  # the cause went away ...
    run_control_period(driver, clock)
    assert driver.mode is ArmMode.FAULT  # ... but the driver never resumes by itself
    assert not driver.submit_action(np.zeros(7), SOURCE_POLICY).accepted
    assert not driver.enable()[0]
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert arm.acknowledged == 1  # the operator's reset reached the device
    assert driver.mode is ArmMode.DISABLED  # needs an explicit enable
    assert driver.enable()[0]
    assert not driver.submit_action(np.zeros(7), SOURCE_POLICY).accepted  # the stream the fault ended ...
    assert driver.submit_action(np.zeros(7), SOURCE_POLICY, turn=1).accepted  # ... a source started again drives


def test_reset_refused_while_fault_persists(rig) -> None:
    driver, arm, _, _clock = rig
    arm.fault = "emergency stop"
    driver.tick()
    ok, msg = driver.reset_fault()
    assert not ok and "emergency stop" in msg


def test_refused_servo_command_faults(rig) -> None:
    driver, arm, _, clock = rig
    arm.refuse = True
    driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.mode is ArmMode.FAULT
    assert "refused" in driver.status().fault


def test_home_moves_to_home_configuration(rig) -> None:
    driver, arm, _, clock = rig
    for _ in range(10):
        assert driver.submit_action(np.array([0.5, 0.5, -0.5, 0.1, 0, 0, 0]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
    assert np.abs(arm.q - HOME_Q).max() > 0.05
    ok, _ = driver.home()
    assert ok
    for _ in range(2000):
        clock.t += driver.config.servo_period
        driver.tick()
        step = np.abs(arm.q - HOME_Q)
        if driver.mode is ArmMode.ENABLED:
            break
    np.testing.assert_allclose(arm.q, HOME_Q, atol=1e-9)
    assert step.max() < 1e-9


def test_state7_is_tcp_axis_angle_and_gripper(rig) -> None:
    driver, arm, gripper, _ = rig
    gripper.coord = 0.25
    driver.tick()
    s = driver.status().state7
    p, R = fk(arm.q)
    np.testing.assert_allclose(s[:3], p)
    np.testing.assert_allclose(Rotation.from_rotvec(s[3:6]).as_matrix(), R, atol=1e-12)
    assert s[6] == 0.25


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"control_hz": 0}, "control_hz"),
        ({"servo_hz": 10.0}, "servo_hz"),
        ({"watchdog_timeout": float("nan")}, "watchdog_timeout"),
        ({"workspace_min": [0, 0]}, "workspace_min"),
        ({"workspace_min": [1, 0, 0], "workspace_max": [0.5, 1, 1]}, "below"),
        ({"home_q": [10, 0, 0, 0, 0, 0]}, "joint limits"),
    ],
)
def test_bad_config_is_rejected_clearly(kwargs, match) -> None:
    with pytest.raises(ConfigError, match=match):
        ArmConfig(**kwargs)


def test_unknown_config_key_is_an_error() -> None:
    with pytest.raises(ConfigError, match="unknown arm config keys"):
        ArmConfig.from_mapping({"max_tcp_sped": 0.3})


def test_unexpected_backend_exception_faults_instead_of_killing_the_servo_loop(rig) -> None:
    driver, arm, _, clock = rig

    def broken_read():
        raise OSError("shared memory vanished")

    arm.read = broken_read
    clock.t += driver.config.servo_period
    driver.tick()  # must not raise
    assert driver.mode is ArmMode.FAULT
    assert "shared memory vanished" in driver.status().fault


def test_arm_moved_outside_the_stream_reanchors_and_holds(rig) -> None:
    """A sim reset puts the arm back home: the driver must not drag it back to its old goal."""
    driver, arm, _, clock = rig
    for _ in range(3):
        driver.submit_action(np.array([0.4, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
        run_control_period(driver, clock)
    arm.q = HOME_Q.copy()  # teleported, as a world reset does
    arm.epoch = 1
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.mode is ArmMode.HOLDING
    np.testing.assert_allclose(arm.q, HOME_Q)  # the target sent is where the arm now is
    np.testing.assert_allclose(driver.status().goal_pos, fk(HOME_Q)[0])


def test_after_the_arm_was_moved_the_stream_restarts_from_where_it_is(rig) -> None:
    """A sim reset seen by an observation (lockstep observes each control step before its action) and an action at
    once: the first target is limited from the measured pose, never from the last target sent before the move
    (which would drag the first step toward the old pose). The same targets as a driver that starts there."""
    driver, arm, _, clock = rig
    for _ in range(3):
        driver.submit_action(np.array([0.4, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
        run_control_period(driver, clock)
    arm.q, arm.epoch = HOME_Q.copy(), 1  # teleported, as a world reset does
    driver.observe()
    assert driver.mode is ArmMode.HOLDING
    action = np.array([0.0, 0.3, 0.0, 0, 0, 0, 0])
    assert driver.submit_action(action, SOURCE_POLICY).accepted
    run_control_period(driver, clock)
    fresh_clock = ManualClock()
    fresh_arm = IdealArm(fresh_clock)
    fresh = ArmDriver(driver.config, fresh_arm, IdealGripper(fresh_clock), clock=fresh_clock,
                      active_source=SOURCE_POLICY)  # fmt: skip
    assert fresh.enable()[0] and fresh.submit_action(action, SOURCE_POLICY).accepted
    run_control_period(fresh, fresh_clock)
    np.testing.assert_allclose(arm.q, fresh_arm.q, atol=1e-12)


def test_following_error_faults(rig) -> None:
    driver, arm, _, clock = rig
    arm.q = arm.q + np.array([0, 0.5, 0, 0, 0, 0])  # pushed away, no epoch change: a collision
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.mode is ArmMode.FAULT
    assert "following error: joint 2" in driver.status().fault


def test_bunched_actions_never_exceed_joint_speed_in_the_servo_stream(rig) -> None:
    """Actions arriving in bursts (network jitter) are accepted, and servo targets stay within joint limits."""
    driver, arm, _, clock = rig
    limit = driver.config.max_joint_speed * driver.config.servo_period
    previous = arm.q.copy()
    for _ in range(10):
        for _ in range(3):  # three actions in one servo period
            assert driver.submit_action(np.array([0.45, 0.0, 0.0, 0, 0, 0.1, 0]), SOURCE_POLICY).accepted
        for _ in range(3):
            clock.t += driver.config.servo_period
            driver.tick()
            assert np.all(np.abs(arm.q - previous) <= limit + 1e-12)
            previous = arm.q.copy()


def test_resuming_after_a_hold_keeps_every_commanded_millimetre() -> None:
    """A stalled stream, then more actions: the arm ends where the accepted actions add up to."""
    clock = ManualClock()
    arm, gripper = LaggingArm(clock), IdealGripper(clock)
    driver = ArmDriver(goal_delta_config(), arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    driver.enable()
    p0, _ = fk(arm.q)
    for burst in range(3):
        for _ in range(4):
            assert driver.submit_action(np.array([0.0, 0.2, 0.0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
            run_control_period(driver, clock)
        while driver.mode is ArmMode.ENABLED:  # the stream stalls: the watchdog holds ...
            clock.t += driver.config.servo_period
            driver.tick()
        assert driver.mode is ArmMode.HOLDING, burst  # ... and the next burst resumes at once, arm still lagging
    for _ in range(300):  # let the lagging arm arrive
        clock.t += driver.config.servo_period
        driver.tick()
    p1, _ = fk(arm.q)
    np.testing.assert_allclose(p1 - p0, [0.0, 12 * 0.2 * ACTION_POS_SCALE, 0.0], atol=1e-5)


def test_device_refusing_the_reset_keeps_the_fault(rig) -> None:
    driver, arm, _, _clock = rig
    arm.fault = "protective stop"
    driver.tick()
    arm.fault = None
    arm.refuse_reset = True
    ok, msg = driver.reset_fault()
    assert not ok and "pendant" in msg
    assert driver.mode is ArmMode.FAULT


def test_a_stop_between_computing_and_sending_a_target_wins(rig) -> None:
    """The servo tick sends without the state lock; a hold that lands in between voids its target."""
    driver, arm, _, clock = rig
    assert driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    calls = stop_between_compute_and_send(driver, arm, clock)
    assert calls == ["hold"]  # the stale target never went out after the hold
