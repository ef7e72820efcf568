"""The arm driver's limits and holds under the default (libero) action response.

The libero response streams a reference (robosuite's law on the Panda's rigid body) toward a goal
set from the reference pose (libero_workcell.action_response); test_action_response.py holds its
shape against robosuite.
Here: what must stay true whatever the reference does. A zero action from rest holds
exactly; the reference never leaves the workspace box (nor moves further out of it) and
never exceeds the TCP speed limits, even coasting; an unreachable goal is refused; where IK
fails on the way the reference stops; holds (rejection, watchdog, stop) stop it at once;
the tracking-error guard measures against the reference; ``applied`` is what was done.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from arm_rig import IdealArm, IdealGripper, LaggingArm, ManualClock, run_control_period
from scipy.spatial.transform import Rotation

import aubo_bridge.response.libero as libero_motion
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q, IkResult, fk
from libero_workcell.contract import ACTION_POS_SCALE, ACTION_ROT_SCALE, SOURCE_POLICY, SOURCE_TELEOP

P_HOME, R_HOME = fk(HOME_Q)


def make(config: ArmConfig | None = None, arm_cls: type = IdealArm, q0: np.ndarray = HOME_Q):
    clock = ManualClock()
    arm = arm_cls(clock, q0)
    driver = ArmDriver(config or ArmConfig(), arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    assert driver.config.action_response == "libero"  # the default
    ok, msg = driver.enable()
    assert ok, msg
    return driver, arm, clock


def act(driver: ArmDriver, clock: ManualClock, a, periods: int = 1) -> list:
    results = []
    for _ in range(periods):
        results.append(driver.submit_action(np.asarray(a, float), SOURCE_POLICY))
        run_control_period(driver, clock)
    return results


def test_zero_actions_from_rest_hold_exactly() -> None:
    driver, arm, clock = make()
    q0 = arm.q.copy()
    for res in act(driver, clock, np.zeros(7), periods=10):
        assert res.accepted
        np.testing.assert_array_equal(res.applied, np.zeros(7))
    np.testing.assert_array_equal(arm.q, q0)


def test_the_goal_is_the_reference_plus_the_offset_and_applied_says_so() -> None:
    driver, arm, clock = make()
    act(driver, clock, [0.2, 0, 0, 0, 0, 0, -1], periods=3)
    ref = driver._motion.ref.pos.copy()
    res = driver.submit_action(np.array([0.1, -0.2, 0.3, 0, 0, 0, -1]), SOURCE_POLICY)
    np.testing.assert_allclose(driver.status().goal_pos, ref + np.array([0.1, -0.2, 0.3]) * ACTION_POS_SCALE)
    np.testing.assert_allclose(res.applied, [0.1, -0.2, 0.3, 0, 0, 0, -1], atol=1e-12)
    # the arm is behind its goal: it covers part of the offset per period, not all of it
    run_control_period(driver, clock)
    moved = fk(arm.q)[0] - ref
    assert 0.1 < np.linalg.norm(moved) / (np.linalg.norm([0.1, -0.2, 0.3]) * ACTION_POS_SCALE) < 0.6


def test_a_zero_rotation_keeps_the_orientation_goal_and_the_rotation_coasts_to_it() -> None:
    driver, arm, clock = make()
    act(driver, clock, [0, 0, 0, 0, 0, 0.4, -1])  # 0.2 rad about z
    res = act(driver, clock, np.zeros(7), periods=40)
    assert all(r.accepted for r in res)
    np.testing.assert_array_equal(res[0].applied[3:6], np.zeros(3))  # no new rotation goal was set
    turned = Rotation.from_matrix(fk(arm.q)[1] @ R_HOME.T).as_rotvec()
    assert turned[2] == pytest.approx(0.4 * ACTION_ROT_SCALE, abs=2e-4)  # robosuite: the full angle
    # The OSC's orientation task acts through the Panda's inertia: robosuite's Panda also ends 0.4 mrad off the
    # axis after this action (the replica, sim_bridge.panda, shows the same).
    np.testing.assert_allclose(turned[:2], 0.0, atol=1e-3)


@pytest.mark.parametrize("max_speed", [0.05, 0.1])
def test_the_reference_never_exceeds_the_tcp_speed_limit(max_speed) -> None:
    driver, arm, clock = make(ArmConfig(max_tcp_speed=max_speed, max_tracking_error=0.1))
    cfg = driver.config
    p_prev = fk(arm.q)[0]
    fastest = 0.0
    for _ in range(30):
        driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
        for _ in range(round(cfg.servo_hz / cfg.control_hz)):
            clock.t += cfg.servo_period
            driver.tick()
            p = fk(arm.q)[0]
            fastest = max(fastest, float(np.linalg.norm(p - p_prev)) / cfg.servo_period)
            p_prev = p
    assert max_speed * 0.95 < fastest <= max_speed * (1 + 1e-6)  # it binds, and holds
    assert np.linalg.norm(driver._motion.ref.vel) <= max_speed * (1 + 1e-9)


def test_coasting_stops_on_the_box_face_and_never_crosses_it() -> None:
    face = P_HOME[0] + 0.03
    cfg = ArmConfig(workspace_max=[face, 0.60, 0.65])
    driver, arm, clock = make(cfg)
    highest = -np.inf
    for a in [[0.6, 0, 0, 0, 0, 0, -1]] * 12 + [[0, 0, 0, 0, 0, 0, -1]] * 20:
        assert driver.submit_action(np.array(a, float), SOURCE_POLICY).accepted  # clipped, not refused
        for _ in range(round(cfg.servo_hz / cfg.control_hz)):
            clock.t += cfg.servo_period
            driver.tick()
            highest = max(highest, fk(arm.q)[0][0])
    assert highest <= face + 1e-5  # IK tolerance
    assert face - 1e-4 < fk(arm.q)[0][0]  # it got there
    assert driver._motion.ref.vel[0] == 0.0


def test_a_reference_stopped_on_a_box_face_leaves_it_at_the_first_tick_the_action_turns() -> None:
    """The response is seated where the box stopped the reference (reference_tick): it does not carry on past the
    face, to come back from there before the reference moves (it stuck 4 ticks without it)."""
    face = P_HOME[0] + 0.03
    cfg = ArmConfig(workspace_max=[face, 0.60, 0.65])
    driver, _, clock = make(cfg)
    act(driver, clock, [0.6, 0, 0, 0, 0, 0, -1], periods=12)
    assert driver._motion.ref.pos[0] == face
    assert driver.submit_action(np.array([-0.3, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY).accepted
    clock.t += cfg.servo_period
    driver.tick()
    assert driver._motion.ref.pos[0] < face - 5e-5


def test_outside_the_box_zero_holds_toward_is_accepted_and_further_out_is_refused() -> None:
    cfg = ArmConfig(workspace_max=[0.75, 0.60, P_HOME[2] - 0.04])  # the TCP starts 4 cm above the box
    clock = ManualClock()
    arm = IdealArm(clock, HOME_Q)
    driver = ArmDriver(cfg, arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    ok, msg = driver.enable()
    assert ok and "outside the workspace box" in msg
    q0 = arm.q.copy()
    act(driver, clock, np.zeros(7), periods=5)
    np.testing.assert_array_equal(arm.q, q0)
    res = driver.submit_action(np.array([0, 0, 0.3, 0, 0, 0, -1]), SOURCE_POLICY)
    assert not res.accepted and "further out" in res.reason and driver.mode is ArmMode.HOLDING
    z0 = fk(arm.q)[0][2]
    res = act(driver, clock, [0, 0, -0.3, 0, 0, 0, -1], periods=5)
    assert all(r.accepted for r in res)
    assert fk(arm.q)[0][2] < z0 - 0.005


def test_an_unreachable_goal_is_refused_and_the_arm_holds() -> None:
    driver, arm, clock = make(ArmConfig(workspace_min=[-1.5, -1.5, -1.0], workspace_max=[1.5, 1.5, 1.5]))
    for _ in range(200):  # straight out until the goal leaves the reach
        res = driver.submit_action(np.array([0, 1.0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
        if not res.accepted:
            break
        run_control_period(driver, clock)
    assert not res.accepted and "unreachable" in res.reason
    assert driver.mode is ArmMode.HOLDING and driver.status().counters["rejected_ik"] == 1
    q_held = arm.q.copy()
    run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q_held)


def test_where_ik_fails_on_the_way_the_reference_stops_and_the_arm_holds(monkeypatch) -> None:
    driver, arm, clock = make()
    act(driver, clock, [0.3, 0, 0, 0, 0, 0, -1], periods=2)
    q_before, ref_before = arm.q.copy(), driver._motion.ref.pos.copy()
    monkeypatch.setattr(libero_motion, "ik", lambda *a, **k: IkResult(a[2], False, 1.0, 1.0, 15))
    for n in (1, 2):  # every tick where IK fails counts, and the stopped reference stays usable
        clock.t += driver.config.servo_period
        driver.tick()
        np.testing.assert_array_equal(arm.q, q_before)
        np.testing.assert_array_equal(driver._motion.ref.pos, ref_before)
        assert not np.any(driver._motion.ref.vel) and driver.status().counters["ik_fallbacks"] == n
    assert driver.mode is ArmMode.ENABLED and driver.status().fault is None


def test_holds_stop_the_reference_at_once() -> None:
    driver, arm, clock = make()
    act(driver, clock, [0.5, 0, 0, 0, 0, 0, -1], periods=4)
    assert np.linalg.norm(driver._motion.ref.vel) > 0.05
    res = driver.submit_action(np.array([np.nan] * 7), SOURCE_POLICY)
    assert not res.accepted and driver.mode is ArmMode.HOLDING
    q_held = arm.q.copy()
    run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q_held)  # no coasting after a hold
    # the watchdog too
    act(driver, clock, [0.5, 0, 0, 0, 0, 0, -1], periods=3)
    clock.t += driver.config.watchdog_timeout
    driver.tick()
    assert driver.mode is ArmMode.HOLDING
    q_held = arm.q.copy()
    run_control_period(driver, clock)
    np.testing.assert_array_equal(arm.q, q_held)


def test_the_tracking_error_guard_measures_against_the_reference() -> None:
    cfg = ArmConfig(max_tcp_speed=0.08, max_tracking_error=0.005)
    driver, arm, clock = make(cfg, arm_cls=LaggingArm)
    for _ in range(8):
        assert driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY).accepted
        run_control_period(driver, clock)
    lag = np.linalg.norm(driver._motion.ref.pos - fk(arm.q)[0])
    assert lag > 0.005
    assert driver.submit_action(np.zeros(7), SOURCE_POLICY).accepted
    np.testing.assert_allclose(driver._motion.ref.pos, driver.status().tcp_pos, atol=1e-9)  # re-anchored: measured TCP
    assert not np.any(driver._motion.ref.vel)
    # with a generous guard, the same lag keeps the reference
    driver, arm, clock = make(ArmConfig(max_tcp_speed=0.08, max_tracking_error=0.08), arm_cls=LaggingArm)
    for _ in range(8):
        driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
        run_control_period(driver, clock)
    ref = driver._motion.ref.pos.copy()
    driver.submit_action(np.zeros(7), SOURCE_POLICY)
    np.testing.assert_array_equal(driver._motion.ref.pos, ref)


def test_a_bad_action_response_is_refused_at_start_up() -> None:
    from aubo_bridge.config import ConfigError

    with pytest.raises(ConfigError, match=r"action_response must be one of \['libero', 'goal_delta'\], got 'osc'"):
        ArmConfig(action_response="osc")


def test_each_accepted_action_says_which_servo_tick_it_took_effect_on_and_replaying_those_ticks_is_exact() -> None:
    """Through DDS an action sometimes holds the arm for 4 or 6 servo ticks instead of 5. The result's
    servo_tick records it; a replay that holds each action as long (sim_cell.replay.held_ticks) ends where
    the original did, and one that holds each for a control period does not."""
    from sim_cell.replay import held_ticks

    actions = [np.array([0.3, -0.1, 0.2, 0.0, 0.0, 0.1 * (i % 2), -1.0]) for i in range(8)]
    schedule = [5, 6, 0, 9, 6, 6, 4, 5]  # 0: replaced by its successor before a tick

    def run(ticks_of: list[int]) -> tuple[list, np.ndarray]:
        driver, arm, clock = make()
        results = []
        for a, n in zip(actions, ticks_of, strict=True):
            results.append(driver.submit_action(a, SOURCE_POLICY))
            for _ in range(n):
                clock.t += driver.config.servo_period
                driver.tick()
        return results, fk(arm.q)[0]

    results, end = run(schedule)
    ticks = [r.servo_tick for r in results]
    assert all(r.accepted for r in results)
    np.testing.assert_array_equal(np.diff(ticks), schedule[:-1])  # each held the arm for its ticks
    held = held_ticks(ticks, len(actions), 5)
    np.testing.assert_array_equal(held, [*schedule[:-1], 5])
    replayed = run([int(n) for n in held])[1]
    np.testing.assert_allclose(replayed, end, atol=1e-12)
    nominal = run([5] * len(actions))[1]
    assert np.linalg.norm(nominal - end) > 1e-4  # the schedule matters: 0.1 mm and more here


def test_a_rejected_action_took_effect_on_no_tick() -> None:
    driver, _, _ = make()
    res = driver.submit_action(np.array([np.nan, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
    assert not res.accepted and res.servo_tick is None


def test_a_broken_response_restarts_at_rest_the_arm_stays_and_the_next_action_moves_again() -> None:
    """Should the response's model diverge (here: its state made non-finite mid-motion), the driver says so,
    restarts the reference at rest where it was and sends no target from the broken state: that tick the arm
    stays at its last target. The next action moves it again."""
    driver, arm, clock = make()
    act(driver, clock, [0.5, 0, 0, 0, 0, 0, -1], periods=2)
    ref_before = driver._motion.ref.pos.copy()
    target = driver._target.copy()
    driver._motion.response.data.qvel[:] = np.nan  # what a diverged physics step leaves behind
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.counters["response_resets"] == 1
    assert "action response restarted at rest" in driver.status().last_error
    np.testing.assert_array_equal(driver._target, target)  # no target from the broken state
    np.testing.assert_array_equal(driver._motion.ref.pos, ref_before)
    np.testing.assert_array_equal(driver._motion.ref.vel, np.zeros(3))
    assert driver.status().mode is ArmMode.ENABLED
    res = act(driver, clock, [0.5, 0, 0, 0, 0, 0, -1], periods=2)
    assert all(r.accepted for r in res) and driver.counters["response_resets"] == 1
    assert np.all(np.isfinite(arm.q))
    assert fk(arm.q)[0][0] > ref_before[0] + 1e-3
    driver._motion.response.data.qvel[:] = np.nan  # and again: each break is counted
    clock.t += driver.config.servo_period
    driver.tick()
    assert driver.counters["response_resets"] == 2


def test_enable_while_streaming_keeps_the_target_in_flight_and_never_pulls_the_arm_back() -> None:
    """The driver process computes a target, then sends it (prepare_tick / send_tick). An enable landing in
    between must anchor on that target, not on the older measurement: else the target goes out and the next
    one pulls the arm back (hypothesis found it moving 0.13 mm back out of the workspace box)."""
    driver, arm, clock = make()
    driver.submit_action(np.array([0.5, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
    xs = [fk(arm.q)[0][0]]
    for i in range(5):
        clock.t += driver.config.servo_period
        prepared = driver.prepare_tick()
        if i == 2:
            assert driver.enable()[0]
        driver.send_tick(prepared)
        xs.append(fk(arm.q)[0][0])
    assert np.all(np.diff(xs) >= 0.0), np.diff(xs)
    assert xs[-1] > xs[0] + 1e-3


def test_enable_while_homing_keeps_the_target_in_flight_and_never_pulls_the_arm_back() -> None:
    """Homing streams too: an enable between computing a homing target and sending it anchors on that target,
    as while streaming actions (re-anchored on the older measurement, the next tick stepped back from home)."""
    driver, arm, clock = make()
    act(driver, clock, [1.0, 0, 0, 0, 0, 0, -1], periods=6)
    assert driver.home()[0]
    far = [float(np.max(np.abs(arm.q - driver.config.home_q)))]
    for i in range(8):
        clock.t += driver.config.servo_period
        prepared = driver.prepare_tick()
        if i == 3:
            assert driver.enable()[0]
        driver.send_tick(prepared)
        far.append(float(np.max(np.abs(arm.q - driver.config.home_q))))
    assert np.all(np.diff(far) <= 1e-12), np.diff(far)
    assert far[4] < far[0] - 1e-4  # it did move toward home before the enable


@pytest.mark.parametrize("command", ["home", "switch source"])
def test_a_re_anchor_on_the_measurement_voids_the_target_in_flight(command: str) -> None:
    """home() and a source switch restart from the measured joints. A target computed from the old anchor and
    not yet sent when they land is never sent: it would go out, and the next target pull the arm back."""
    driver, arm, clock = make()
    act(driver, clock, [1.0, 0, 0, 0, 0, 0, -1], periods=3)
    driver.submit_action(np.array([1.0, 0, 0, 0, 0, 0, -1]), SOURCE_POLICY)
    clock.t += driver.config.servo_period
    q_before = arm.q.copy()
    prepared = driver.prepare_tick()
    assert prepared is not None and np.max(np.abs(prepared[0] - q_before)) > 1e-4  # it would move the arm
    if command == "home":
        assert driver.home()[0]
    else:
        driver.select_source(SOURCE_TELEOP)
    driver.send_tick(prepared)
    np.testing.assert_array_equal(arm.q, q_before)  # void: not sent
    qs = [arm.q.copy()]
    for _ in range(5):
        clock.t += driver.config.servo_period
        driver.tick()
        qs.append(arm.q.copy())
    if command == "home":  # from the measurement straight toward home: every joint's distance shrinks
        far = [np.abs(q - driver.config.home_q) for q in qs]
        assert all(np.all(b <= a + 1e-12) for a, b in itertools.pairwise(far)) and far[-1].max() < far[0].max()
    else:  # held where it was measured
        assert all(np.array_equal(q, q_before) for q in qs)
