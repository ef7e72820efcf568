"""A source drives the arm only within a turn it started on the enabled arm (issue 35, item 1).

Every transition that can put the arm back in motion, each on its own (docs/operator.md, "The arm and its
sources"), and as a property over random sessions: whatever the sources send (any turn, old or new, valid or
not) and whatever stops, homings, faults, resets and switches come in whatever order, an action is accepted only
from a turn whose first action came while the arm was enabled and its source active, with no stop, homing, fault
or switch since; and the arm moves (homing aside) only after such an action.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from arm_rig import IdealArm, IdealGripper, ManualClock, run_control_period
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aubo_bridge.arbiter import OPEN_TURNS_KEPT, SourceArbiter
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from libero_workcell.contract import ACTION_SOURCES, SOURCE_EXPERT, SOURCE_POLICY, SOURCE_TELEOP

MOVE = np.array([0.0, 0.3, 0.0, 0, 0, 0, -1.0])
ENDED = "start the source again"
EXAMPLES = int(os.environ.get("PROPERTY_EXAMPLES", "60"))


@pytest.fixture()
def rig():
    clock = ManualClock()
    arm = IdealArm(clock)
    driver = ArmDriver(ArmConfig(), arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    assert driver.enable()[0]
    return driver, arm, clock


def drive(driver: ArmDriver, arm: IdealArm, clock: ManualClock, turn: int, source: str = SOURCE_POLICY,
          periods: int = 3) -> tuple[bool, float]:  # fmt: skip
    """``periods`` control periods of MOVE from ``source``'s stream ``turn``: (all accepted, how far the arm moved)."""
    q0, accepted = arm.q.copy(), True
    for _ in range(periods):
        accepted &= driver.submit_action(MOVE, source, turn).accepted
        run_control_period(driver, clock)
    return accepted, float(np.max(np.abs(arm.q - q0)))


def test_a_stream_runs_on_while_its_turn_lasts_and_pauses_do_not_end_it(rig) -> None:
    driver, arm, clock = rig
    assert drive(driver, arm, clock, 7)[0]
    for _ in range(10):  # the stream stalls: the watchdog holds ...
        run_control_period(driver, clock)
    assert driver.mode is ArmMode.HOLDING
    accepted, moved = drive(driver, arm, clock, 7)  # ... and the same turn drives again: a hold is not a stop
    assert accepted and moved > 1e-3 and driver.mode is ArmMode.ENABLED


ENDED_WITH = {  # what each transition's refusal names as the end of the stream
    "stop then enable": "a stop (/aubo/stop)",
    "fault, reset then enable": "the fault 'protective stop'",
    "home": "homing (/aubo/home)",
    "switch and back": "the switch of source from 'policy' to 'teleop'",  # (the switch back ends nothing more)
}


@pytest.mark.parametrize("transition", list(ENDED_WITH))
def test_after_every_transition_the_stream_from_before_never_drives_and_a_new_turn_does(rig, transition) -> None:
    driver, arm, clock = rig
    assert drive(driver, arm, clock, 7)[0]
    if transition == "stop then enable":
        driver.stop()
        assert driver.enable()[0]
    elif transition == "fault, reset then enable":
        arm.fault = "protective stop"
        run_control_period(driver, clock)
        arm.fault = None
        assert driver.reset_fault()[0] and driver.enable()[0]
    elif transition == "home":
        assert driver.home()[0]
        for _ in range(400):
            run_control_period(driver, clock)
            if driver.mode is ArmMode.ENABLED:
                break
        assert driver.mode is ArmMode.ENABLED
    else:
        driver.select_source(SOURCE_TELEOP)
        driver.select_source(SOURCE_POLICY)
    before = driver.counters["rejected_turn"]
    accepted, moved = drive(driver, arm, clock, 7)
    assert not accepted and moved == 0.0 and driver.counters["rejected_turn"] == before + 3
    result = driver.submit_action(MOVE, SOURCE_POLICY, 7)
    assert result.reason == (f"source 'policy': this stream (turn 7) ended with {ENDED_WITH[transition]}; nothing it "
                             f"sends moves the arm: {ENDED}")  # fmt: skip
    accepted, moved = drive(driver, arm, clock, 8)  # the source started again
    assert accepted and moved > 1e-3


