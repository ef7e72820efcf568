"""Sim-in-the-loop replay through the whole ROS graph: ``workcell replay`` / ``sim_replay.launch.py``.

Every node its own process on loopback DDS, on sim time in lockstep: the recorded demo is replayed as source
``policy``, and the report, the strip and the exit codes are what a lab sees.
"""

from __future__ import annotations

import json
import math
import re

import cv2
import numpy as np
import pytest
from conftest import ros_probe
from replay_fixtures import followable_demo_file

from libero_workcell.contract import Qos, Topics
from libero_workcell.demo_reading import placed_of
from libero_workcell.libero_format import read_demos, read_frames
from libero_workcell.ros_qos import qos
from sim_cell.replay import load_plan, replay_in_process
from workcell.bringup import Graph
from workcell.launcher import NodeDiedError, launch
from workcell.replay_run import REPORT_FILE, describe, replay_graph, replay_overrides

pytestmark = [pytest.mark.ros, pytest.mark.slow]
STEPS = 160  # of the open-loop replay: 8 s, the arm on its way to the first workpiece


@pytest.fixture(scope="module")
def demo_file(tmp_path_factory):
    """One demo for every test here: the expert at the speed the closed-loop law follows, both cameras rendered, to
    its first workpiece placed."""
    return followable_demo_file(tmp_path_factory.mktemp("replay_graph"))


def test_open_loop_replay_through_the_graph_reports_tracking_outcome_and_strip(demo_file, tmp_path, ros_env,
                                                                             capsys) -> None:  # fmt: skip
    """The first STEPS steps (for suite time; closed loop, below, replays the whole demo, its pick and place)."""
    from std_msgs.msg import String

    demo = read_demos(demo_file).demos[0]
    statuses: list[dict] = []  # /replay/status, as the operator's console receives it
    with ros_probe("replay_status") as node:
        node.create_subscription(String, Topics.REPLAY_STATUS, lambda m: statuses.append(json.loads(m.data)),
                                 qos(Qos.LATCHED))  # fmt: skip
        report = replay_graph(demo_file, "", "open_loop", tmp_path, ros_env, timeout=STEPS / 20 + 120,
                              extra=[f"demo_replay.max_steps:={STEPS}"])  # fmt: skip
    assert "error" not in report, report
    steps = [s["step"] for s in statuses if not s["done"]]
    assert len(steps) >= 10 and steps == sorted(set(steps)), steps  # counting up (latched, depth 1: some are skipped)
    assert all(s["steps"] == STEPS and s["mode"] == "open_loop" and s["demo"] == demo.name for s in statuses)
    for s in statuses:
        assert all(math.isfinite(s[k]) for k in ("pos_err_rms_mm", "pos_err_max_mm", "rot_err_rms_deg")), s
    final = statuses[-1]
    assert final["done"] and final["step"] == STEPS and final["outcome"] == report["outcome"]
    assert final["pos_err_max_mm"] == report["tracking"]["pos_max_m"] * 1e3
    err = capsys.readouterr().err  # the progress: every node up, then every step replayed
    assert re.search(r"^nodes up: 100%.* (\d+)/\1 ", err, re.M) and re.search(rf"^replaying: 100%.* {STEPS}/{STEPS} ",
                                                                               err, re.M), err  # fmt: skip
    assert report["steps"] == STEPS and report["demo_steps"] == demo.num_samples and report["mode"] == "open_loop"
    outcome = report["outcome"]
    assert outcome["recorded_placed"] == placed_of(demo.attrs) and any(placed_of(demo.attrs))
    assert len(outcome["replayed_placed"]) == 3
    assert outcome["same"] is (outcome["replayed_placed"] == outcome["recorded_placed"])
    # Open loop in lockstep: the demo (recorded in one process, sim time) is given back exactly, path and frames
    assert report["tracking"]["pos_max_m"] < 1e-9 and report["tracking"]["rot_max_deg"] < 1e-6, report["tracking"]
    ticks = report["per_step"]["servo_tick"]
    assert len(ticks) == STEPS and np.all(np.diff(ticks) == 5)
    assert json.loads((tmp_path / REPORT_FILE).read_text()) == report
    print(describe(report))

    strip = cv2.cvtColor(cv2.imread(report["strip"]), cv2.COLOR_BGR2RGB)
    steps = report["strip_steps"]
    assert steps[0] == 0 and steps[-1] == STEPS - 1 and len(steps) == 6
    assert strip.shape == (2 * (2 * 256 + 4) + 8, 6 * 260 - 4, 3)
    recorded = read_frames(demo_file, demo.name, "agentview_rgb", steps)
    for i, step in enumerate(steps):  # the top row is the recorded external view, upright
        cell = strip[:256, i * 260 : i * 260 + 256]
        np.testing.assert_array_equal(cell, recorded[i][::-1], err_msg=f"strip column {i} (step {step})")
    for i in range(len(steps)):  # the replayed row: the same frames, re-rendered
        np.testing.assert_array_equal(strip[260:516, i * 260 : i * 260 + 256], recorded[i][::-1])


