"""The teleop node's publish path (teleop_pico.output) without ROS: only contract-valid actions leave it, whatever
the headset and the robot state report, and every fault hold is counted and said once."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_teleop_core import STATE, headset_sample, sample

import teleop_pico.core
from libero_workcell.contract import GRIPPER_CLOSE, validate_action
from teleop_pico.core import Status, TeleopCore
from teleop_pico.output import TeleopOutput

anything = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 1.0, 1e300]))


@st.composite
def node_steps(draw) -> list[tuple[str, object, object]]:
    """What the node's loop meets each step: a sample (or none) with a fresh state (good or garbage), or no
    fresh state at all."""
    steps = []
    for k in range(draw(st.integers(1, 15))):
        smp = None if draw(st.integers(0, 9)) == 0 else draw(headset_sample(k))
        if draw(st.integers(0, 7)) == 0:
            steps.append(("no_state", smp, None))
        else:
            state = STATE if draw(st.integers(0, 2)) else np.array(draw(st.lists(anything, min_size=7, max_size=7)))
            steps.append(("step", smp, state))
    return steps


@settings(max_examples=150, deadline=None)
@given(steps=node_steps())
def test_whatever_arrives_the_node_publishes_only_valid_actions_and_reports_each_fault(steps) -> None:
    out = TeleopOutput(TeleopCore(arm_enabled=True))
    published, faults, changes = [], 0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow or invalid-value warning on the way
        for k, (kind, smp, state) in enumerate(steps):
            o = out.step(smp, state, k * 0.05) if kind == "step" else out.step_without_state(smp)
            if kind == "no_state":
                assert o.action is None and o.step.status is Status.NO_STATE  # nothing sent: the watchdog holds
            else:
                assert o.action is not None
                validate_action(o.action)  # raises on an invalid one
                published.append(o.action)
            if o.step.status.fault:
                faults += 1
                assert out.status()["fault"] == o.step.reason != ""
                if o.changed:
                    level, text = out.transition()
                    assert level == "warning" and o.step.status.value in text and o.step.reason in text
            changes += o.changed
    assert sum(out.holds.values()) == faults  # every fault hold counted
    status = out.status()
    assert json.loads(json.dumps(status)) == status and status["status"] == o.step.status.value
    assert changes >= 1


def test_a_nan_trigger_while_holding_a_part_is_a_counted_fault_and_the_part_stays_held() -> None:
    out = TeleopOutput(TeleopCore(arm_enabled=True))
    first = out.step(sample(1, trigger=1.0), STATE, 0.05)
    assert first.changed and first.step.status is Status.FOLLOWING and out.transition() is None
    glitch = out.step(sample(2, trigger=float("nan")), STATE, 0.1)
    assert glitch.changed and glitch.action[6] == GRIPPER_CLOSE
    assert out.transition() == ("warning", f"teleop holds the arm (bad_input): {glitch.step.reason}")
    again = out.step(sample(3, trigger=float("nan")), STATE, 0.15)
    assert not again.changed  # the same fault: said once, counted each step
    assert out.holds == {"bad_input": 2} and "trigger" in out.status()["fault"]
    back = out.step(sample(4, trigger=1.0), STATE, 0.2)
    assert back.changed and out.transition() == ("info", "teleop recovered from bad_input: following")
    lost = out.step_without_state(sample(5))
    assert lost.action is None and out.holds["no_state"] == 1 and out.status()["status"] == "no_state"


def test_an_invalid_action_from_the_core_is_never_published(monkeypatch: pytest.MonkeyPatch) -> None:
    out = TeleopOutput(TeleopCore(arm_enabled=True))
    out.step(sample(1, trigger=1.0), STATE, 0.05)
    monkeypatch.setattr(teleop_pico.core, "tracking_action", lambda *a, **k: np.array([np.nan, 0, 0, 0, 0, 2.0, 1]))
    o = out.step(sample(2, trigger=1.0), STATE, 0.1)
    assert o.step.status is Status.INVALID_ACTION and not out.core.engaged
    np.testing.assert_array_equal(o.action, [0, 0, 0, 0, 0, 0, GRIPPER_CLOSE])  # a hold instead
    assert "non-finite" in o.step.reason and out.holds == {"invalid_action": 1}