def test_a_turn_first_seen_on_an_arm_that_is_not_enabled_never_drives(rig) -> None:
    driver, arm, clock = rig
    driver.stop()
    refused = driver.submit_action(MOVE, SOURCE_POLICY, 9)  # a policy started while the arm was disabled
    assert not refused.accepted and "disabled" in refused.reason
    assert driver.enable()[0]
    accepted, moved = drive(driver, arm, clock, 9)
    assert not accepted and moved == 0.0
    assert driver.submit_action(MOVE, SOURCE_POLICY, 9).reason == (
        "source 'policy': this stream (turn 9) ended with its start on an arm that was not enabled or followed another "
        f"source; nothing it sends moves the arm: {ENDED}")
    assert drive(driver, arm, clock, 10)[0]


def test_a_turn_first_seen_while_another_source_was_active_never_drives_after_the_switch(rig) -> None:
    driver, arm, clock = rig
    assert not driver.submit_action(MOVE, SOURCE_TELEOP, 5).accepted  # teleop streams while the policy drives
    driver.select_source(SOURCE_TELEOP)
    accepted, moved = drive(driver, arm, clock, 5, SOURCE_TELEOP)
    assert not accepted and moved == 0.0
    assert drive(driver, arm, clock, 6, SOURCE_TELEOP)[0]  # engaged again after the switch


def test_a_source_without_turns_drives_until_the_first_stop_only(rig) -> None:
    driver, arm, clock = rig
    assert drive(driver, arm, clock, 0)[0]
    driver.stop()
    assert driver.enable()[0]
    assert not drive(driver, arm, clock, 0)[0]


def test_re_enabling_an_enabled_arm_does_not_end_the_turn(rig) -> None:
    driver, arm, clock = rig
    assert drive(driver, arm, clock, 3)[0]
    assert driver.enable()[0]
    assert drive(driver, arm, clock, 3)[0]


def test_a_refused_turn_does_not_disturb_the_turn_that_drives(rig) -> None:
    driver, arm, clock = rig
    assert drive(driver, arm, clock, 1)[0]
    driver.stop()
    assert driver.enable()[0]
    for _ in range(3):  # the old stream and the new one interleave (a jog beside a node still streaming)
        assert driver.submit_action(MOVE, SOURCE_POLICY, 2).accepted
        assert not driver.submit_action(MOVE, SOURCE_POLICY, 1).accepted
        run_control_period(driver, clock)
    assert driver.mode is ArmMode.ENABLED and driver.counters["rejected_turn"] == 3


def test_older_turns_than_the_last_ended_are_over_even_if_never_seen() -> None:
    arbiter = SourceArbiter(SOURCE_POLICY)
    assert arbiter.admit_turn(SOURCE_POLICY, 50, True) is None
    arbiter.end_turns("a stop")
    assert arbiter.admit_turn(SOURCE_POLICY, 40, True) is not None  # started before the stop, first seen after
    assert arbiter.admit_turn(SOURCE_POLICY, 51, True) is None


def test_a_flood_of_turns_keeps_only_the_newest_open() -> None:
    arbiter = SourceArbiter(SOURCE_POLICY)
    for turn in range(1, 3 * OPEN_TURNS_KEPT):
        assert arbiter.admit_turn(SOURCE_POLICY, turn, True) is None
    assert arbiter.open_turns() == {SOURCE_POLICY: OPEN_TURNS_KEPT}
    assert "ended with newer turns of the same source" in arbiter.admit_turn(SOURCE_POLICY, 1, True)  # the oldest
    assert arbiter.admit_turn(SOURCE_POLICY, 3 * OPEN_TURNS_KEPT - 1, True) is None


def test_a_name_no_source_has_is_refused_and_nothing_is_kept_of_it() -> None:
    arbiter = SourceArbiter(SOURCE_POLICY)
    for k in range(100):
        assert arbiter.admit_turn(f"joystick{k}", 1, True) == f"'joystick{k}' is not an action source"
    assert arbiter.open_turns() == {} and arbiter._floor == {} and arbiter._open == {}


def test_a_switch_calls_back_once_and_only_on_a_change() -> None:
    calls: list[str] = []
    arbiter = SourceArbiter(SOURCE_POLICY, on_switch=lambda: calls.append(arbiter.active))
    arbiter.select(SOURCE_POLICY)
    arbiter.select(SOURCE_TELEOP)
    assert calls == [SOURCE_TELEOP]


def test_other_sources_keep_their_own_turns() -> None:
    arbiter = SourceArbiter(SOURCE_EXPERT)
    assert arbiter.admit_turn(SOURCE_EXPERT, 5, True) is None
    assert arbiter.admit_turn(SOURCE_POLICY, 9, True) is not None  # not active: ended for good
    arbiter.select(SOURCE_POLICY)
    assert arbiter.admit_turn(SOURCE_POLICY, 9, True) is not None
    assert arbiter.admit_turn(SOURCE_POLICY, 10, True) is None
    assert arbiter.admit_turn(SOURCE_EXPERT, 5, True) is not None  # the switch ended the expert's turn


