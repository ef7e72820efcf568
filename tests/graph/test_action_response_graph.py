"""The action's meaning through the whole ROS graph: robosuite's measured response, replayed as actions.

tests/contract/test_action_response.py holds the arm driver against robosuite 1.4.0's OSC_POSE in one process;
here the same sequences go through DDS to aubo_bridge on the simulated workcell, paced by the wall
clock (sim_bridge.response_reference.reference_demo, replayed open loop by the demo_replay node), and
each sequence's TCP trajectory is compared with robosuite's. bench/sim_real.py runs all of them.

Through DDS an action now and then takes effect a servo tick early or late, so its predecessor holds the
arm for 4 or 6 servo ticks instead of 5 (docs/interfaces.md, "Arrival jitter"): how often depends on the
machine's load, and on a 13 mm impulse one such tick is a few points of error. So the test holds what the
code owns: the bridge reports the tick each action took effect on, and the graph's trajectory is the arm
driver's, in one process, on that same schedule; with the nominal schedule the driver is robosuite's
(test_action_response.py). The graph's own figures against robosuite are printed, the median held.
"""

from __future__ import annotations

import numpy as np
import pytest

from libero_workcell.libero_format import write_demo_file
from libero_workcell.task import TaskSpec
from sim_bridge.response_reference import load_reference, reference_demo, segment_errors, table
from sim_cell.replay import held_ticks, plan_from_demo, replay_in_process
from workcell.replay_run import replay_graph

pytestmark = [pytest.mark.ros, pytest.mark.slow]

# One of each kind: a step, a pulse, a constant along z, a rotation (bench/sim_real.py runs every sequence,
# the sinusoids and gripper events included; in one process tests/contract/test_action_response.py does).
SUBSET = ("hold_x_0.2", "impulse_x_1.0", "const_z_pos_0.3", "rot_rz_pos_0.1")
TOLERANCE = 0.05  # of each sequence's travel, as in one process (issue 26): for the typical (median) sequence
# Of travel: the graph's error against robosuite, and the driver's in one process on the graph's schedule.
# For the typical sequence they agree within a point (0.1-0.4 seen); the rest is the sim world pacing its
# physics on the wall clock, which the servo ticks do not record (one sequence 3.5-4 points off, seen in 1 run
# of 3 here).
SAME_SCHEDULE_TYPICAL = 0.01
SAME_SCHEDULE_WORST = 0.06


def ratio(e) -> float:
    return e.pos_ratio if e.compares_pos else e.rot_ratio


def test_through_the_graph_the_response_is_the_drivers_on_the_schedule_dds_delivered(tmp_path, ros_env) -> None:
    seqs = [s for s in load_reference() if s.name in SUBSET]
    demo, segments = reference_demo(seqs, TaskSpec.from_seed(0).to_json())
    path = write_demo_file(tmp_path / "reference.hdf5", [demo], {}, {})
    report = replay_graph(path, "", "open_loop", tmp_path / "out", ros_env, timeout=demo.num_samples / 20 + 120,
                          extra=["demo_replay.strip_frames:=0", "sim_world.pause_at_done:=false"])  # fmt: skip
    assert "error" not in report, report
    step = report["per_step"]
    ticks = np.array(step["servo_tick"])
    assert np.mean(ticks >= 0) > 0.99, ticks  # the bridge reported (nearly) every action
    plan = plan_from_demo(demo)
    held = held_ticks(ticks, plan.steps, 5)
    graph = segment_errors(segments, np.array(step["tcp_pos"]), np.array(step["tcp_rotvec"]))
    same = replay_in_process(plan, "open_loop", settle_time=0.0, servo_tick=ticks)
    on_schedule = segment_errors(segments, same.pos, same.rotvec)
    off = np.mean(held != 5)
    # (in one process, each action 5 ticks: tests/contract/test_action_response.py's table)
    print(f"through the graph ({off:.1%} of actions held the arm other than 5 servo ticks)\n{table(graph)}"
          f"\nin one process, on the graph's schedule\n{table(on_schedule)}")  # fmt: skip
    apart = {g.name: abs(ratio(g) - ratio(s)) for g, s in zip(graph, on_schedule, strict=True)}
    assert float(np.median(list(apart.values()))) <= SAME_SCHEDULE_TYPICAL, apart  # the graph adds its schedule
    assert max(apart.values()) <= SAME_SCHEDULE_WORST, apart
    assert float(np.median([ratio(g) for g in graph])) <= TOLERANCE, table(graph)
    assert sum(e.pos_travel for e in graph if e.compares_pos) > 0.1  # the sequences really moved the arm (123 mm)
