"""Arm driver branches the mutation run (bench/mutation.sh) found no test pinning down.

Each test fixes what a branch must do so that changing it fails: command answers, which
rejections hold and which must not disturb the active source, counters that count, the
configured tool offset and tolerances, the IK fallback and the limiter's last resort,
exact boundaries (a TCP on the box face is inside; the watchdog holds at exactly its
timeout; a following error at exactly the limit is not a fault). docs/mutation.md lists
the mutants left alive and why each is harmless.
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
)
from scipy.spatial.transform import Rotation

import aubo_bridge.driver as driver_module
import aubo_bridge.response.goal_delta as goal_delta_motion
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q, IkResult, fk
from libero_workcell.contract import ACTION_POS_SCALE, ACTION_ROT_SCALE, SOURCE_EXPERT, SOURCE_POLICY, SOURCE_TELEOP
from transports.errors import BackendError

P_HOME, R_HOME = fk(HOME_Q)


def make(config: ArmConfig | None = None, arm_cls: type = IdealArm, q0: np.ndarray = HOME_Q, enable: bool = True):
    clock = ManualClock()
    arm, gripper = arm_cls(clock, q0), IdealGripper(clock)
    driver = ArmDriver(config or goal_delta_config(), arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    if enable:
        ok, msg = driver.enable()
        assert ok, msg
    return driver, arm, gripper, clock


def ticks(driver: ArmDriver, clock: ManualClock, n: int) -> None:
    for _ in range(n):
        clock.t += driver.config.servo_period
        driver.tick()


# ----------------------------------------------------------------- command answers and messages
def test_commands_answer_what_they_did() -> None:
    driver, arm, _, _clock = make(enable=False)
    assert driver.home() == (False, "cannot home while disabled: enable first")
    assert driver.enable() == (True, "enabled")
    assert driver.home() == (True, "homing")
    assert driver.stop() == (True, "stopped")
    arm.fault = "protective stop"
    driver.tick()
    assert driver.enable() == (False, "in fault (protective stop): call reset_fault first")
    assert driver.home() == (False, "cannot home while fault: enable first")
    arm.fault = None
    assert driver.reset_fault() == (True, "fault cleared; arm disabled until enabled")
    res = driver.submit_action(np.zeros(7), SOURCE_POLICY)
    assert res == driver_module.ActionResult(False, "arm is disabled: not accepting actions")
    assert driver.enable()[0]
    res = driver.submit_action(np.zeros(7), SOURCE_POLICY)  # the stream seen while disabled: over
    assert res == driver_module.ActionResult(False, (
        "source 'policy': this stream (turn 0) ended with its start on an arm that was not enabled or followed "
        "another source; nothing it sends moves the arm: start the source again"))
    res = driver.submit_action(np.zeros(7), SOURCE_POLICY, turn=1)
    assert res.accepted is True and res.reason == "ok"


def test_enable_refuses_when_the_fault_shows_at_once() -> None:
    driver, arm, _, _clock = make(enable=False)
    arm.fault = "safety mode RobotEmergencyStop"
    ok, msg = driver.enable()
    assert ok is False and msg == "cannot enable: safety mode RobotEmergencyStop"
    assert driver.mode is ArmMode.FAULT


def test_outside_box_messages_name_the_axis_the_side_and_the_limit() -> None:
    cfg = goal_delta_config(workspace_min=[0.40, -0.55, 0.015], workspace_max=[0.75, 0.60, 0.25])
    driver, _, _, _ = make(cfg, enable=False)
    ok, msg = driver.enable()
    assert ok
    assert msg == (
        "enabled; TCP is outside the workspace box (x 0.350 < 0.400, z 0.300 > 0.250 m): "
        "only actions toward the box are accepted"
    )
    res = driver.submit_action(np.array([-0.1, 0, 0.1, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.reason == (
        "TCP goal is outside the workspace box (x 0.350 < 0.400, z 0.300 > 0.250 m); this action moves it "
        "further out along x, z: only actions toward the box are accepted"
    )
    assert driver.status().counters["rejected_workspace"] == 1


def test_a_tcp_on_the_box_face_is_inside() -> None:
    """Exactly on the face: pushing out is clipped to nothing (accepted), not refused as 'outside'."""
    cfg = goal_delta_config(workspace_min=[-0.35, -0.55, P_HOME[2]], workspace_max=[0.75, 0.60, 0.65])
    driver, _, _, _ = make(cfg, enable=False)
    assert driver.enable() == (True, "enabled")  # on the face is not outside
    res = driver.submit_action(np.array([0, 0, -0.3, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.accepted and res.applied[2] == 0.0
    cfg = goal_delta_config(workspace_max=[P_HOME[0], 0.60, 0.65])
    driver, _, _, _ = make(cfg, enable=False)
    assert driver.enable() == (True, "enabled")
    res = driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.accepted and res.applied[0] == 0.0


# ----------------------------------------------------------------- which rejections hold
@pytest.mark.parametrize("call", ["submit", "message"])
def test_a_foreign_source_never_disturbs_the_active_one(call: str) -> None:
    driver, arm, _, clock = make()
    assert driver.submit_action(np.array([0.4, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    ticks(driver, clock, 1)
    for source in (SOURCE_TELEOP, SOURCE_EXPERT):
        if call == "submit":
            res = driver.submit_action(np.array([-0.4, 0, 0, 0, 0, 0, 0]), source)
        else:
            res = driver.reject_message(source, "bad names")
        assert res.reason == f"source {source!r} may not drive (active: 'policy')"
    assert driver.mode is ArmMode.ENABLED  # the policy's motion goes on
    ticks(driver, clock, 5)
    assert fk(arm.q)[0][0] - P_HOME[0] == pytest.approx(0.4 * ACTION_POS_SCALE, abs=1e-5)
    assert driver.status().counters["rejected_source"] == 2


@pytest.mark.parametrize(
    "bad, kind",
    [([0.1, 0, 0, 0, 0, 0, float("nan")], "invalid"), ([2.0, 0, 0, 0, 0, 0, 0], "invalid")],
)
def test_each_rejection_is_counted_once_per_action(bad, kind) -> None:
    driver, _, _, _ = make()
    for n in (1, 2):
        res = driver.submit_action(bad, SOURCE_POLICY)
        assert res.accepted is False and res.reason.startswith("rejected action: ")
        assert driver.status().counters[f"rejected_{kind}"] == n
    driver.stop()
    driver.submit_action(np.zeros(7), SOURCE_POLICY)
    driver.submit_action(np.zeros(7), SOURCE_POLICY)
    assert driver.status().counters["rejected_mode"] == 2
    driver._arm.fault = "protective stop"
    driver.enable()
    for n in (1, 2):
        res = driver.submit_action(np.zeros(7), SOURCE_POLICY)
        assert res.reason == "arm in fault: protective stop"
        assert driver.status().counters["rejected_fault"] == n


def test_counters_count_every_event() -> None:
    driver, arm, _, clock = make()
    for n in (1, 2):
        assert driver.submit_action(np.array([0.1, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        assert driver.status().counters["accepted"] == n
        ticks(driver, clock, 10)  # the watchdog holds
        assert driver.status().counters["watchdog_holds"] == n
    for n, source in ((1, SOURCE_TELEOP), (2, SOURCE_POLICY)):
        driver.arbiter.select(source)
        assert driver.status().counters["source_switches"] == n
    for n in (1, 2):
        arm.epoch += 1
        ticks(driver, clock, 1)
        assert driver.status().counters["resyncs"] == n
    assert driver.status().counters.get("faults", 0) == 0
    arm.fault = "protective stop"
    ticks(driver, clock, 3)
    arm.fault = None
    assert driver.reset_fault()[0]
    arm.fault = "protective stop again"
    ticks(driver, clock, 1)
    assert driver.status().counters["faults"] == 2


def test_after_a_resync_actions_drive_normally() -> None:
    driver, arm, _, clock = make()
    arm.epoch = 7  # the world was reset (the arm is where it was)
    ticks(driver, clock, 1)
    assert driver.mode is ArmMode.HOLDING
    for _ in range(3):
        assert driver.submit_action(np.array([0, 0.2, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
        assert driver.mode is ArmMode.ENABLED  # not re-synced (and held) again on every tick
    ticks(driver, clock, 2)
    assert fk(arm.q)[0][1] - P_HOME[1] == pytest.approx(3 * 0.2 * ACTION_POS_SCALE, abs=1e-5)
    assert driver.status().counters["resyncs"] == 1


# ----------------------------------------------------------------- the configuration reaches every computation
def test_a_custom_tool_offset_is_used_everywhere() -> None:
    offset = np.array([0.0, 0.0, 0.25])
    cfg = goal_delta_config(tool_offset=offset)
    driver, arm, _, clock = make(cfg, enable=False)
    p0 = fk(HOME_Q, offset)[0]
    np.testing.assert_allclose(driver.status().goal_pos, p0, atol=1e-12)
    np.testing.assert_allclose(driver.status().tcp_pos, p0, atol=1e-12)
    assert driver.enable()[0]
    ticks(driver, clock, 3)  # enabled and still: the still segment must sit on the configured TCP
    np.testing.assert_array_equal(arm.q, HOME_Q)
    res = driver.submit_action(np.array([0.2, -0.1, 0.3, 0, 0, 0.1, 0]), SOURCE_POLICY)
    assert res.accepted
    run_control_period(driver, clock)
    ticks(driver, clock, 1)
    p1, R1 = fk(arm.q, offset)
    np.testing.assert_allclose(p1 - p0, np.array([0.2, -0.1, 0.3]) * ACTION_POS_SCALE, atol=1e-5)
    assert Rotation.from_matrix(R1 @ fk(HOME_Q, offset)[1].T).as_rotvec()[2] == pytest.approx(0.05, abs=1e-4)
    np.testing.assert_allclose(driver.status().tcp_pos, p1, atol=1e-12)
    # the tracking-error guard measures the same TCP: no spurious re-anchor on a long tool
    assert driver.submit_action(np.zeros(7), SOURCE_POLICY).accepted
    np.testing.assert_allclose(driver.status().goal_pos, p1, atol=1e-5)


def test_a_long_tool_on_a_lagging_arm_keeps_every_commanded_millimetre() -> None:
    """The tracking-error guard must measure the configured TCP: with the default offset it would
    see a 13 cm 'lag' on a 30 cm tool and re-anchor (dropping motion) on every action."""
    offset = np.array([0.0, 0.0, 0.30])
    driver, arm, _, clock = make(goal_delta_config(tool_offset=offset), arm_cls=LaggingArm)
    p0 = fk(arm.q, offset)[0]
    for _ in range(6):
        assert driver.submit_action(np.array([0.0, 0.3, 0.0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
    ticks(driver, clock, 300)
    np.testing.assert_allclose(fk(arm.q, offset)[0] - p0, [0, 6 * 0.3 * ACTION_POS_SCALE, 0], atol=1e-5)


def test_the_rotation_step_is_clipped_and_applied_says_so() -> None:
    cfg = goal_delta_config(max_tcp_rot_speed=1.0)  # 0.05 rad per 20 Hz step
    driver, arm, _, clock = make(cfg)
    res = driver.submit_action(np.array([0, 0, 0, 0, 0, 0.4, 0]), SOURCE_POLICY)  # asks 0.2 rad
    assert res.accepted
    assert res.applied[5] == pytest.approx(0.05 / ACTION_ROT_SCALE, abs=1e-9)
    run_control_period(driver, clock)
    ticks(driver, clock, 2)
    rot = Rotation.from_matrix(fk(arm.q)[1] @ R_HOME.T).as_rotvec()
    np.testing.assert_allclose(rot, [0, 0, 0.05], atol=1e-4)


def test_applied_rotation_is_in_action_units() -> None:
    driver, _, _, _ = make(goal_delta_config(max_tcp_rot_speed=12.0))
    res = driver.submit_action(np.array([0, 0, 0, 0.1, -0.05, 0.08, 0]), SOURCE_POLICY)
    np.testing.assert_allclose(res.applied[3:6], [0.1, -0.05, 0.08], atol=1e-9)


def test_the_stream_turns_at_exactly_the_rotation_limit_when_it_binds() -> None:
    """Bunched spins ask for more than max_tcp_rot_speed in a tick: the stream turns at the limit, not slower."""
    cfg = goal_delta_config(max_tcp_rot_speed=0.5)  # 5 mrad per servo tick
    driver, arm, _, clock = make(cfg)
    for _ in range(2):
        assert driver.submit_action(np.array([0, 0, 0, 0.04, 0.0, 0.0, 0]), SOURCE_POLICY).accepted
    R0 = fk(arm.q)[1]
    ticks(driver, clock, 1)
    turned = Rotation.from_matrix(fk(arm.q)[1] @ R0.T).magnitude()
    assert turned == pytest.approx(cfg.max_tcp_rot_speed * cfg.servo_period, rel=1e-3)


def test_a_joint_a_little_over_the_clamp_is_clamped() -> None:
    """One spin asking 1.5x the wrist's per-tick clamp (the bunched test asks far more)."""
    cfg = goal_delta_config(max_tcp_rot_speed=12.0)
    driver, arm, _, clock = make(cfg)
    clamp = cfg.max_joint_speed * cfg.servo_period
    drz = 1.5 * clamp[5] / (0.4 * ACTION_ROT_SCALE)  # the first tick after an action runs 0.4 of the step
    assert driver.submit_action(np.array([0, 0, 0, 0, 0, drz, 0]), SOURCE_POLICY).accepted
    q = arm.q.copy()
    ticks(driver, clock, 1)
    dq = np.abs(arm.q - q)
    assert np.all(dq <= clamp + 1e-12) and dq[5] == pytest.approx(clamp[5], rel=1e-9)


