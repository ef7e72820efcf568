"""The action's meaning through the whole ROS graph: robosuite's measured response, replayed as actions.

tests/test_action_response.py holds the arm driver against robosuite 1.4.0's OSC_POSE in one process;
here the same sequences go through DDS to aubo_bridge on the simulated workcell, paced by the wall
clock (sim_bridge.response_reference.reference_demo, replayed open loop by the demo_replay node), and
each sequence's TCP trajectory is compared with robosuite's. bench/sim_real.py runs all of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from libero_workcell.libero_format import write_demo_file
from libero_workcell.replay_run import replay_graph
from libero_workcell.task import TaskSpec
from sim_bridge.replay import plan_from_demo, replay_in_process
from sim_bridge.response_reference import load_reference, reference_demo, segment_errors, table

pytestmark = [pytest.mark.ros, pytest.mark.slow]

# One of each kind (step, pulse, constant along z, sinusoid, rotation, translation with gripper events).
SUBSET = ("hold_x_0.2", "impulse_x_1.0", "const_z_pos_0.3", "sine_x_0.3_1hz", "rot_rz_pos_0.1",
          "gripper_close_while_x_0.2")  # fmt: skip
TOLERANCE = 0.10  # of each sequence's travel, as in one process: for the typical (median) sequence
# Through DDS an action now and then lands more than a servo tick late and its predecessor is tracked a tick
# longer (docs/interfaces.md, "Arrival jitter"): on the impulse (13 mm of travel) that alone is ~2 points.
# Seen through the graph on these machines: 9-12 % for the impulse, one constant at 13.5 % in one run.
WORST = 0.15


def test_the_response_through_the_graph_matches_robosuite(tmp_path, ros_env) -> None:
    seqs = [s for s in load_reference() if s.name in SUBSET]
    spec = TaskSpec.from_seed(0)
    demo, segments = reference_demo(seqs, spec.to_json())
    path = write_demo_file(tmp_path / "reference.hdf5", [demo], {}, {})
    report = replay_graph(path, "", "open_loop", tmp_path / "out", ros_env, timeout=demo.num_samples / 20 + 120,
                          extra=["demo_replay.strip_frames:=0", "sim_world.pause_at_done:=false"])  # fmt: skip
    assert "error" not in report, report
    step = report["per_step"]
    graph = segment_errors(segments, np.array(step["tcp_pos"]), np.array(step["tcp_rotvec"]))
    inproc = replay_in_process(plan_from_demo(demo), "open_loop", settle_time=0.0)
    one_process = segment_errors(segments, inproc.pos, inproc.rotvec)
    print("through the graph\n" + table(graph) + "\nin one process\n" + table(one_process))
    ratios = {g.name: g.pos_ratio if g.compares_pos else g.rot_ratio for g in graph}
    assert all(r <= WORST for r in ratios.values()), ratios
    assert float(np.median(list(ratios.values()))) <= TOLERANCE, ratios
    for g, p in zip(graph, one_process, strict=True):  # the graph adds jitter, never a different response
        assert ratios[g.name] <= (p.pos_ratio if g.compares_pos else p.rot_ratio) + 0.08, (g.name, ratios[g.name])
    assert sum(e.pos_travel for e in graph if e.compares_pos) > 0.2  # the sequences really moved the arm
