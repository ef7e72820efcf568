"""The arm driver's safety review (issue 7): one test per defect found, each failing before its fix.

Workspace box and speed limits from any start pose, homing under the joint clamp,
config ranges, fault reset on a fresh measurement only, a servo loop that cannot
die, re-anchoring on a source switch, malformed messages. Manual clock and an ideal
(or lagging) arm, as in test_arm_driver.py, so every figure is exact.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from arm_rig import IdealArm, IdealGripper, LaggingArm, ManualClock, goal_delta_config, run_control_period
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig, ConfigError
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import ACTION_POS_SCALE, SOURCE_POLICY, SOURCE_TELEOP
from libero_workcell.rate import run_loop
from transports.errors import BackendError

P_HOME, _ = fk(HOME_Q)


def make(config: ArmConfig | None = None, arm_cls: type = IdealArm, q0: np.ndarray = HOME_Q):
    clock = ManualClock()
    arm, gripper = arm_cls(clock, q0), IdealGripper(clock)
    driver = ArmDriver(config or goal_delta_config(), arm, gripper, clock=clock, active_source=SOURCE_POLICY)
    return driver, arm, gripper, clock


def tick_and_record(driver: ArmDriver, arm: IdealArm, clock: ManualClock, n: int) -> np.ndarray:
    """Tick n servo periods; return the TCP positions after each (n + 1, 3), the first before."""
    out = [fk(arm.q)[0]]
    for _ in range(n):
        clock.t += driver.config.servo_period
        driver.tick()
        out.append(fk(arm.q)[0])
    return np.array(out)


def box_above_home(margin: float) -> ArmConfig:
    """A workspace box whose top is ``margin`` below the home TCP: the arm starts outside it."""
    return goal_delta_config(workspace_max=[0.75, 0.60, P_HOME[2] - margin])


# ------------------------------------------------------------- 1. workspace box and speed
@pytest.mark.parametrize("margin", [0.04, 0.06, 0.20])
def test_zero_action_outside_the_box_holds_exactly(margin: float) -> None:
    driver, arm, _, clock = make(box_above_home(margin))
    ok, msg = driver.enable()
    assert ok, msg
    assert "outside the workspace box" in msg  # the operator is told
    q0 = arm.q.copy()
    for _ in range(5):
        res = driver.submit_action(np.zeros(7), SOURCE_POLICY)
        assert res.accepted, res.reason
        np.testing.assert_array_equal(res.applied, np.zeros(7))
        run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q0)


@pytest.mark.parametrize("margin", [0.04, 0.06, 0.20])
def test_outside_the_box_toward_it_is_accepted_and_speed_limited(margin: float) -> None:
    cfg = box_above_home(margin)
    driver, arm, _, clock = make(cfg)
    assert driver.enable()[0]
    max_step = cfg.max_tcp_speed * cfg.servo_period
    applied_dz = 0.0
    for _ in range(12):
        res = driver.submit_action(np.array([0, 0, -1.0, 0, 0, 0, 0]), SOURCE_POLICY)
        assert res.accepted, res.reason
        assert res.applied[2] >= -cfg.max_tcp_speed * cfg.control_period / ACTION_POS_SCALE - 1e-12
        applied_dz += res.applied[2] * ACTION_POS_SCALE
        path = tick_and_record(driver, arm, clock, round(cfg.servo_hz / cfg.control_hz))
        assert np.all(np.linalg.norm(np.diff(path, axis=0), axis=1) <= max_step * (1 + 1e-6))
    path = tick_and_record(driver, arm, clock, 5)  # the stream settles on the last goal
    # applied is what was executed: the TCP moved down by the sum of the applied steps
    assert path[-1][2] - P_HOME[2] == pytest.approx(applied_dz, abs=1e-5)
    assert path[-1][2] < P_HOME[2] - margin  # it came back into the box


def test_outside_the_box_moving_further_out_is_refused_with_a_reason() -> None:
    driver, arm, _, clock = make(box_above_home(0.06))
    assert driver.enable()[0]
    q0 = arm.q.copy()
    res = driver.submit_action(np.array([0, 0, 0.3, 0, 0, 0, 0]), SOURCE_POLICY)
    assert not res.accepted
    assert "outside the workspace box" in res.reason and "z" in res.reason
    run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q0)
    # sideways along an axis that is inside its bounds is fine (distance to the box unchanged)
    res = driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.accepted, res.reason


def test_applied_reports_the_box_clamp_inside_the_box() -> None:
    """Inside the box a push against a wall is clipped, and applied says how much really happened."""
    cfg = goal_delta_config(workspace_max=[0.75, 0.60, P_HOME[2] + 0.01])
    driver, arm, _, clock = make(cfg)
    assert driver.enable()[0]
    res = driver.submit_action(np.array([0, 0, 0.6, 0, 0, 0, 0]), SOURCE_POLICY)
    assert res.accepted
    assert res.applied[2] == pytest.approx(0.01 / ACTION_POS_SCALE, abs=1e-9)
    run_control_period(driver, clock)
    assert fk(arm.q)[0][2] == pytest.approx(P_HOME[2] + 0.01, abs=1e-5)


def test_bunched_actions_never_exceed_the_tcp_speed_in_the_stream() -> None:
    """Three full actions in one servo period: the stream still moves the TCP at most max_tcp_speed."""
    cfg = goal_delta_config()
    driver, arm, _, clock = make(cfg)
    assert driver.enable()[0]
    max_step = cfg.max_tcp_speed * cfg.servo_period
    max_rot = cfg.max_tcp_rot_speed * cfg.servo_period
    R_prev = fk(arm.q)[1]
    for _ in range(8):
        for _ in range(3):
            assert driver.submit_action(np.array([0.5, 0.0, -0.3, 0, 0, 0.08, 0]), SOURCE_POLICY).accepted
        path = tick_and_record(driver, arm, clock, 2)
        assert np.all(np.linalg.norm(np.diff(path, axis=0), axis=1) <= max_step * (1 + 1e-6))
        R = fk(arm.q)[1]
        assert Rotation.from_matrix(R @ R_prev.T).magnitude() <= 2 * max_rot * (1 + 1e-6)
        R_prev = R


# ------------------------------------------------------------- 2. homing and config ranges
def test_homing_obeys_the_same_per_tick_limits() -> None:
    """Homing is limited like every other motion: joint clamp and TCP speed per servo tick."""
    cfg = goal_delta_config(max_tcp_speed=0.05, home_joint_speed=0.6)
    q_far = HOME_Q + np.array([0.3, -0.2, 0.2, 0.1, 0.0, 0.4])
    driver, arm, _, clock = make(cfg, q0=q_far)
    assert driver.enable()[0]
    assert driver.home()[0]
    limit = cfg.max_joint_speed * cfg.servo_period
    q_prev, p_prev = arm.q.copy(), fk(arm.q)[0]
    for _ in range(20000):
        clock.t += cfg.servo_period
        driver.tick()
        assert np.all(np.abs(arm.q - q_prev) <= np.minimum(limit, cfg.home_joint_speed * cfg.servo_period) + 1e-12)
        p = fk(arm.q)[0]
        assert np.linalg.norm(p - p_prev) <= cfg.max_tcp_speed * cfg.servo_period * (1 + 1e-6)
        q_prev, p_prev = arm.q.copy(), p
        if driver.mode is ArmMode.ENABLED:
            break
    assert driver.mode is ArmMode.ENABLED
    np.testing.assert_allclose(arm.q, HOME_Q, atol=1e-9)


@pytest.mark.parametrize(
    "field, value, allowed",
    [
        ("home_joint_speed", 50.0, "home_joint_speed must be in"),
        ("max_following_error", -1.0, "max_following_error must be in"),
        ("ik_pos_tol", 0.5, "ik_pos_tol must be in"),
        ("ik_rot_tol", 0.5, "ik_rot_tol must be in"),
        ("max_tcp_speed", 50.0, "max_tcp_speed must be in"),
        ("max_tracking_error", 5.0, "max_tracking_error must be in"),
        ("watchdog_timeout", 10.0, "watchdog_timeout must be in"),
        ("watchdog_timeout", 0.01, "watchdog_timeout"),  # below one control period
        ("state_stale_after", 60.0, "state_stale_after must be in"),
        ("servo_hz", 5000.0, "servo_hz must be in"),
        ("joint_speed_fraction", 0.0, "joint_speed_fraction must be in"),
        ("workspace_max", [5.0, 0.6, 0.6], "workspace_max"),
        ("tool_offset", [0.0, 0.0, 2.0], "tool_offset"),
    ],
)
def test_every_limit_is_validated_with_its_range(field: str, value: object, allowed: str) -> None:
    with pytest.raises(ConfigError, match=allowed):
        ArmConfig(**{field: value})


def test_config_range_errors_name_the_allowed_interval() -> None:
    with pytest.raises(ConfigError, match=r"max_following_error must be in \(0, 1(\.0)?\] rad, got -1"):
        goal_delta_config(max_following_error=-1)
    with pytest.raises(ConfigError, match=r"home_joint_speed .*2\.3"):  # the joint clamp's slowest joint, rad/s
        goal_delta_config(home_joint_speed=3.0)


# ------------------------------------------------------------- 3. reset on a fresh measurement only
@pytest.mark.parametrize("error", [BackendError("link lost"), OSError("shared memory vanished")])
def test_reset_fails_while_the_arm_cannot_be_read(error: Exception) -> None:
    driver, arm, _, clock = make()
    assert driver.enable()[0]
    arm.refuse = True
    driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY)
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.mode is ArmMode.FAULT
    arm.refuse = False

    def broken_read():
        raise error

    arm.read = broken_read
    ok, msg = driver.reset_fault()
    assert not ok, msg
    assert str(error) in msg
    assert driver.mode is ArmMode.FAULT
    assert not driver.enable()[0]


def test_reset_fails_on_a_gripper_that_cannot_be_read() -> None:
    driver, arm, gripper, _clock = make()
    arm.fault = "protective stop"
    driver.tick()
    arm.fault = None

    def broken_read():
        raise BackendError("gripper bus down")

    gripper.read = broken_read
    ok, msg = driver.reset_fault()
    assert not ok and "gripper bus down" in msg
    assert driver.mode is ArmMode.FAULT


def test_reset_needs_a_fresh_measurement_not_the_cached_one() -> None:
    """The cause is gone in the cache, but the reset's own read still shows it: refused."""
    driver, arm, _, _clock = make()
    arm.fault = "protective stop"
    driver.tick()
    arm.fault = None
    driver.tick()  # the cache now shows no fault ...
    arm.fault = "protective stop"  # ... but the arm is stopped again when the operator resets
    ok, msg = driver.reset_fault()
    assert not ok and "protective stop" in msg