def test_a_joint_speed_rejection_names_the_fastest_joint() -> None:
    cfg = goal_delta_config(joint_speed_fraction=0.05, home_joint_speed=0.1, max_tcp_rot_speed=12.0)
    driver, _, _, _ = make(cfg)
    res = driver.submit_action(np.array([0, 0, 0, 0, 0, 0.2, 0]), SOURCE_POLICY)  # a spin: all wrist 3
    assert not res.accepted and res.reason.startswith("joint 6 would move at ")


def test_a_joint_step_faster_than_the_limit_is_rejected_by_name() -> None:
    cfg = goal_delta_config(joint_speed_fraction=0.05, home_joint_speed=0.1)  # 0.19 rad/s on the big joints
    driver, arm, _, clock = make(cfg)
    q0 = arm.q.copy()
    res = driver.submit_action(np.array([0.0, 0.5, 0.0, 0, 0, 0, 0]), SOURCE_POLICY)
    assert not res.accepted
    assert res.reason.startswith("joint 1 would move at ")
    assert res.reason.endswith(" rad/s (limit 0.19): step too large or near a singularity")  # the whole of it
    assert driver.status().counters["rejected_joint_speed"] == 1 and driver.mode is ArmMode.HOLDING
    run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q0)
    assert driver.submit_action(np.array([0.0, 0.02, 0.0, 0, 0, 0, 0]), SOURCE_POLICY).accepted


