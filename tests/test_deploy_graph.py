"""Deploying on the simulated workcell through the whole graph (deploy_sim.launch.py's): policy_node queries
the local openpi server (the scripted expert's chunks over openpi's websocket protocol) at 20 Hz, and the
arm does the D2S task as source 'policy'."""

from __future__ import annotations

import json
import os

import pytest
from conftest import ros_probe, wait_for

from libero_workcell import launch_presets
from libero_workcell.bringup import Graph
from libero_workcell.contract import Qos, Topics
from libero_workcell.launcher import launch
from libero_workcell.loopback import free_port
from libero_workcell.ros_qos import qos

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_the_deployed_policy_drives_the_task_through_the_graph_without_pauses(tmp_path, ros_env) -> None:
    from std_msgs.msg import String

    port = free_port()
    timing = tmp_path / "policy_timing.jsonl"
    overrides = {**{k: str(v) for k, v in launch_presets.DEPLOY_SIM.items()}, "sim_link": f"deploy_{os.getpid()}",
                 "policy_port": str(port), "policy_url": f"ws://127.0.0.1:{port}", "policy_timing": str(timing),
                 "belt_speed": "0.03"}  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=tmp_path / "logs")
    episodes: list[dict] = []
    try:
        with ros_probe("deploy_probe") as node:
            node.create_subscription(String, Topics.SIM_EPISODE, lambda m: episodes.append(json.loads(m.data)),
                                     qos(Qos.LATCHED))  # fmt: skip
            done = wait_for(lambda: episodes and episodes[-1].get("done"), timeout=90.0, interval=0.2)
            graph.check()
    finally:
        codes = graph.stop(timeout=15)
    assert done, episodes[-1] if episodes else "no episode report"
    metrics = episodes[-1]["metrics"]
    # The built-in expert through chunks placed 3 of 3 in 2 of 4 graph runs seen here; in the others the third
    # placement raced the horizon (placed at 42.85 s of 43, 0.03 m/s) or the load (0.05 m/s, full suite).
    assert sum(metrics["placed"]) >= 2 and metrics["PCR_T"] == sum(metrics["placed"]) / 3, metrics
    assert all(c == 0 for c in codes.values()), codes
    rows = [json.loads(line) for line in timing.read_text().splitlines()]
    kinds = [r["kind"] for r in rows]
    first = kinds.index("chunk")
    assert kinds[:10] == ["wait"] * 10  # openpi's start wait, then the policy: as soon as both cameras are fresh
    assert set(kinds[10:first]) <= {"stale_obs", "no_chunk"}
    steady = kinds[first:]
    # Prefetching: a chunk is (nearly) always there. A step with an observation older than max_obs_age holds
    # instead, as it must (44 of 860 steps in one run under the full suite's load; none when it runs alone).
    assert steady.count("no_chunk") <= 0.01 * len(steady), sorted(set(steady))
    assert steady.count("chunk") >= 0.9 * len(steady) and set(steady) <= {"chunk", "no_chunk", "stale_obs"}
    chunks = {r["chunk"] for r in rows if r["kind"] == "chunk"}
    assert len(chunks) > len(steady) / 5  # chunk after chunk: replan_steps 5 of each at most
    assert all(r["obs_age_ms"] < 150 for r in rows if r["kind"] == "chunk")