# ---------------------------------------------------------------------------------------------- the property
turn_pick = st.sampled_from(["new", "same", "same", "old"])  # a source's new turns only grow (ros_msgs.new_turn)
valid = st.tuples(*[st.floats(-0.3, 0.3, allow_nan=False)] * 6, st.floats(-1.0, 1.0, allow_nan=False))
values = st.one_of(valid, valid, st.just((float("nan"),) * 7))
event = st.one_of(
    st.tuples(st.just("act"), st.tuples(st.sampled_from(ACTION_SOURCES), turn_pick, values), st.integers(0, 6)),
    st.tuples(st.sampled_from(["stop", "enable", "home", "fault", "clear", "reset"]), st.none(), st.integers(0, 8)),
    st.tuples(st.just("select"), st.sampled_from(ACTION_SOURCES), st.integers(0, 3)),
    st.tuples(st.just("wait"), st.none(), st.integers(1, 25)),
)


class Oracle:
    """What the rule says, from what happened: each stream's first action (when, and on what arm), and the stops."""

    def __init__(self, driver: ArmDriver) -> None:
        self.driver = driver
        self.ends = 0  # stops, homings, faults and switches so far
        self.first: dict[tuple[str, int], tuple[int, bool]] = {}  # stream -> (ends before it, started on the arm)
        self.latest: dict[str, list[int]] = {s: [] for s in ACTION_SOURCES}
        self.next_turn = 1
        self.drove_since_end = False  # an action of a started stream was accepted since the last end

    def end(self) -> None:
        self.ends += 1
        self.drove_since_end = False

    def started(self, source: str, turn: int) -> bool:
        ends, on_arm = self.first[(source, turn)]
        return on_arm and ends == self.ends

    def turn(self, source: str, pick: str, draw) -> int:
        turns = self.latest[source]
        if pick == "new" or not turns:
            self.next_turn += 1
            turns.append(self.next_turn)
            return self.next_turn
        return turns[-1] if pick == "same" else draw(st.sampled_from(turns))

    def send(self, source: str, turn: int, action) -> None:
        d = self.driver
        on_arm = d.mode in (ArmMode.ENABLED, ArmMode.HOLDING) and d.arbiter.active == source
        self.first.setdefault((source, turn), (self.ends, on_arm))
        result = d.submit_action(np.array(action), source, turn)
        if result.accepted:
            assert self.started(source, turn), f"{source} turn {turn} drove: it did not start on the enabled arm"
            self.drove_since_end = True
        elif self.started(source, turn) and d.arbiter.active == source:
            assert ENDED not in result.reason, f"{source} turn {turn} started on the enabled arm, refused: {result}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, max_size=30), st.data())
def test_the_arm_moves_only_within_a_turn_started_on_the_enabled_arm(events, data) -> None:
    clock = ManualClock()
    arm = IdealArm(clock)
    driver = ArmDriver(ArmConfig(), arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    oracle = Oracle(driver)

    def observed(call):
        """Run ``call``; a mode it entered that ends the turns counts as an end."""
        before = driver.mode
        out = call()
        if driver.mode is not before and driver.mode in (ArmMode.FAULT, ArmMode.HOMING):
            oracle.end()
        return out

    for kind, value, ticks in events:
        if kind == "act":
            source, pick, action = value
            turn = oracle.turn(source, pick, data.draw)
            observed(lambda s=source, t=turn, a=action: oracle.send(s, t, a))
        elif kind == "stop":
            driver.stop()
            oracle.end()
        elif kind == "select":
            if value != driver.arbiter.active:
                oracle.end()
            observed(lambda v=value: driver.select_source(v))
        elif kind in ("enable", "home", "reset"):
            observed(getattr(driver, {"reset": "reset_fault"}.get(kind, kind)))
        elif kind == "fault":
            arm.fault = "protective stop"
        elif kind == "clear":
            arm.fault = None
        for _ in range(ticks):
            q, mode = arm.q.copy(), driver.mode
            clock.t += driver.config.servo_period
            observed(driver.tick)
            moved = not np.array_equal(arm.q, q)
            if moved and ArmMode.HOMING not in (mode, driver.mode):
                assert oracle.drove_since_end, f"the arm moved in {mode.value} with no started stream since the end"
