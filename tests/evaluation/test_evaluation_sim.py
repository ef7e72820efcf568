"""An evaluation run on the simulated workcell, as a user runs it: ``python -m evaluation sim``, two trials in
two worker processes (each its own deploy graph on its own DDS domain), the local policy server; then the same
trials on one warm graph, one after the other, and as Ray actors on a two-node cluster with one actor killed
mid-trial: every trial does the same, step for step, at any scale.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from conftest import wait_for

from evaluation.metrics import by_speed
from libero_workcell.libero_format import read_demos

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def evaluate(out, *where: str) -> list[str]:
    return [sys.executable, "-m", "evaluation", "sim", "--out", str(out), "--speeds", "0.05", "--trials-per-speed",
            "2", *where, "--no-progress", "--checkpoint", "builtin:expert",
            "--set", "sim_world.arrival_interval:=9.0",  # a shorter schedule, for suite time
            "--preference", "keep_high"]  # fmt: skip


def same_answer(row: dict) -> dict:
    """What a trial did, without where and how long it ran."""
    return {k: row[k] for k in ("trial", "outcome", "sim_time", "world_horizon", "aborted", "rollout_digest")}


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, ros_env) -> tuple[Path, list[str], dict, subprocess.CompletedProcess]:
    """Two trials, two workers: each trial its graph's first (the folder, the command, its env, the run)."""
    out = tmp_path_factory.mktemp("eval") / "eval"
    cmd = evaluate(out, "--workers", "2", "--console", "0")  # the progress page too (on a port of its own)
    env = {k: v for k, v in ros_env.items() if k != "ROS_DOMAIN_ID"}  # the workers claim one each
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return out, cmd, env, run


def test_a_sim_evaluation_writes_results_that_agree_with_the_worlds_predicates(local_run) -> None:
    out, cmd, env, run = local_run
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
    assert re.search(r"^evaluation: progress at http://127\.0\.0\.1:\d+$", run.stdout, re.M), run.stdout[:500]
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



def test_on_one_warm_graph_a_trial_does_what_it_does_on_a_fresh_one(local_run, tmp_path) -> None:
    """Trial 1 is the graph's second episode, after another task (trial 0's), where in the local run it was a
    fresh graph's first; it does the same, step for step, and so does trial 0."""
    out, _cmd, env, _run = local_run
    trials = json.loads((out / "results.json").read_text())["trials"]
    assert all(t["worker"]["trial_on_graph"] == 1 for t in trials)
    warm = tmp_path / "warm"
    run = subprocess.run(evaluate(warm, "--workers", "1"), env=env, capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    rows = json.loads((warm / "results.json").read_text())["trials"]
    assert [(t["worker"]["graph"], t["worker"]["trial_on_graph"]) for t in rows] == [(1, 1), (1, 2)]
    assert [same_answer(t) for t in rows] == [same_answer(t) for t in trials]
    assert len(os.listdir(warm / "workers")) == 1
    timing = [json.loads(line) for line in Path(rows[1]["timing"]).read_text().splitlines()]
    assert {r["episode"] for r in timing} == {rows[1]["worker"]["trial_on_graph"]}  # the second episode's records


def test_on_a_ray_cluster_the_trials_do_the_same_and_an_actor_killed_mid_trial_costs_one_attempt(
    local_run, tmp_path, ray_cluster
) -> None:
    """``--ray ADDRESS`` on a two-node cluster on this machine: the same rows as the local runner's (what each trial
    did, step for step); an actor killed with SIGKILL in the middle of its trial fails that attempt only (the trial
    runs again on a new actor, the killed actor's graph ends with it); a rerun repeats nothing."""
    out, _cmd, _env, _run = local_run
    local = json.loads((out / "results.json").read_text())["trials"]
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}  # with the cluster's token (RAY_AUTH_*)
    ray_out = tmp_path / "ray"
    cmd = evaluate(ray_out, "--ray", ray_cluster)  # an actor per CPU: one on each node
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def mid_trial() -> Path | None:  # an actor's graph, some way into its episode
            for timing in ray_out.glob("workers/*/timing.jsonl"):
                if timing.stat().st_size and len(timing.read_text().splitlines()) > 200:
                    return timing.parent
            return None

        assert wait_for(lambda: mid_trial() or proc.poll() is not None, timeout=300, interval=0.2)
        session = mid_trial()
        assert session is not None, "no actor got into its trial: " + "".join(proc.communicate()[1:])[-2000:]
        actor_pid = int(session.name.split("-")[-2])  # workers/<host>-<pid>-<graph>: the actor's process
        os.kill(actor_pid, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-2000:]
    rows = json.loads((ray_out / "results.json").read_text())["trials"]
    assert [same_answer(t) for t in rows] == [same_answer(t) for t in local]
    assert doc_setting(ray_out, "ray") == ray_cluster
    retried = [t for t in rows if t.get("retried")]
    assert len(retried) == 1 and retried[0]["retried"][0].startswith("RayActorError: the trial's actor died")
    assert "again on a fresh worker" in stderr
    assert wait_for(lambda: not processes_of(session), timeout=30), "the killed actor's graph outlived it"

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)  # a rerun resumes: done
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert len((ray_out / "results.jsonl").read_text().splitlines()) == 2  # no trial ran again


def doc_setting(out: Path, key: str):
    return json.loads((out / "results.json").read_text())["settings"][key]


def processes_of(session: Path) -> list[int]:
    """The processes whose command line names ``session`` (a graph's nodes: their parameter files are there)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if str(session) in cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found