# ------------------------------------------------------------- 4. the servo loop cannot die
def test_tick_never_raises_even_when_read_and_hold_both_fail() -> None:
    driver, arm, _, clock = make()
    assert driver.enable()[0]
    real_read, real_hold = arm.read, arm.hold

    def broken_read():
        raise OSError("state socket gone")

    def broken_hold():
        raise RuntimeError("hold: pipe closed")

    arm.read, arm.hold = broken_read, broken_hold
    for _ in range(5):
        clock.t += driver.config.servo_period
        driver.tick()  # must not raise
    st = driver.status()
    assert st.mode is ArmMode.FAULT and "state socket gone" in st.fault
    assert not st.hold_confirmed and st.counters["hold_failures"] == 5  # retried every tick, and said so
    assert st.counters["faults"] == 1  # latched once, not once per tick
    # the operator fixes it: reset, enable, and the same loop streams again
    arm.read, arm.hold = real_read, real_hold
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert driver.enable()[0]
    calls = arm.servo_calls
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    run_control_period(driver, clock)
    assert arm.servo_calls > calls


def test_a_failed_hold_is_retried_every_tick_until_it_lands() -> None:
    driver, arm, _, clock = make()
    assert driver.enable()[0]
    real_hold = arm.hold
    failures = [RuntimeError("busy"), BackendError("busy")]

    def flaky_hold():
        if failures:
            raise failures.pop(0)
        real_hold()

    arm.hold = flaky_hold
    arm.fault = "protective stop"
    for _ in range(4):
        clock.t += driver.config.servo_period
        driver.tick()
    assert arm.holds == 1  # the third attempt landed, and then no more
    assert driver.mode is ArmMode.FAULT


