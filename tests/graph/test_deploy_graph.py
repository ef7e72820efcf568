"""Deploying on the simulated workcell through the whole graph (deploy_sim.launch.py's): policy_node queries
the local openpi server (the scripted expert's chunks over openpi's websocket protocol) at every control
step of the world, in lockstep on sim time, and the arm does the D2S task as source 'policy'."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest
from conftest import json_messages, ros_probe, wait_for

from libero_workcell.contract import Topics
from libero_workcell.loopback import free_port
from workcell import launch_presets
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_the_deployed_policy_drives_the_task_through_the_graph_without_pauses(tmp_path, ros_env) -> None:
    port, console = free_port(), free_port()
    timing = tmp_path / "policy_timing.jsonl"
    overrides = {**{k: str(v) for k, v in launch_presets.DEPLOY_SIM.items()}, "sim_link": f"deploy_{os.getpid()}",
                 "policy_port": str(port), "policy_url": f"ws://127.0.0.1:{port}", "policy_timing": str(timing),
                 "belt_speed": "0.03", "real_time_factor": "0", "console": "true",
                 "console_port": str(console)}  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=tmp_path / "logs")
    episodes: list[dict] = []
    try:
        with ros_probe("deploy_probe") as node:
            episodes = json_messages(node, Topics.SIM_EPISODE)
            done = wait_for(lambda: episodes and episodes[-1].get("done"), timeout=240.0, interval=0.2)
            graph.check()
            # the console's deployment panel, as the page reads it: the figures of the policy's steps
            state = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{console}/api/state", timeout=10).read())
    finally:
        codes = graph.stop(timeout=15)
    assert done, episodes[-1] if episodes else "no episode report"
    metrics = episodes[-1]["metrics"]
    # On sim time in lockstep the load of the machine changes nothing: the built-in expert places all three
    assert metrics["placed"] == [True, True, True] and metrics["SR"] == 1 and not metrics.get("aborted"), metrics
    assert not {n: c for n, c in codes.items() if c}, codes  # a node that crashed or had to be killed on stop
    panel = state["deployment"]
    assert "deployment" in state["jobs"] and state["policy"]["connected"] and panel["chunks"] > 50, panel
    assert 0 < panel["round_trip_p50_ms"] <= panel["round_trip_p99_ms"] and panel["holds"] == {}, panel
    assert state["arm"]["active_source"] == "policy" and state["faults"] == [], state["faults"]
    rows = [json.loads(line) for line in timing.read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    # openpi's start wait, then the policy at every step: with policy_latency 0 (LIBERO's protocol) the world
    # waits for each reply, so a chunk is always there and every observation is of its own step
    assert kinds[:10] == ["wait"] * 10 and set(kinds[10:]) == {"chunk"}, sorted(set(kinds))
    steady = kinds[10:]
    chunks = {r["chunk"] for r in rows if r["kind"] == "chunk"}
    assert len(chunks) >= len(steady) / 5  # chunk after chunk: replan_steps 5 of each at most
    assert all(r["obs_age_ms"] == 0 and r["delay_steps"] >= 0 for r in rows if r["kind"] == "chunk")
    # end to end, on sim time: the frames' render, the action on the wire, the arm bridge's first servo target
    chunked = [r for r in rows if r["kind"] == "chunk"]
    assert sum(r["servo_t"] is not None for r in chunked) >= 0.95 * len(chunked), chunked[-1]
    for r in chunked:
        if r["servo_t"] is not None:
            assert r["exposure_t"] <= r["sent_t"] <= r["servo_t"] and r["e2e_ms"] >= 0, r
            assert r["e2e_ms"] == pytest.approx((r["servo_t"] - r["exposure_t"]) * 1e3), r
