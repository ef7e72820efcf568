"""An evaluation run on the simulated workcell, as a user runs it: ``python -m evaluation sim``, two trials in
two worker processes (each its own deploy graph on its own DDS domain), the local policy server; then the same
trials on one warm graph, one after the other: every trial does the same, step for step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import cv2
import pytest

from evaluation.metrics import by_speed
from libero_workcell.libero_format import read_demos

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def evaluate(out, workers: int) -> list[str]:
    return [sys.executable, "-m", "evaluation", "sim", "--out", str(out), "--speeds", "0.05", "--trials-per-speed",
            "2", "--workers", str(workers), "--no-progress", "--checkpoint", "builtin:expert",
            "--set", "sim_world.arrival_interval:=9.0",  # a shorter schedule, for suite time
            "--preference", "keep_high"]  # fmt: skip


def same_answer(row: dict) -> dict:
    """What a trial did, without where and how long it ran."""
    return {k: row[k] for k in ("trial", "outcome", "sim_time", "world_horizon", "aborted", "rollout_digest")}


def test_a_sim_evaluation_writes_results_that_agree_with_the_worlds_predicates(tmp_path, ros_env) -> None:
    out = tmp_path / "eval"
    cmd = evaluate(out, 2)
    env = {k: v for k, v in ros_env.items() if k != "ROS_DOMAIN_ID"}  # the runner picks one per worker
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    trials = doc["trials"]
    assert [t["trial"]["index"] for t in trials] == [0, 1]
    assert doc["settings"]["checkpoint"] == "builtin:expert" and doc["settings"]["workers"] == 2
    assert doc["metrics"] == json.loads(json.dumps(by_speed(trials)))  # the metrics are the trials'
    for t in trials:
        rollout = read_demos(t["rollout"], images=True).demos[0]  # every rollout in the demo layout
        assert json.loads(rollout.attrs["placed"]) == t["outcome"]["placed"]  # the world's own predicate
        assert rollout.images["agentview_rgb"].shape[1:] == (256, 256, 3) and rollout.num_samples > 500
        assert rollout.attrs["combination"] == t["trial"]["combination"]
        assert abs(t["sim_time"] - t["world_horizon"]) < 1.0 or all(t["outcome"]["placed"])  # ran to the end
        rows = [json.loads(line) for line in Path(t["timing"]).read_text().splitlines()]
        assert sum(r["kind"] == "chunk" for r in rows) > 500
    assert "0.05 m/s" in run.stdout and "reach 1st / 2nd / 3rd" in run.stdout
    plot = cv2.imread(str(out / "results.png"))
    assert plot is not None and plot.std() > 10
    # Two workcells on these 2 cores: on sim time in lockstep the load slows them down and changes nothing. The
    # built-in expert places every workpiece of both trials, as one workcell alone does
    # (tests/graph/test_deploy_graph.py).
    assert [t["outcome"]["placed"] for t in trials] == [[True, True, True]] * 2
    assert not any(t["aborted"] for t in trials)

    # The preference: asked of every trial, stored with each rollout with its satisfaction curve, and scored from
    # what the robot did (the built-in expert does not read prompts: whatever it scores is measured, not set)
    prefs = doc["preferences"]
    assert prefs["overall"]["N"] == 2 and prefs["unscored_trials"] == []
    labels = [e["label"] for e in prefs["episodes"]]
    successes = [all(t["outcome"]["placed"]) for t in trials]
    assert prefs["overall"]["SA_all_preferences"] == pytest.approx(
        sum(s * d for s, d in zip(successes, labels, strict=True)) / 2)  # fmt: skip
    assert [e["success"] for e in prefs["episodes"]] == successes
    for t in trials:
        rollout = read_demos(t["rollout"]).demos[0]
        assert rollout.attrs["preference"] == "keep the gripper high during lateral moves"
        assert rollout.satisfaction is not None and rollout.satisfaction.shape == (rollout.num_samples, 1)
    assert (out / "preferences" / "report.html").is_file() and "SA" in run.stdout

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)  # a rerun resumes: done
    assert again.returncode == 0 and json.loads((out / "results.json").read_text())["trials"] == trials
    assert len(os.listdir(out / "workers")) == 2  # one graph per worker, and no trial ran again

    # One warm graph: trial 1 is the graph's second episode, after another task (trial 0's), where above it was
    # a fresh graph's first; it does the same, step for step, and so does trial 0
    assert all(t["worker"]["trial_on_graph"] == 1 for t in trials)
    warm = tmp_path / "warm"
    run = subprocess.run(evaluate(warm, 1), env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = json.loads((warm / "results.json").read_text())["trials"]
    assert [(t["worker"]["graph"], t["worker"]["trial_on_graph"]) for t in rows] == [(1, 1), (1, 2)]
    assert [same_answer(t) for t in rows] == [same_answer(t) for t in trials]
    assert len(os.listdir(warm / "workers")) == 1
    timing = [json.loads(line) for line in Path(rows[1]["timing"]).read_text().splitlines()]
    assert {r["episode"] for r in timing} == {rows[1]["worker"]["trial_on_graph"]}  # the second episode's records