def test_closed_loop_replay_through_the_graph_keeps_the_outcome(demo_file, tmp_path, ros_env) -> None:
    """Closed loop on a demo the law can follow (0.18 m/s), the whole demo (a first pick and place): through the
    graph it tracks within a few mm and keeps the recorded outcome, and in lockstep it is the replay in one process,
    step for step. (The default expert's 0.45 m/s leaves the follower 20-30 mm behind; docs/simulation.md.)"""
    steps = read_demos(demo_file).demos[0].num_samples
    report = replay_graph(demo_file, "demo_0", "closed_loop", tmp_path, ros_env, timeout=steps / 20 + 120,
                          extra=["demo_replay.strip_frames:=0"])  # fmt: skip
    assert "error" not in report, report
    assert report["steps"] == steps and report["strip"] is None
    print(describe(report))
    assert report["tracking"]["pos_rms_m"] < 0.015 and report["tracking"]["rot_rms_deg"] < 2.0, report["tracking"]
    assert any(report["outcome"]["recorded_placed"]), report["outcome"]  # something to keep
    assert report["outcome"]["same"] is True, report["outcome"]
    local = replay_in_process(load_plan(demo_file, "demo_0"), "closed_loop")
    np.testing.assert_array_equal(np.array(report["per_step"]["tcp_pos"]), local.pos)


def test_a_bad_demo_path_stops_the_replay_with_the_reason(tmp_path, ros_env) -> None:
    with pytest.raises(FileNotFoundError, match="no such demo file"):
        replay_graph(tmp_path / "missing.hdf5", "", "open_loop", tmp_path, ros_env, timeout=30)
    nodes = [n for n in Graph.load().resolve(replay_overrides(tmp_path / "missing.hdf5", "", "open_loop", tmp_path))
             if n.name == "demo_replay"]  # fmt: skip
    running = launch(nodes, env=ros_env, log_dir=tmp_path)
    exits = running.wait(timeout=60)
    assert [(e.name, e.returncode) for e in exits] == [("demo_replay", 2)]
    assert "missing.hdf5: no such file" in "\n".join(exits[0].tail)


def test_replay_refuses_the_physical_workcell(demo_file, tmp_path, ros_env) -> None:
    overrides = replay_overrides(demo_file, "", "open_loop", tmp_path, ["use_sim:=false"])
    nodes = [n for n in Graph.load().resolve(overrides) if n.name == "demo_replay"]
    exits = launch(nodes, env=ros_env, log_dir=tmp_path).wait(timeout=60)
    assert [(e.name, e.returncode) for e in exits] == [("demo_replay", 2)]
    assert "simulated workcell only" in "\n".join(exits[0].tail)


def test_a_node_dying_during_replay_is_reported(demo_file, tmp_path, ros_env) -> None:
    """A graph that cannot run (here: a bad arm parameter) fails loudly, never waits for the timeout."""
    with pytest.raises(NodeDiedError, match="aubo_bridge"):
        replay_graph(demo_file, "", "open_loop", tmp_path, ros_env, timeout=120, extra=["aubo_bridge.servo_hz:=-5"])