def test_run_loop_survives_a_raising_body_and_reports_it() -> None:
    calls = []

    def body() -> None:
        calls.append(1)
        if len(calls) % 2:
            raise RuntimeError("boom")

    stop = threading.Event()
    thread, loop = run_loop(200.0, body, stop, "test-loop")
    deadline = time.monotonic() + 5.0
    while len(calls) < 10 and time.monotonic() < deadline:
        time.sleep(0.01)
    stop.set()
    thread.join(2.0)
    assert len(calls) >= 10  # kept running after the first exception
    assert loop.errors >= 5
    assert "RuntimeError: boom" in (loop.last_error or "")


# ------------------------------------------------------------- 9. re-anchoring, malformed messages
def test_source_switch_reanchors_on_the_measured_tcp() -> None:
    """A lagging arm must not hand its unreached goal to the next source."""
    driver, arm, _, clock = make(arm_cls=LaggingArm)
    assert driver.enable()[0]
    for _ in range(6):
        assert driver.submit_action(np.array([0.0, 0.4, 0.0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
    goal_before = driver.status().goal_pos.copy()
    p_meas = fk(arm.q)[0]
    assert np.linalg.norm(goal_before - p_meas) > 0.005  # the arm lags its goal
    driver.arbiter.select(SOURCE_TELEOP)
    st = driver.status()
    np.testing.assert_allclose(st.goal_pos, p_meas, atol=1e-9)
    for _ in range(30):
        assert driver.submit_action(np.zeros(7), SOURCE_TELEOP).accepted
        run_control_period(driver, clock)
    np.testing.assert_allclose(fk(arm.q)[0], p_meas, atol=1e-4)  # held where it was, not at policy's goal


def test_a_malformed_message_from_the_active_source_is_rejected_and_holds() -> None:
    driver, _arm, _, _clock = make()
    assert driver.enable()[0]
    assert driver.submit_action(np.array([0.3, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    res = driver.reject_message(SOURCE_POLICY, "action names ['x', 'y'] do not match the contract")
    assert not res.accepted and "do not match" in res.reason
    assert driver.mode is ArmMode.HOLDING
    st = driver.status()
    assert st.counters["rejected_invalid"] == 1 and "do not match" in st.last_error
    # from a source that may not drive, it is only counted
    driver.arbiter.select(SOURCE_POLICY)
    res = driver.reject_message(SOURCE_TELEOP, "bad names")
    assert not res.accepted and driver.status().counters["rejected_source"] == 1


# ------------------------------------------------------------- 8. branches no test used to reach
def test_a_controller_that_stops_being_ready_without_a_fault_faults() -> None:
    """Running -> e.g. Idle with no fault code: the driver must not keep streaming into it."""
    driver, arm, _, clock = make()
    assert driver.enable()[0]
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, 0]), SOURCE_POLICY).accepted
    arm.ready = False
    clock.t += driver.config.servo_period
    driver.tick()
    st = driver.status()
    assert st.mode is ArmMode.FAULT and "left the ready state" in st.fault
    ok, msg = driver.reset_fault()  # no fault code, but still not ready: the cause is not gone
    assert not ok and "not ready" in msg
    arm.ready = True
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert driver.mode is ArmMode.DISABLED


def test_a_disabled_arm_that_is_not_ready_is_not_a_fault() -> None:
    driver, arm, _, clock = make()
    arm.ready = False
    run_control_period(driver, clock)
    assert driver.mode is ArmMode.DISABLED
    ok, msg = driver.enable()
    assert not ok and "not ready" in msg


@pytest.mark.parametrize("between", ["nothing", "stop", "fault"])
def test_a_target_prepared_before_a_hold_is_never_sent_after_it(between: str) -> None:
    """The driver process computes a target at its tick and sends it a little later (prepare_tick, send_tick):
    a stop or a fault in between (from another thread: a service, an action's gripper error; or the next tick's
    own fault) voids it, as a hold voids a target inside one tick."""
    driver, arm, _, clock = make(goal_delta_config())
    assert driver.enable()[0]
    driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, -1.0]), SOURCE_POLICY)
    clock.t += driver.config.servo_period
    prepared = driver.prepare_tick()
    assert prepared is not None
    target = prepared[0]
    calls, q_before, holds = arm.servo_calls, arm.q.copy(), arm.holds
    if between == "stop":
        driver.stop()
    elif between == "fault":
        arm.fault = "protective stop"
        assert driver.prepare_tick() is None  # the next tick reads the fault and holds
    driver.send_tick(prepared)
    if between == "nothing":  # the prepared target goes out as it was computed
        assert arm.servo_calls == calls + 1 and np.array_equal(arm.q, target)
        assert not np.array_equal(target, q_before)
    else:
        assert arm.holds > holds
        assert arm.servo_calls == calls and np.array_equal(arm.q, q_before)
    calls = arm.servo_calls
    driver.send_tick(None)  # a tick with nothing to send (disabled, fault): nothing happens
    assert arm.servo_calls == calls


