"""The preference catalogue, metrics, labels and SR/SA on trajectories with known properties (no simulation)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from preference_trajectories import HZ, TASK, pick_place

from libero_workcell.contract import PREFERENCE_PROMPT_TEMPLATE
from libero_workcell.task import WORKPIECE_CATALOG, TaskSpec
from policy_node.clients.openpi_ws.adapter import openpi_observation
from policy_node.config import PolicyConfig, PolicyConfigError
from policy_node.observation import Snapshot
from preferences.catalogue import Catalogue, PreferenceError
from preferences.labels import LABELS, Calibration, calibrate
from preferences.metrics import METRICS, satisfaction_curve
from preferences.scoring import EpisodeScore, PreferenceScore, sa, score, summarize
from preferences.segment import subtasks
from preferences.trajectory import Trajectory

CAT = Catalogue.load()






def value(traj, spec):
    p = CAT.preference(spec)
    return float(satisfaction_curve(traj, p.metric, p.params, CAT.named)[-1])


# ---- catalogue ----------------------------------------------------------------------------------
def test_the_catalogue_has_every_type_and_each_entry_a_metric_and_language():
    types = {d.type for d in CAT.definitions.values()}
    assert types == {"motion", "skill", "user_profile"}
    assert all(d.metric in METRICS and d.language for d in CAT.definitions.values())
    assert {frozenset(("keep_low", "keep_high"))} <= CAT.conflicts and CAT.combinations


@pytest.mark.parametrize("spec, words", [
    ("place gently", "only catalogued preferences"),
    ("keep_high:height=0.9", "does not fit the workcell"),
    ("slot_for:slot=fourth", "no such slot"),
    ("first_workpiece:workpiece=widget", "no such workpiece"),
    ("keep_clear:region=ceiling", "no such region"),
    ("grasp_part:side=top", "not a parameter"),
    ("speed_up+keep_low", "neither a declared combination nor a declared conflict"),
    ("speed_up+smooth_motion+keep_low", "at most two"),
])  # fmt: skip
def test_a_preference_that_cannot_be_scored_or_does_not_fit_is_refused_clearly(spec, words):
    with pytest.raises(PreferenceError, match=words):
        CAT.condition(spec)
    with pytest.raises(PolicyConfigError, match=words):
        PolicyConfig(preference=spec)


def test_a_catalogue_entry_without_a_metric_is_refused_at_load():
    raw = {"format": "libero_workcell.preferences/1", "preferences": {"tidy": {"type": "motion", "language": "x"}}}
    with pytest.raises(PreferenceError, match="no metric"):
        Catalogue.from_dict(raw)
    raw["preferences"]["tidy"]["metric"] = "tidiness"
    with pytest.raises(PreferenceError, match="unknown metric"):
        Catalogue.from_dict(raw)


def test_a_preference_must_fit_the_task():
    ordered = TaskSpec.from_seed(0)
    with pytest.raises(PreferenceError, match="slot_rule 'free'"):
        CAT.condition(f"slot_for:workpiece={ordered.workpieces[0]}").apply(ordered)
    with pytest.raises(PreferenceError, match="workpieces are"):
        CAT.condition("first_workpiece:workpiece=terminal_block").apply(TASK)


def test_the_policy_nodes_prompt_is_the_template_byte_for_byte():
    cfg = PolicyConfig(preference="speed_up+vertical_approach")
    img = np.zeros((8, 8, 3), np.uint8)
    snap = Snapshot(np.zeros(7), 0.0, img, 0.0, img, 0.0)
    task = "pick up the red gear blank and place it in the tray"
    prompt = openpi_observation(snap, cfg.image_view, cfg.state_format, task, cfg.preference_text)["prompt"]
    expected = ("Task: pick up the red gear blank and place it in the tray. "
                "Preference: speed up and approach each workpiece vertically when grasping it.")  # fmt: skip
    assert prompt.encode() == expected.encode()
    assert prompt == PREFERENCE_PROMPT_TEMPLATE.format(task=task, preference=cfg.preference_text)
    assert openpi_observation(snap, cfg.image_view, cfg.state_format, task, "")["prompt"] == task


# ---- metrics on trajectories with known properties --------------------------------------------------
def test_segmentation_finds_each_carry_and_names_its_workpiece_by_the_finger_gap():
    traj = pick_place(order=(1, 0))
    segs = subtasks(traj)
    assert [s.workpiece for s in segs] == [1, 0]
    assert all(s.release is not None and s.start < s.grasp < s.release for s in segs)
    empty = pick_place()
    empty = Trajectory(empty.tcp_pos, empty.tcp_rotvec, empty.grip_command,
                       np.where(empty.grip_command > 0, 1.0, 0.0), TASK, True, HZ)  # fmt: skip
    assert subtasks(empty) == []  # the fingers closed on nothing: nothing was carried


def test_each_metric_reads_the_property_the_trajectory_was_built_with():
    assert value(pick_place(height=0.30), "keep_high") == pytest.approx(0.30, abs=0.01)
    assert value(pick_place(height=0.15), "keep_low") == pytest.approx(0.15, abs=0.01)
    assert value(pick_place(sag=0.0), "straight_carry") == pytest.approx(0.0, abs=1e-3)
    assert value(pick_place(sag=0.08), "straight_carry") == pytest.approx(0.08, abs=0.003)
    assert value(pick_place(yaw=0.6), "no_rotation") == pytest.approx(0.6, abs=0.02)
    assert value(pick_place(yaw=0.0), "no_rotation") == pytest.approx(0.0, abs=1e-6)
    assert value(pick_place(approach_deg=0.0), "vertical_approach") == pytest.approx(0.0, abs=0.5)
    assert value(pick_place(approach_deg=40.0), "vertical_approach") == pytest.approx(40.0, abs=1.0)
    assert value(pick_place(drop=0.03), "gentle_release") == pytest.approx(0.03, abs=1e-3)
    assert value(pick_place(drop=0.004), "gentle_release") == pytest.approx(0.004, abs=1e-3)
    top = [(0.85 - 0.5) * WORKPIECE_CATALOG[w].size[2] for w in TASK.workpieces]
    assert value(pick_place(grasp_dz=0.0), "grasp_part") == pytest.approx(np.mean(top), abs=1e-3)
    # the clearance is the path's nearest approach to the base column, less its radius
    traj = pick_place()
    expected = np.min(np.linalg.norm(traj.tcp_pos[:, :2], axis=1)) - CAT.regions["robot_base"]["radius"]
    assert value(traj, "keep_clear") == pytest.approx(expected)
    # time per subtask: from setting off to the release, the moves' steps (within the few still steps between
    # one straight move and the next)
    moves = (20 + 10 + 16 + 8 + 10 + 40 + 16 + 6) / HZ
    assert value(pick_place(), "speed_up") == pytest.approx(moves, abs=0.3)



def test_the_acceleration_is_the_rms_of_a_known_motion():
    t = np.arange(100) / HZ
    a = 0.8
    pos = np.stack([0.5 * a * t**2, np.zeros_like(t), np.full_like(t, 0.2)], axis=1)
    traj = Trajectory(pos, np.zeros((100, 3)), -np.ones(100), np.zeros(100), TASK, True, HZ)
    assert value(traj, "smooth_motion") == pytest.approx(a, rel=1e-6)


def test_user_profiles_read_which_workpiece_came_first_and_where_it_went():
    second_first = pick_place(order=(1, 0), slots=(2, 0))
    assert value(second_first, "first_workpiece:workpiece=valve_block") == 1.0
    assert value(second_first, "first_workpiece:workpiece=gear_blank") == 0.0
    assert value(second_first, "slot_for:workpiece=valve_block,slot=right") == 1.0
    assert value(second_first, "slot_for:workpiece=gear_blank,slot=right") == 0.0
    assert value(second_first, "slot_for:workpiece=gear_blank,slot=left") == 1.0


def test_the_curve_is_the_score_on_the_trace_so_far():
    traj = pick_place(height=0.30)
    p = CAT.preference("no_rotation")
    curve = satisfaction_curve(traj, p.metric, p.params, CAT.named)
    first_release = subtasks(traj)[0].release
    assert np.all(np.isnan(curve[:first_release])) and np.isfinite(curve[first_release:]).all()
    for k in (first_release + 5, len(curve) - 1):  # re-evaluated on the prefix, the curve's value
        prefix = Trajectory(traj.tcp_pos[: k + 1], traj.tcp_rotvec[: k + 1], traj.grip_command[: k + 1],
                            traj.gripper_coord[: k + 1], TASK, True, HZ)  # fmt: skip
        assert satisfaction_curve(prefix, p.metric, p.params, CAT.named)[-1] == pytest.approx(curve[k])


# ---- labels ------------------------------------------------------------------------------------------
def test_the_stored_bins_are_reproduced_from_the_stored_calibration_statistics():
    cal = Calibration.load()
    assert set(cal.statistics) == set(cal.bins) and cal.calibration_set["seeds"]
    for key, values in cal.statistics.items():
        b = cal.bins[key]
        again = calibrate(key, b.metric, b.better, values, METRICS[b.metric].resolution)
        assert again == b
    assert Calibration.from_json(cal.to_json()).bins == cal.bins


def test_labels_step_at_one_two_and_three_spreads_in_the_better_direction():
    b = calibrate("k", "lateral_height", "lower", [0.20, 0.21, 0.22, 0.23, 0.24], 0.01)
    assert b.median == pytest.approx(0.22) and b.spread == pytest.approx(1.4826 * 0.01)
    s = b.spread
    assert [b.label(0.22 - k * s - 1e-9) for k in (0, 1, 2, 3)] == [0.0, 0.25, 0.75, 1.0]
    assert b.label(0.22 - 0.999 * s) == 0.0 and b.label(0.5) == 0.0 and np.isnan(b.label(float("nan")))
    floor = calibrate("k", "lateral_height", "higher", [0.2, 0.2, 0.2], 0.01)
    assert floor.spread == 0.01 and floor.label(0.231) == 1.0 and floor.label(0.215) == 0.25


@given(st.lists(st.floats(-10, 10), min_size=3, max_size=30), st.floats(1e-3, 1.0), st.floats(-20, 20),
       st.floats(-20, 20), st.sampled_from(["lower", "higher"]))  # fmt: skip
def test_labels_are_monotone_in_the_better_direction_and_in_the_label_set(values, res, x, y, better):
    b = calibrate("k", "m", better, values, res)
    assert b.label(x) in LABELS and b.label(y) in LABELS
    lo, hi = sorted((x, y))
    if better == "higher":
        assert b.label(lo) <= b.label(hi)
    else:
        assert b.label(lo) >= b.label(hi)
    assert b.label(b.median) == 0.0  # what the robot does unasked is not satisfaction


# ---- SR and SA ------------------------------------------------------------------------------------------
def ep(success, kind, labels, ids=("a", "b")):
    scores = tuple(PreferenceScore(i, i, "motion", "m", 0.0, d, np.zeros(1)) for i, d in zip(ids, labels, strict=False))
    fake = EpisodeScore("e", success, kind, "+".join(ids[: len(labels)]), scores, float("nan"))
    d = min(labels) if kind == "composition" else max(labels)
    followed = None
    if kind == "conflict":
        followed = "neither" if d == 0 else "both" if labels[0] == labels[1] else ids[int(labels[1] > labels[0])]
    return EpisodeScore(fake.name, success, kind, fake.condition, scores, d, followed)


def test_sa_is_the_formula_with_failed_episodes_adding_zero():
    single = [ep(True, "single", [1.0]), ep(True, "single", [0.25]), ep(False, "single", [1.0]),
              ep(True, "single", [0.75])]
    assert sa(single) == pytest.approx((1.0 + 0.25 + 0.0 + 0.75) / 4)
    comp = [ep(True, "composition", [1.0, 0.25]), ep(True, "composition", [0.75, 0.75]),
            ep(False, "composition", [1, 1])]
    assert sa(comp) == pytest.approx((0.25 + 0.75 + 0) / 3)
    conf = [ep(True, "conflict", [1.0, 0.0]), ep(True, "conflict", [0.0, 0.75]), ep(True, "conflict", [0.0, 0.0]),
            ep(False, "conflict", [1.0, 0.0])]  # fmt: skip
    assert sa(conf) == pytest.approx((1.0 + 0.75 + 0 + 0) / 4)
    row = next(r for r in summarize(conf)["conditions"] if r["kind"] == "conflict")
    assert row["followed"] == {"a": 2, "b": 1, "both": 0, "neither": 1}
    assert row["sides"] == {"a": pytest.approx(1 / 4), "b": pytest.approx(0.75 / 4)}
    assert row["pref_dom"] == pytest.approx(1 / 4) and row["SR"] == 0.75


def test_score_takes_the_smaller_label_for_a_composition_and_the_larger_for_a_conflict():
    cal = Calibration.load()
    traj = pick_place(height=0.34)  # high: keep_high satisfied, keep_low not
    conflict = score(traj, CAT.condition("keep_low+keep_high"), CAT, cal)
    assert conflict.kind == "conflict" and conflict.followed == "keep_high" and conflict.label == 1.0
    assert [s.label for s in conflict.scores] == [0.0, 1.0]
    comp = score(traj, CAT.condition("keep_high+gentle_release"), CAT, cal)
    assert comp.kind == "composition" and comp.label == min(s.label for s in comp.scores)
    assert json.loads(json.dumps(comp.to_dict()))["condition"] == "keep_high+gentle_release"