def test_an_unreachable_goal_is_rejected_with_the_ik_figures(monkeypatch) -> None:
    driver, arm, _, clock = make()
    q0 = arm.q.copy()

    def no_solution(pos, rotmat, q_seed, *args, **kwargs):
        return IkResult(np.asarray(q_seed), False, 0.0123, np.radians(2.5), 15)

    monkeypatch.setattr(driver_module, "ik", no_solution)
    res = driver.submit_action(np.array([0.123, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    goal = np.round(P_HOME + [0.123 * ACTION_POS_SCALE, 0, 0], 4).tolist()
    assert goal[0] == 0.3562  # four decimals of 0.35615
    assert res.reason == f"goal {goal} unreachable (IK error 12.30 mm, 2.50 deg)"
    assert driver.status().counters["rejected_ik"] == 1 and driver.mode is ArmMode.HOLDING
    ticks(driver, clock, 5)
    np.testing.assert_array_equal(arm.q, q0)


# ----------------------------------------------------------------- the stream's fallbacks
def test_a_singular_pose_on_the_way_falls_back_to_joint_interpolation(monkeypatch) -> None:
    driver, arm, _, clock = make()
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted  # under the TCP cap
    seg = driver._motion.seg
    real_ik = goal_delta_motion.ik
    monkeypatch.setattr(goal_delta_motion, "ik", lambda *a, **k: IkResult(a[2], False, 1.0, 1.0, 15))
    clock.t += driver.config.servo_period
    driver.tick()
    frac = min(1.0, (clock.t + driver.config.servo_period - seg.t0) / driver.config.control_period)
    np.testing.assert_allclose(arm.q, seg.q0 + (seg.q1 - seg.q0) * frac, atol=1e-12)
    assert driver.status().counters["ik_fallbacks"] == 1
    ticks(driver, clock, 1)
    assert driver.status().counters["ik_fallbacks"] == 2
    ticks(driver, clock, 3)
    np.testing.assert_allclose(arm.q, seg.q1, atol=1e-12)  # it still ends on the validated goal
    monkeypatch.setattr(goal_delta_motion, "ik", real_ik)
    # a still segment (enable, holds) falls back to staying put
    driver.stop()
    assert driver.enable()[0]
    q_still = arm.q.copy()
    monkeypatch.setattr(goal_delta_motion, "ik", lambda *a, **k: IkResult(a[2], False, 1.0, 1.0, 15))
    ticks(driver, clock, 2)
    np.testing.assert_array_equal(arm.q, q_still)
    assert driver.mode is ArmMode.ENABLED


def test_the_limiter_last_resort_halves_without_stalling(monkeypatch) -> None:
    """With no scaling passes at all, halving alone must keep every limit and still make progress."""
    monkeypatch.setattr(driver_module, "LIMITER_PASSES", 0)
    cfg = goal_delta_config(max_tcp_speed=0.1)
    driver, arm, _, clock = make(cfg)
    cap = cfg.max_tcp_speed * cfg.servo_period
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted  # 5 mm, capped to 1/tick
    path = [fk(arm.q)[0]]
    for _ in range(40):
        ticks(driver, clock, 1)
        path.append(fk(arm.q)[0])
    steps = np.linalg.norm(np.diff(path, axis=0), axis=1)
    assert np.all(steps <= cap * (1 + 1e-6))
    assert steps[0] > 0.4 * cap  # halved at most once per tick from the desired 2 mm
    assert driver.mode in (ArmMode.ENABLED, ArmMode.HOLDING)


def test_the_joint_clamp_binds_on_its_own() -> None:
    """A spin about the tool axis is all wrist 3: the TCP rotation limit is far, the joint clamp binds."""
    cfg = goal_delta_config(max_tcp_rot_speed=12.0)
    driver, arm, _, clock = make(cfg)
    clamp = cfg.max_joint_speed * cfg.servo_period
    for _ in range(3):  # bunched: asks far more than the clamp in one tick
        assert driver.submit_action(np.array([0, 0, 0, 0, 0, 0.1, 0]), SOURCE_POLICY).accepted
    q = arm.q.copy()
    ticks(driver, clock, 1)
    dq = np.abs(arm.q - q)
    assert np.all(dq <= clamp + 1e-12)
    assert np.max(dq / clamp) == pytest.approx(1.0, rel=1e-9)  # moving at the clamp, not slower


def test_homing_moves_the_furthest_joint_at_home_joint_speed() -> None:
    cfg = goal_delta_config(home_joint_speed=0.3, max_tcp_speed=2.0, max_tcp_rot_speed=12.0, max_tracking_error=0.2)
    q_far = HOME_Q + np.array([0.0, 0.0, 0.0, 0.0, 0.0, 0.5])  # wrist 3 only: the TCP limits are far
    driver, arm, _, clock = make(cfg, q0=q_far)
    assert driver.home()[0]
    q = arm.q.copy()
    ticks(driver, clock, 1)
    assert np.max(np.abs(arm.q - q)) == pytest.approx(0.3 * cfg.servo_period, rel=1e-9)
    for _ in range(300):
        ticks(driver, clock, 1)
        if driver.mode is ArmMode.ENABLED:
            break
    assert driver.mode is ArmMode.ENABLED and driver.status().last_action_stamp is None
    np.testing.assert_allclose(arm.q, HOME_Q, atol=1e-9)


# ----------------------------------------------------------------- exact boundaries
def test_the_watchdog_holds_at_exactly_its_timeout() -> None:
    cfg = goal_delta_config(control_hz=10.0, servo_hz=100.0, watchdog_timeout=0.125, max_tracking_error=0.1)
    driver, _, _, clock = make(cfg)
    clock.t = 100.0
    assert driver.submit_action(np.array([0.1, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    clock.t = 100.0 + 0.0625
    driver.tick()
    assert driver.mode is ArmMode.ENABLED
    clock.t = 100.125  # exactly watchdog_timeout after the action (binary-exact times)
    driver.tick()
    assert driver.mode is ArmMode.HOLDING
    assert driver.status().last_error == "no action for 0.125 s: holding"


def test_a_following_error_at_exactly_the_limit_is_not_a_fault() -> None:
    cfg = goal_delta_config(max_following_error=0.25)
    q0 = np.array([0.5, 0.375, 1.75, -0.125, 1.5, 2.0])  # binary-exact joints
    driver, arm, _, _clock = make(cfg, q0=q0)
    arm.q = q0 + np.array([0.0, 0.25, 0, 0, 0, 0])  # lag exactly 0.25 rad
    driver.tick()
    assert driver.mode is ArmMode.ENABLED
    arm.q = q0 + np.array([0.0, 0.25 + 2**-20, 0, 0, 0, 0])
    driver.tick()
    reason = f"following error: joint 2 is {0.25 + 2**-20:.3f} rad from its servo target"
    assert driver.mode is ArmMode.FAULT and driver.status().fault == reason
    assert driver.status().last_error == reason  # and it is what /diagnostics shows as the last error


def test_fault_texts_are_exact() -> None:
    driver, arm, _, _clock = make()

    def lost():
        raise BackendError("link lost")

    real_read = arm.read
    arm.read = lost
    driver.tick()
    assert driver.status().fault == "state read failed: link lost"
    arm.read = real_read
    assert driver.reset_fault()[0] and driver.enable()[0]
    arm.ready = False
    driver.tick()
    assert driver.status().fault == "arm controller left the ready state"
    assert driver.reset_fault() == (False, "fault still present: arm controller is still not ready for motion")


def test_an_unexpected_error_of_a_state_read_outside_the_servo_period_is_a_fault_in_its_words() -> None:
    """observe() (a lockstep control step reads the arm before its action is computed) never raises: whatever the
    read raised latches a fault that says what it was."""
    driver, arm, _, _clock = make()

    def garbled():
        raise RuntimeError("reply of 3 bytes")

    arm.read = garbled
    driver.observe()
    assert driver.mode is ArmMode.FAULT
    assert driver.status().fault == "state read failed: RuntimeError: reply of 3 bytes"


def test_after_a_source_switch_the_new_source_drives() -> None:
    driver, arm, _, clock = make()
    driver.arbiter.select(SOURCE_TELEOP)
    assert driver.mode is ArmMode.HOLDING
    assert driver.submit_action(np.array([0, 0, 0.2, 0, 0, 0, 0]), SOURCE_TELEOP).accepted
    assert driver.mode is ArmMode.ENABLED
    run_control_period(driver, clock)
    ticks(driver, clock, 1)
    assert fk(arm.q)[0][2] - P_HOME[2] == pytest.approx(0.2 * ACTION_POS_SCALE, abs=1e-5)


def test_a_device_fault_keeps_its_own_words_even_with_a_lagging_arm() -> None:
    driver, arm, _, _clock = make()
    arm.q = arm.q + np.array([0, 0.5, 0, 0, 0, 0])
    arm.fault = "safety mode ProtectiveStop"
    driver.tick()
    assert driver.status().fault == "safety mode ProtectiveStop"


def test_a_gripper_fault_faults_the_arm_and_blocks_the_reset() -> None:
    driver, _, gripper, _clock = make()
    gripper_read = gripper.read

    def faulty():
        m = gripper_read()
        return type(m)(m.stamp, m.coord, "alarm 3")

    gripper.read = faulty
    driver.tick()
    assert driver.status().fault == "gripper: alarm 3"
    assert driver.reset_fault() == (False, "fault still present: gripper: alarm 3")
    gripper.read = gripper_read
    assert driver.reset_fault()[0]


def test_a_gripper_refusing_a_command_faults_the_arm() -> None:
    driver, _, gripper, _ = make()

    def refuse(coord: float) -> None:
        raise BackendError("bus timeout")

    gripper.command = refuse
    res = driver.submit_action(np.array([0, 0, 0, 0, 0, 0, 1.0]), SOURCE_POLICY)
    assert res == driver_module.ActionResult(False, "gripper: bus timeout")
    assert driver.mode is ArmMode.FAULT and driver.status().counters.get("accepted", 0) == 0
    assert driver.status().fault == "gripper: bus timeout"


def test_an_unchanged_gripper_command_is_sent_once() -> None:
    driver, _, gripper, _ = make()
    for grip in (1.0, 1.0, 1.0, -1.0, -1.0, 1.0):
        assert driver.submit_action(np.array([0, 0, 0, 0, 0, 0, grip]), SOURCE_POLICY).accepted
    assert gripper.commands == [1.0, 0.0, 1.0]  # the bus sees changes, not every action


def test_a_reset_after_a_device_fault_does_not_need_ready_and_enable_does() -> None:
    driver, arm, _, _clock = make()
    arm.fault = "protective stop"
    driver.tick()
    arm.fault, arm.ready = None, False  # the stop is gone; the controller is not ready yet
    assert driver.reset_fault()[0]
    assert driver.enable() == (False, "arm controller is not ready for motion")


def test_a_not_ready_fault_once_reset_does_not_make_later_resets_need_ready() -> None:
    driver, arm, _, _ = make()
    arm.ready = False
    driver.tick()  # "left the ready state"
    arm.ready = True
    assert driver.reset_fault()[0] and driver.enable()[0]
    arm.fault = "protective stop"
    driver.tick()
    arm.fault, arm.ready = None, False  # a different fault, now gone; the controller not ready yet
    assert driver.reset_fault()[0]


def test_a_reset_with_an_unconfirmed_hold_fails_and_says_so() -> None:
    driver, arm, _, _clock = make()
    arm.hold = lambda: (_ for _ in ()).throw(RuntimeError("pipe closed"))
    arm.fault = "protective stop"
    driver.tick()
    arm.fault = None
    ok, msg = driver.reset_fault()
    assert ok is False and msg == "fault kept: the arm did not confirm a hold (hold failed: RuntimeError: pipe closed)"
    assert driver.mode is ArmMode.FAULT


def test_error_texts_keep_the_device_words_and_name_other_exceptions() -> None:
    driver, arm, _, clock = make()
    arm.refuse = True
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    ticks(driver, clock, 1)
    assert driver.status().fault == "servo command refused: queue full for too long"  # a BackendError: verbatim
    driver2, arm2, _, clock2 = make()

    def broken():
        raise OSError("socket gone")

    arm2.read = broken
    ticks(driver2, clock2, 1)
    assert driver2.status().fault == "servo tick failed: OSError: socket gone"


def test_the_last_line_of_defence_counts_and_reports(monkeypatch) -> None:
    """Even fault handling failing (here: the hold after a refused target raising) must not end the loop."""
    driver, arm, _, clock = make()

    def broken_hold() -> None:
        raise RuntimeError("hold machinery broken")

    monkeypatch.setattr(driver, "_safe_hold", broken_hold)
    arm.refuse = True
    for n in (1, 2):
        driver._mode = ArmMode.ENABLED  # each round: a refused target while streaming
        assert driver.submit_action(np.array([0.1, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        ticks(driver, clock, 1)  # must not raise
        st = driver.status()
        assert st.counters["tick_errors"] == n
        assert st.last_error == "servo tick error: RuntimeError: hold machinery broken"


def test_status_reports_the_measured_state_and_what_was_sent() -> None:
    driver, arm, _gripper, clock = make(enable=False)
    st = driver.status()  # before any tick: what was read at construction
    assert st.gripper == 0.0 and st.active_source == SOURCE_POLICY and st.hold_confirmed is True
    assert driver.enable()[0]
    t_action = clock.t
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    ticks(driver, clock, 1)
    q_measured = arm.q.copy()  # what the next tick reads, before it sends its target
    ticks(driver, clock, 1)
    st = driver.status()
    np.testing.assert_array_equal(st.q, q_measured)
    np.testing.assert_array_equal(st.servo_target, arm.q)  # the ideal arm is where it was sent
    assert st.measurement_stamp == clock.t and st.last_action_stamp == t_action
    assert st.counters == {"accepted": 1}


def _stop_lands_between_compute_and_send(earlier_holds: int) -> list[str]:
    """Calls reaching the arm when a stop lands after a tick computed its target, before it sent it."""
    driver, arm, _, clock = make()
    for _ in range(earlier_holds):  # the generation moved this often already
        driver.stop()
        assert driver.enable()[0]
    assert driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    return stop_between_compute_and_send(driver, arm, clock)


@pytest.mark.parametrize("earlier_holds", [1, 2])
def test_a_later_stop_between_computing_and_sending_also_wins(earlier_holds: int) -> None:
    """Every hold voids the targets computed before it, not only the first one."""
    assert _stop_lands_between_compute_and_send(earlier_holds) == ["hold"]


def test_a_lagging_arm_reanchors_when_it_falls_behind_by_more_than_the_tracking_error() -> None:
    cfg = goal_delta_config(max_tcp_speed=0.3, max_tracking_error=0.02)
    driver, arm, _, clock = make(cfg, arm_cls=LaggingArm)
    for _ in range(6):
        assert driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
    lag = np.linalg.norm(driver.status().goal_pos - fk(arm.q)[0])
    assert lag > 0.02
    assert driver.submit_action(np.zeros(7), SOURCE_POLICY).accepted
    st = driver.status()
    np.testing.assert_allclose(st.goal_pos, st.tcp_pos, atol=1e-9)  # re-anchored on the measured TCP


def test_close_reaches_every_device_even_when_one_fails_and_says_which() -> None:
    driver, arm, gripper, _ = make()
    closed: list[str] = []

    def arm_close() -> None:
        raise BackendError("link lost")

    arm.close = arm_close
    gripper.close = lambda: closed.append("gripper")
    driver.close()
    assert closed == ["gripper"]
    assert driver.status().last_error == "close failed: link lost"
    assert driver.mode is ArmMode.DISABLED and arm.holds >= 1