def refused_once() -> tuple[ArmDriver, IdealArm, ManualClock]:
    """An enabled driver whose next servo target the arm refused: latched as the fault (the arm still refuses)."""
    driver, arm, _, clock = make(goal_delta_config())
    assert driver.enable()[0]
    clock.t += driver.config.servo_period
    prepared = driver.prepare_tick()
    arm.refuse = True
    driver.send_tick(prepared)
    assert driver.mode is ArmMode.FAULT and "servo command refused" in driver.status().fault
    return driver, arm, clock


def assert_following_error_stays(driver: ArmDriver, arm: IdealArm, clock: ManualClock) -> None:
    """The enabled arm is found 0.5 rad from its target (a following error, the fault); the controller's stop read
    a tick later does not replace it."""
    arm.q = arm.q + 0.5
    clock.t += driver.config.servo_period
    assert driver.prepare_tick() is None and "following error" in driver.status().fault
    arm.fault = "safety mode ProtectiveStop"
    clock.t += driver.config.servo_period
    assert driver.prepare_tick() is None and "following error" in driver.status().fault


@pytest.mark.parametrize("stop_seen_after", [0.0, 0.4, 0.6])
def test_a_refusal_the_controllers_stop_explains_is_reported_as_the_stop(stop_seen_after: float) -> None:
    """A protective stop drops servo mode: the RPC refuses the next target (-13) before the state stream shows the
    stop. The operator is told the stop (what to do about it), not the refusal; a stop seen long after the
    refusal did not cause it, and the first cause stays the fault."""
    driver, arm, clock = refused_once()
    refusal = driver.status().fault
    clock.t += stop_seen_after
    assert driver.prepare_tick() is None  # the stop not yet in the state: nothing changes
    assert driver.status().fault == refusal
    arm.fault = "safety mode ProtectiveStop"
    assert driver.prepare_tick() is None
    explained = stop_seen_after <= 0.5
    assert driver.status().fault == ("safety mode ProtectiveStop" if explained else refusal)
    arm.fault = "safety mode Collision"  # a later fault never replaces the one reported
    clock.t += driver.config.servo_period
    assert driver.prepare_tick() is None
    assert driver.status().fault == ("safety mode ProtectiveStop" if explained else refusal)
    arm.fault, arm.refuse = None, False
    assert driver.reset_fault()[0] and driver.status().fault is None and driver.enable()[0]


