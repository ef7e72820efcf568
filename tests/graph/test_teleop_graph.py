"""Teleop collection through the whole ROS graph: the scripted PICO session drives the simulated workcell
(teleop_collect_sim.launch.py's graph: the reference run of tests/fixtures/teleop_reference.py), the recorder writes
the demos, and a recorded demo replays to its recorded TCP path and outcome."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
from teleop_reference import PREFERENCE, Reference, teleop_reference

from libero_workcell.demo_reading import placed_of
from libero_workcell.libero_format import read_demos
from preferences.catalogue import Catalogue
from preferences.labels import Calibration
from preferences.scoring import curves, score
from preferences.trajectory import Trajectory
from sim_cell.replay import load_plan, replay_in_process

pytestmark = [pytest.mark.ros, pytest.mark.slow]
RUNS = 1  # one session: bit-for-bit reproduction through the graph is test_sim_time_graph's and, here, the
# in-process replay's (the recorded actions give back the recorded path exactly)
SESSION_S = 54.0  # the shipped session's length


@pytest.fixture(scope="module")
def reference(tmp_path_factory, ros_env) -> Reference:
    """The scripted session's reference run (tests/fixtures/teleop_reference.py): the teleop job on sim time with a
    lab's cell file and a composed preference, shared with the session log's, the console's and the source's tests."""
    return teleop_reference(tmp_path_factory, ros_env)


@pytest.fixture(scope="module")
def recorded(reference):
    # the session ended (teleop_pico exits 0 once the recorder saved everything) and nothing else did
    assert reference.summary["exits"] == [["teleop_pico", 0]], reference.summary
    return reference.demos


def test_the_scripted_session_records_demos_in_libero_layout(reference, recorded) -> None:
    f = read_demos(recorded, images=True)
    assert [d.name for d in f.demos] == [f"demo_{i}" for i in range(RUNS)]
    assert f.env_args["robot"] == "AUBO-i5H" and "flipped vertically" in f.env_args["images"]
    assert f.env_args["cell"] == {"path": str(reference.cell), "settings": {
        "sim_world.stall_timeout": 45.0, "aubo_bridge.arcs.password": "<redacted>"}}  # fmt: skip
    assert f.problem_info["language_instruction"].startswith("pick up")
    for d in f.demos:
        t = d.num_samples
        assert t > 0.9 * SESSION_S * 20, t  # (the last steps, after the world paused at done, record nothing)
        assert d.actions.shape == (t, 7) and d.actions.dtype == np.float64 and np.all(np.abs(d.actions) <= 1)
        assert d.ee_pos.shape == (t, 3) and d.joint_states.shape == (t, 6) and d.gripper_states.shape == (t, 1)
        for key in ("agentview_rgb", "eye_in_hand_rgb"):
            img = d.images[key]
            assert img.shape == (t, 256, 256, 3) and img.dtype == np.uint8
            assert img[t // 2].std() > 10  # a rendered scene, not a blank frame
            # frames change where the arm moved: each step has its own frame, none repeated
            moved = [i for i in range(0, t - 20, 50) if np.linalg.norm(d.ee_pos[i + 20] - d.ee_pos[i]) > 0.02]
            assert len(moved) > 5 and all(np.abs(img[i].astype(int) - img[i + 20]).mean() > 0.1 for i in moved)
        assert placed_of(d.attrs) == [True, True, True]  # every time: sim time, whatever the machine does
        assert d.attrs["belt_speed"] == 0.03 and d.attrs["arrival_interval"] == 18.0 and "task_spec" in d.attrs
        assert d.attrs["dropped_steps"] == 0 and d.attrs["language_instruction"].startswith("pick up")
        assert d.attrs["robot"] == "AUBO-i5H"
        # the preference it was collected with, and its satisfaction per step, scored from what the arm did
        assert d.attrs["preference"] == "keep the gripper high during lateral moves and set each workpiece down gently"
        asked = json.loads(d.attrs["preferences"])
        assert [p["id"] for p in asked] == ["keep_high", "gentle_release"]
        assert d.attrs["preference_kind"] == "composition"
        assert d.satisfaction.shape == (t, 2) and np.isfinite(d.satisfaction[-1]).all()
        cat = Catalogue.load()
        episode = score(Trajectory.from_demo(d), cat.condition(PREFERENCE), cat, Calibration.load())
        np.testing.assert_allclose(d.satisfaction, curves(episode), equal_nan=True)
    with h5py.File(recorded) as h:
        assert h["data"].attrs["num_demos"] == RUNS and h["data"].attrs["total"] == sum(d.num_samples for d in f.demos)
        timing = h["data/demo_0/timing"]
        # in lockstep each action answers its own step's observation, and each frame is of that step
        assert not np.any(timing["action_latency"][:]) and not np.any(timing["frame_age_agentview_rgb"][:])
        assert set(timing) == {"obs_stamp", "action_latency", "frame_age_agentview_rgb", "frame_age_eye_in_hand_rgb",
                               "stale_agentview_rgb", "stale_eye_in_hand_rgb", "servo_tick"}  # fmt: skip
        ticks = timing["servo_tick"][:]
        accepted = h["data/demo_0/action_accepted"][:]
        # the arm's report on the last action can still be on its way when the session's end saves the episode:
        # that step is then stored as not reported (-1), as what it is; every other action was accepted
        reported = ticks if ticks[-1] != -1 else ticks[:-1]
        assert len(reported) >= len(ticks) - 1 and np.all(accepted[: len(reported)] == 1)
        assert np.all(np.diff(reported) == 5)  # every action took effect 5 servo ticks after the one before


def test_a_recorded_demo_replays_to_its_tcp_path_and_outcome(recorded) -> None:
    """Replayed on the simulated workcell in one process (sim time), the recorded actions (open loop) give back
    the recorded TCP path exactly and place what was placed: the graph in lockstep runs the same steps as one
    process. (Through the graph: tests/graph/test_replay_graph.py.)"""
    plan = load_plan(recorded, "demo_0")
    assert plan.demo.servo_tick is not None
    open_loop = replay_in_process(plan, "open_loop")
    print("open loop:", open_loop.tracking)
    assert open_loop.tracking["pos_max_m"] < 1e-9 and open_loop.tracking["rot_max_deg"] < 1e-6, open_loop.tracking
    assert open_loop.placed == placed_of(plan.demo.attrs) == [True, True, True]
