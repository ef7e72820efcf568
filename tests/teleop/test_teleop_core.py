"""Teleoperation core: the headset mapping, clutch, buttons, holds and the tracking law (no SDK, no ROS)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation
from teleop_states import STATE, TCP

from libero_workcell.contract import GRIPPER_CLOSE, GRIPPER_OPEN
from teleop_pico.config import TeleopConfig, TeleopConfigError
from teleop_pico.core import STATE_BOUND, Button, SessionCommand, Status, TeleopCore, session_command, state_fault
from teleop_pico.mapping import POSITION_BOUND, ControllerSample, is_tracking, to_base

ID_Q = (0.0, 0.0, 0.0, 1.0)
R_HB = TeleopConfig().rotation


def sample(t: int, pos=(0.0, 1.0, -0.3), quat=ID_Q, grip=1.0, trigger=0.0, a=False, b=False) -> ControllerSample:
    return ControllerSample(t, (*pos, *quat), trigger, grip, a, b)


class Session:
    """A core stepped at 20 Hz with advancing time stamps."""

    def __init__(self, config: TeleopConfig | None = None) -> None:
        self.core = TeleopCore(config or TeleopConfig(), arm_enabled=True)
        self.t = 0

    def step(self, state=STATE, stamp: int | None = None, **kw):
        self.t += 1
        return self.core.step(sample(self.t if stamp is None else stamp, **kw), state, self.t * 0.05)


# ---------------------------------------------------------------- mapping
def test_the_headset_frame_maps_onto_the_base_frame_as_the_teleop_sample_does() -> None:
    p, _ = to_base((0.0, 0.0, -1.0, *ID_Q), R_HB)  # OpenXR forward (-z) ...
    np.testing.assert_allclose(p, [1.0, 0.0, 0.0])  # ... is the base's +x
    np.testing.assert_allclose(to_base((1.0, 0.0, 0.0, *ID_Q), R_HB)[0], [0.0, -1.0, 0.0])  # right: -y
    np.testing.assert_allclose(to_base((0.0, 1.0, 0.0, *ID_Q), R_HB)[0], [0.0, 0.0, 1.0])  # up: +z
    yaw_xr = Rotation.from_rotvec([0.0, 0.3, 0.0]).as_quat()  # turned about the headset's up axis
    _, R = to_base((0.0, 0.0, 0.0, *yaw_xr), R_HB)
    np.testing.assert_allclose(Rotation.from_matrix(R).as_rotvec(), [0.0, 0.0, 0.3], atol=1e-12)  # about base z


def test_a_pose_of_zeros_or_a_broken_quaternion_is_no_tracking() -> None:
    assert is_tracking((0.0, 1.0, -0.3, *ID_Q))
    assert not is_tracking((0.0,) * 7)  # what the SDK returns without its PC service (qw = 0)
    assert not is_tracking((0.0, 1.0, -0.3, 0.0, 0.0, 0.0, 0.5))
    assert not is_tracking((np.nan, 1.0, -0.3, *ID_Q))
    assert not is_tracking((0.0, 1.0, -0.3, 0.0))
    assert not is_tracking((0.0, POSITION_BOUND * 1.01, -0.3, *ID_Q))  # beyond any room: garbage
    assert not is_tracking(("x",) * 7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # bounds come before the norm: a huge quaternion does not overflow it
        assert not is_tracking((0.0, 1.0, -0.3, 1e300, 1e300, 0.0, 0.0))


# ---------------------------------------------------------------- clutch and the tracking law
def test_engaging_latches_and_the_action_follows_the_controller_with_the_tracking_law() -> None:
    s = Session()
    first = s.step(grip=1.0)
    assert first.status is Status.FOLLOWING and s.core.engaged
    np.testing.assert_allclose(first.action[:6], 0.0, atol=1e-12)  # the target starts at the TCP: no jump
    moved = s.step(pos=(0.0, 1.0, -0.31))  # 10 mm forward (OpenXR -z): the base's +x
    np.testing.assert_allclose(moved.action[:6], [3 * 0.01 / 0.05, 0, 0, 0, 0, 0], atol=1e-9)  # k e / s_p
    np.testing.assert_allclose(moved.target[0], TCP + [0.01, 0.0, 0.0], atol=1e-12)
    turned = s.step(pos=(0.0, 1.0, -0.31), quat=tuple(Rotation.from_rotvec([0.0, 0.1, 0.0]).as_quat()))
    np.testing.assert_allclose(turned.action[3:6], [0.0, 0.0, 3 * 0.1 / 0.5], atol=1e-9)  # k Log / s_R, base z


def test_the_scales_multiply_the_controller_motion() -> None:
    s = Session(TeleopConfig(pos_scale=0.5, rot_scale=2.0))
    s.step()
    step = s.step(pos=(0.0, 1.0, -0.31), quat=tuple(Rotation.from_rotvec([0.0, 0.05, 0.0]).as_quat()))
    np.testing.assert_allclose(step.action[:6], [3 * 0.005 / 0.05, 0, 0, 0, 0, 3 * 0.1 / 0.5], atol=1e-9)


def test_the_clutch_has_hysteresis_and_re_engaging_starts_from_where_the_arm_is() -> None:
    s = Session()
    assert s.step(grip=0.5).status is Status.IDLE  # below the engage threshold: never engaged
    assert s.step(grip=0.95).status is Status.FOLLOWING
    assert s.step(grip=0.85).status is Status.FOLLOWING  # between release and engage: still held
    idle = s.step(grip=0.75, pos=(0.0, 1.0, -0.5))
    assert idle.status is Status.IDLE and not s.core.engaged
    np.testing.assert_array_equal(idle.action[:6], 0.0)  # released: the arm holds
    again = s.step(grip=0.95, pos=(0.0, 1.0, -0.52))  # the hand moved while released
    np.testing.assert_allclose(again.action[:6], 0.0, atol=1e-12)  # re-latched: no jump to the old target


def test_thresholds_are_inclusive_as_documented_and_the_gain_is_the_configs() -> None:
    s = Session(TeleopConfig(clutch_engage=0.9, clutch_release=0.8, trigger_close=0.5, gain=1.5))
    assert s.step(grip=0.9).status is Status.IDLE  # engages only above 0.9
    assert s.step(grip=0.95, trigger=0.5).action[6] == GRIPPER_CLOSE  # closes at 0.5 and above
    assert s.step(grip=0.8, trigger=0.5).status is Status.FOLLOWING  # releases only below 0.8
    moved = s.step(grip=0.8, pos=(0.0, 1.0, -0.31))
    np.testing.assert_allclose(moved.action[0], 1.5 * 0.01 / 0.05, atol=1e-9)  # k from the config


def test_the_trigger_closes_the_gripper_and_a_loss_of_tracking_never_opens_it() -> None:
    s = Session()
    assert s.step(trigger=0.2).action[6] == GRIPPER_OPEN
    assert s.step(trigger=0.6).action[6] == GRIPPER_CLOSE
    lost = s.core.step(ControllerSample(s.t + 1, (0.0,) * 7, 0.0, 0.0, False, False), STATE, 10.0)
    assert lost.status is Status.NO_TRACKING and lost.status.holds and not s.core.engaged
    np.testing.assert_array_equal(lost.action, [0, 0, 0, 0, 0, 0, GRIPPER_CLOSE])  # held, still gripping
    assert s.core.step(None, STATE, 10.1).action[6] == GRIPPER_CLOSE  # no source at all: the same


@pytest.mark.parametrize("t0", [0.0, 5000.0])  # a monotonic clock reads anything
def test_a_frozen_stream_holds_and_a_live_one_resumes_from_a_fresh_latch(t0) -> None:
    cfg = TeleopConfig(stale_timeout=0.1)
    core = TeleopCore(cfg, arm_enabled=True)
    assert core.step(sample(7), STATE, t0).status is Status.FOLLOWING
    assert core.step(sample(7, pos=(0.0, 1.0, -0.31)), STATE, t0 + 0.05).status is Status.FOLLOWING  # not stale
    frozen = core.step(sample(7, pos=(0.0, 1.0, -0.32)), STATE, t0 + 0.15)
    assert frozen.status is Status.FROZEN and not core.engaged and "0.15 s" in frozen.reason
    np.testing.assert_array_equal(frozen.action[:6], 0.0)
    live = core.step(sample(8, pos=(0.0, 1.0, -0.33)), STATE, t0 + 0.2)
    assert live.status is Status.FOLLOWING
    np.testing.assert_allclose(live.action[:6], 0.0, atol=1e-12)


def test_a_controller_jump_is_a_glitch_that_holds() -> None:
    s = Session(TeleopConfig(max_jump=0.05))
    s.step()
    jump = s.step(pos=(0.0, 1.0, -0.4))  # 0.1 m in one sample
    assert jump.status is Status.JUMP and not s.core.engaged
    np.testing.assert_array_equal(jump.action[:6], 0.0)
    after = s.step(pos=(0.0, 1.0, -0.41))  # from there on, 10 mm steps: a fresh latch, no jump
    assert after.status is Status.FOLLOWING
    np.testing.assert_allclose(after.action[:6], 0.0, atol=1e-12)


def quat(rotvec) -> tuple[float, ...]:
    return tuple(Rotation.from_rotvec(rotvec).as_quat())


def test_an_orientation_jump_is_a_glitch_that_holds_and_re_anchors_like_a_position_jump() -> None:
    s = Session(TeleopConfig(max_rot_jump=0.5))
    s.step()
    turning = s.step(quat=quat([0.0, 0.4, 0.0]))  # 0.4 rad in one sample: under the limit, followed
    assert turning.status is Status.FOLLOWING and turning.action[5] == 1.0  # k 0.4 / 0.5 saturates
    flipped = s.step(quat=quat([0.0, 0.4 + np.radians(175.0), 0.0]))  # a tracking flip by 175 degrees
    assert flipped.status is Status.JUMP and not s.core.engaged and "max_rot_jump" in flipped.reason
    np.testing.assert_array_equal(flipped.action[:6], 0.0)  # the arm holds: no saturated rotation action
    after = s.step(quat=quat([0.0, 0.45 + np.radians(175.0), 0.0]))  # small turns from the flipped estimate on
    assert after.status is Status.FOLLOWING  # compared with the flipped sample, not the old one: re-anchored
    np.testing.assert_allclose(after.action[:6], 0.0, atol=1e-12)  # a fresh latch where the arm is: no jump
    moved = s.step(quat=quat([0.0, 0.55 + np.radians(175.0), 0.0]))
    np.testing.assert_allclose(moved.action[3:6], [0.0, 0.0, 3 * 0.1 / 0.5], atol=1e-9)


def test_the_stale_and_jump_limits_hold_only_beyond_them_as_documented() -> None:
    core = TeleopCore(TeleopConfig(stale_timeout=0.125, max_jump=0.0625), arm_enabled=True)  # exact binary fractions
    assert core.step(sample(1), STATE, 0.0).status is Status.FOLLOWING
    assert core.step(sample(1), STATE, 0.125).status is Status.FOLLOWING  # not advanced for exactly the limit
    assert core.step(sample(2, pos=(0.0, 1.0, -0.3625)), STATE, 0.25).status is Status.FOLLOWING  # moved exactly it
    assert core.step(sample(3, pos=(0.0, 1.0, -0.4251)), STATE, 0.375).status is Status.JUMP  # beyond it


def test_a_turn_while_released_is_not_a_glitch() -> None:
    s = Session()
    s.step(grip=0.0)
    assert s.step(grip=0.0, quat=quat([0.0, 3.0, 0.0])).status is Status.IDLE  # the hand may be anywhere
    engaged = s.step(grip=1.0, quat=quat([0.0, 3.0, 0.0]))
    assert engaged.status is Status.FOLLOWING
    np.testing.assert_allclose(engaged.action[:6], 0.0, atol=1e-12)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_trigger_holds_releases_the_clutch_and_keeps_a_held_part(bad) -> None:
    s = Session()
    holding = s.step(trigger=1.0)
    assert holding.status is Status.FOLLOWING and holding.action[6] == GRIPPER_CLOSE
    glitch = s.step(trigger=bad)
    assert glitch.status is Status.BAD_INPUT and glitch.status.fault and "trigger" in glitch.reason
    assert not s.core.engaged
    np.testing.assert_array_equal(glitch.action, [0, 0, 0, 0, 0, 0, GRIPPER_CLOSE])  # never dropped
    back = s.step(trigger=1.0)
    assert back.status is Status.FOLLOWING and back.action[6] == GRIPPER_CLOSE
    np.testing.assert_allclose(back.action[:6], 0.0, atol=1e-12)  # a fresh latch


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_grip_releases_the_dead_man(bad) -> None:
    s = Session()
    assert s.step(grip=1.0).status is Status.FOLLOWING and s.core.engaged
    glitch = s.step(grip=bad, pos=(0.0, 1.0, -0.31))
    assert glitch.status is Status.BAD_INPUT and not s.core.engaged and "grip" in glitch.reason
    np.testing.assert_array_equal(glitch.action[:6], 0.0)
    assert s.core.step(sample(s.t + 1, grip=bad, trigger=bad), STATE, 99.0).reason.endswith(
        "grip and trigger is not a finite number")


@pytest.mark.parametrize("bad", [None, "0.9", 10**400])  # not a number, or too big for a float
def test_a_grip_that_is_not_a_number_is_bad_input(bad) -> None:
    s = Session()
    assert s.step(grip=bad).status is Status.BAD_INPUT


def test_a_robot_state_that_is_not_a_state_holds() -> None:
    s = Session()
    s.step(trigger=1.0)
    for bad in ([np.nan] * 7, np.r_[STATE[:6], np.inf], np.r_[STATE_BOUND * 2, STATE[1:]], STATE[:6]):
        step = s.step(state=bad)
        assert step.status is Status.BAD_STATE and not s.core.engaged and step.reason
        np.testing.assert_array_equal(step.action, [0, 0, 0, 0, 0, 0, GRIPPER_CLOSE])
    assert state_fault(STATE) is None and state_fault(np.r_[STATE[:6], STATE_BOUND]) is None  # the bound is sane
    assert "['tcp_x']" in state_fault(np.r_[2 * STATE_BOUND, STATE[1:6], STATE_BOUND])
    assert "tcp_x" in state_fault(np.r_[np.nan, STATE[1:]]) and "gripper" in state_fault(np.r_[STATE[:6], 1e9])
    assert "shape" in state_fault(STATE[:6]) and "not numeric" in state_fault(["a"] * 7)
    assert s.step().status is Status.FOLLOWING  # a good state again: a fresh latch


# ---------------------------------------------------------------- buttons
def test_buttons_give_one_press_edge_per_press() -> None:
    assert Session().step(b=True).presses == (Button.B,)  # a press in the first sample counts
    s = Session()
    assert s.step(a=True).presses == (Button.A,)
    assert s.step(a=True).presses == ()  # still held: no new press
    assert s.step(a=False, b=True).presses == (Button.B,)
    lost = s.core.step(ControllerSample(s.t + 9, (0.0,) * 7, 0.0, 0.0, True, False), STATE, 99.0)
    assert lost.presses == (Button.A,)  # buttons work without pose tracking (stop-and-save while lost)


def test_presses_count_while_released_and_during_a_glitch() -> None:
    s = Session()
    idle = s.step(grip=0.0, a=True)  # stop-and-save with the clutch released
    assert idle.status is Status.IDLE and idle.presses == (Button.A,) and idle.reason == ""
    s.step()
    jump = s.step(pos=(0.0, 1.0, -0.5), b=True)
    assert jump.status is Status.JUMP and jump.presses == (Button.B,)


def test_session_commands_from_buttons() -> None:
    assert session_command(Button.A, recording=False) is SessionCommand.START
    assert session_command(Button.A, recording=True) is SessionCommand.SAVE
    assert session_command(Button.B, recording=True) is SessionCommand.DISCARD
    assert session_command(Button.B, recording=False) is None


# ---------------------------------------------------------------- config
@pytest.mark.parametrize(
    "changes, message",
    [
        ({"headset_to_base": (1, 0, 0, 0, 1, 0, 0, 0, 2)}, "must be a rotation"),
        ({"headset_to_base": (1, 0, 0, 0, -1, 0, 0, 0, 1)}, "must be a rotation"),  # a mirror, det -1
        ({"headset_to_base": (1, 0, 0)}, "9 finite numbers"),
        ({"clutch_release": 0.95}, "must not exceed clutch_engage"),
        ({"clutch_engage": 1.5}, r"in \(0, 1\]"),
        ({"pos_scale": 0.0}, "positive"),
        ({"stale_timeout": 0.01}, "at least one control period"),
    ],
)
def test_a_bad_config_is_refused_naming_the_field(changes, message) -> None:
    with pytest.raises(TeleopConfigError, match=message):
        TeleopConfig(**changes)


def test_an_unknown_parameter_is_refused() -> None:
    with pytest.raises(TeleopConfigError, match="unknown teleop config keys"):
        TeleopConfig.from_mapping({"pos_scal": 1.0})
    assert list(TeleopConfig.parameter_defaults()["headset_to_base"]) == list(TeleopConfig().headset_to_base)


# ---------------------------------------------------------------- invariants
finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=32)
anything = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 0.5, 1e300, -1e300]))
near_pose = st.tuples(*[st.floats(-0.2, 0.2)] * 3, *[st.floats(-1.0, 1.0)] * 4)  # often a pose (after normalising)


@st.composite
def headset_sample(draw, stamp: int) -> ControllerSample:
    """Whatever a headset reports: garbage, or a near-valid pose with any grip and trigger."""
    if draw(st.booleans()):
        pose = tuple(draw(st.lists(anything, min_size=7, max_size=7)))
    else:
        v = np.array(draw(near_pose))
        q = v[3:] / n if (n := np.linalg.norm(v[3:])) > 0.1 else np.array([0.0, 0.0, 0.0, 1.0])
        pose = (*v[:3], *q)
    return ControllerSample(stamp + draw(st.integers(0, 1)), pose, draw(anything), draw(anything),
                            draw(st.booleans()), draw(st.booleans()))  # fmt: skip


@st.composite
def sessions(draw) -> list[tuple[ControllerSample | None, np.ndarray]]:
    steps = []
    for k in range(draw(st.integers(1, 12))):
        sample = None if draw(st.integers(0, 9)) == 0 else draw(headset_sample(k))
        state = STATE if draw(st.integers(0, 3)) else np.array(draw(st.lists(anything, min_size=7, max_size=7)))
        steps.append((sample, state))
    return steps


def check_step(step, core: TeleopCore, gripper_before: float) -> None:
    """What every step must be: a valid action; a hold never moves nor drops a part, releases the clutch, and
    a fault says why."""
    assert step.action.shape == (7,) and np.all(np.isfinite(step.action))
    assert np.all(np.abs(step.action) <= 1.0)
    if step.status.holds:
        np.testing.assert_array_equal(step.action[:6], 0.0)
    assert step.status is Status.FOLLOWING or not core.engaged  # holding always releases the clutch
    if step.status.fault:
        assert step.action[6] == gripper_before and step.reason  # a glitch never changes the gripper


@settings(max_examples=300, deadline=None)
@given(
    pose=st.lists(finite_or_not, min_size=7, max_size=7), grip=st.floats(0, 1), trigger=st.floats(0, 1),
    stamps=st.lists(st.integers(0, 3), min_size=1, max_size=6),
)  # fmt: skip
def test_whatever_the_controller_gives_the_action_is_valid_and_a_hold_never_moves(pose, grip, trigger, stamps) -> None:
    core, gripper = TeleopCore(arm_enabled=True), GRIPPER_OPEN
    for i, stamp in enumerate(stamps):
        step = core.step(ControllerSample(stamp, tuple(pose), trigger, grip, False, False), STATE, i * 0.05)
        check_step(step, core, gripper)
        gripper = step.action[6]


@settings(max_examples=200, deadline=None)
@given(session=sessions())
def test_whatever_the_headset_and_the_state_report_each_step_is_valid_and_a_fault_is_reported(session) -> None:
    core = TeleopCore(arm_enabled=True)
    gripper = GRIPPER_OPEN
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warning from any input: bounds come first
        for k, (sample, state) in enumerate(session):
            step = core.step(sample, state, k * 0.05)
            check_step(step, core, gripper)
            gripper = step.action[6]


def test_without_a_fresh_state_the_clutch_releases_and_the_buttons_still_work() -> None:
    s = Session()
    s.step()
    assert s.core.engaged
    assert s.core.step_without_state(sample(99, a=True)) == (Button.A,)  # stop-and-save reaches the recorder
    assert not s.core.engaged
    assert s.core.step_without_state(None) == ()
    back = s.step(pos=(0.0, 1.0, -0.5))  # state again: a fresh latch where the arm is, no jump
    np.testing.assert_allclose(back.action[:6], 0.0, atol=1e-12)


# ---------------------------------------------------------------- the arm's mode (issue 35, item 1)
def test_the_clutch_engages_only_on_the_enabled_arm_from_a_grip_pressed_after_it() -> None:
    core = TeleopCore()  # the arm's mode not known yet: not enabled
    assert core.step(sample(1, grip=1.0), STATE, 0.0).status is Status.ARM_NOT_ENABLED
    core.arm_driven(True)
    held = core.step(sample(2, grip=1.0), STATE, 0.05)
    assert held.status is Status.ARM_NOT_ENABLED and "release the grip" in held.reason  # held through the enable
    assert core.step(sample(3, grip=0.0), STATE, 0.1).status is Status.IDLE
    starts = core.starts
    assert core.step(sample(4, grip=1.0), STATE, 0.15).status is Status.FOLLOWING and core.starts == starts + 1
    core.arm_driven(False)  # a stop, homing or fault of the arm: released at once
    assert not core.engaged
    core.arm_driven(True)
    assert core.step(sample(5, grip=1.0), STATE, 0.2).status is Status.ARM_NOT_ENABLED
    assert core.step(sample(6, grip=0.0), STATE, 0.25).status is Status.IDLE
    assert core.step(sample(7, grip=1.0), STATE, 0.3).status is Status.FOLLOWING and core.starts == starts + 2


def test_a_grip_released_while_the_arm_was_stopped_does_not_count() -> None:
    core = TeleopCore(arm_enabled=True)
    assert core.step(sample(1, grip=1.0), STATE, 0.0).status is Status.FOLLOWING
    core.arm_driven(False)
    core.step(sample(2, grip=0.0), STATE, 0.05)  # released during the stop ...
    core.arm_driven(True)
    assert core.step(sample(3, grip=1.0), STATE, 0.1).status is Status.ARM_NOT_ENABLED  # ... pressed again: no
    assert core.step(sample(4, grip=0.0), STATE, 0.15).status is Status.IDLE  # released on the enabled arm
    assert core.step(sample(5, grip=1.0), STATE, 0.2).status is Status.FOLLOWING


def test_every_trigger_edge_is_a_start() -> None:
    core = TeleopCore(arm_enabled=True)
    core.step(sample(1, grip=0.0, trigger=0.0), STATE, 0.0)
    starts = core.starts
    core.step(sample(2, grip=0.0, trigger=1.0), STATE, 0.05)
    core.step(sample(3, grip=0.0, trigger=1.0), STATE, 0.1)
    core.step(sample(4, grip=0.0, trigger=0.0), STATE, 0.15)
    assert core.starts == starts + 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(st.just("arm"), st.booleans()),
                          st.tuples(st.just("grip"), st.sampled_from([0.0, 0.5, 0.85, 1.0, float("nan")]))),
                max_size=30))  # fmt: skip
def test_whatever_the_hand_and_the_arm_do_it_follows_only_from_a_fresh_grip_on_the_enabled_arm(events) -> None:
    """The oracle: following is allowed once the arm is enabled and, since, the grip was seen released (below the
    release threshold) with the arm enabled; any stop withdraws it. Every engagement is a new start."""
    core, allowed, arm, t = TeleopCore(), False, False, 0
    for kind, value in events:
        if kind == "arm":
            core.arm_driven(value)
            arm, allowed = value, allowed and value
            continue
        t += 1
        starts, was_engaged = core.starts, core.engaged
        step = core.step(sample(t, grip=value), STATE, t * 0.05)
        if arm and value < TeleopConfig().clutch_release:  # (NaN compares false: a NaN grip is no release)
            allowed = True
        if step.status is Status.FOLLOWING:
            assert arm and allowed, (events, t)
            assert was_engaged or core.starts == starts + 1  # a new engagement: a new start (a new turn)