def test_a_stop_after_another_fault_does_not_replace_it() -> None:
    """Only a refused servo command is explained by the controller's stop: a following error stays the fault."""
    driver, arm, _, clock = make(goal_delta_config())
    assert driver.enable()[0]
    assert_following_error_stays(driver, arm, clock)


def test_a_refusal_explains_nothing_of_a_later_fault() -> None:
    """A refusal, a reset, and soon after another fault: the controller's stop read then does not replace it."""
    driver, arm, clock = refused_once()
    arm.refuse = False
    assert driver.reset_fault()[0] and driver.enable()[0]
    assert_following_error_stays(driver, arm, clock)  # within the refusal's window


def test_a_refused_send_faults_and_neither_half_ever_raises() -> None:
    driver, _arm, _clock = refused_once()
    driver.send_tick(object())  # type: ignore[arg-type]  # not even a pair: counted, never raised
    assert driver.status().counters["tick_errors"] == 1
    driver._arm = None  # type: ignore[assignment]  # reading the arm fails, and so does latching the fault:

    def broken_latch(reason: str) -> None:
        raise RuntimeError(f"cannot latch ({reason})")

    driver._enter_fault = broken_latch  # type: ignore[method-assign]
    assert driver.prepare_tick() is None  # counted and reported, never raised
    status = driver.status()
    assert status.counters["tick_errors"] == 2 and "RuntimeError: cannot latch" in status.last_error
    assert driver.mode is ArmMode.FAULT
