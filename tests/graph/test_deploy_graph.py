"""Deploying on the simulated workcell through the whole graph (deploy_sim.launch.py's): policy_node queries
the local openpi server (the scripted expert's chunks over openpi's websocket protocol) at every control
step of the world, in lockstep on sim time, and the arm does the D2S task as source 'policy'.

The episode is the suite's reference deploy run (tests/fixtures/expert_reference.py: made once per test run, with
the console on); each test here looks at it from one side."""

from __future__ import annotations

import json

import pytest
from expert_reference import DEPLOY_TIMING, deploy_run

pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory, ros_env):
    return deploy_run(tmp_path_factory, ros_env)


def test_the_deployed_policy_drives_the_task_through_the_graph_without_pauses(deployed) -> None:
    _, run = deployed
    episodes = run["episodes"]
    assert run["done"], episodes[-1] if episodes else "no episode report"
    metrics = episodes[-1]["metrics"]
    # On sim time in lockstep the load of the machine changes nothing: the built-in expert places all three
    assert metrics["placed"] == [True, True, True] and metrics["SR"] == 1 and not metrics.get("aborted"), metrics
    codes = run["codes"]
    # a node that crashed or had to be killed on stop (with the end of its log)
    assert not {n: c for n, c in codes.items() if c}, (codes, run["failed_logs"])


def test_the_consoles_deployment_panel_shows_the_policys_steps(deployed) -> None:
    """The console's deployment panel, as the page reads it once the episode ended: the figures of the policy's
    steps, the policy driving, no fault."""
    _, run = deployed
    assert run["done"], run["episodes"][-1:]
    state = run["console"]
    panel = state["deployment"]
    assert "deployment" in state["jobs"] and state["policy"]["connected"] and panel["chunks"] > 50, panel
    assert 0 < panel["round_trip_p50_ms"] <= panel["round_trip_p99_ms"] and panel["holds"] == {}, panel
    assert state["arm"]["active_source"] == "policy" and state["faults"] == [], state["faults"]


def test_the_policy_answers_every_step_of_its_own_observation(deployed) -> None:
    """The policy's timing rows (policy_timing): with policy_latency 0 (LIBERO's protocol) the world waits for each
    reply, so after openpi's start wait a chunk is always there and every observation is of its own step; end to
    end on sim time: the frames' render, the action on the wire, the arm bridge's first servo target."""
    folder, run = deployed
    assert run["done"], run["episodes"][-1:]
    rows = [json.loads(line) for line in (folder / DEPLOY_TIMING).read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    assert kinds[:10] == ["wait"] * 10 and set(kinds[10:]) == {"chunk"}, sorted(set(kinds))
    steady = kinds[10:]
    chunks = {r["chunk"] for r in rows if r["kind"] == "chunk"}
    assert len(chunks) >= len(steady) / 5  # chunk after chunk: replan_steps 5 of each at most
    assert all(r["obs_age_ms"] == 0 and r["delay_steps"] >= 0 for r in rows if r["kind"] == "chunk")
    chunked = [r for r in rows if r["kind"] == "chunk"]
    assert sum(r["servo_t"] is not None for r in chunked) >= 0.95 * len(chunked), chunked[-1]
    for r in chunked:
        if r["servo_t"] is not None:
            assert r["exposure_t"] <= r["sent_t"] <= r["servo_t"] and r["e2e_ms"] >= 0, r
            assert r["e2e_ms"] == pytest.approx((r["servo_t"] - r["exposure_t"]) * 1e3), r
