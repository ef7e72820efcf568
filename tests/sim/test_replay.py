"""Sim-in-the-loop replay, in one process: the plan from a demo, the two modes, the report's figures, the strip.

The same replay through the ROS graph is tests/graph/test_replay_graph.py; a lab's own demos go through
tests/sim/test_lab_demos.py.
"""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.demo_reading import PANDA_HAND_TO_TCP
from libero_workcell.libero_format import Demo, LiberoFormatError, read_demos, read_frames, write_demo_file
from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import ENV_ARGS, followable_expert, record_expert_demo
from sim_cell.replay import (
    CLOSED_LOOP,
    OPEN_LOOP,
    check_mode,
    error_summary,
    load_plan,
    plan_from_demo,
    replay_in_process,
    replay_status,
    side_by_side,
    strip_steps,
    tracking_errors,
    tracking_summary,
)

SPEC = TaskSpec.from_seed(0)
STEPS = 120  # 6 s: the arm approaches the first workpiece


@pytest.fixture(scope="module")
def short_demo_file(tmp_path_factory) -> str:
    """A short recorded AUBO expert demo (images included) in a LIBERO-layout file."""
    demo, _ = record_expert_demo(SPEC, "demo_0", render=True, max_steps=STEPS, expert=followable_expert())
    path = tmp_path_factory.mktemp("replay") / "short.hdf5"
    write_demo_file(path, [demo], {"language_instruction": SPEC.language_instruction}, ENV_ARGS)
    return str(path)


def test_open_loop_replay_of_a_sim_demo_is_exact(short_demo_file) -> None:
    """Same world, same actions, same arm driver: the replayed TCP is the recorded one, bit for bit."""
    plan = load_plan(short_demo_file)
    assert plan.steps == STEPS and plan.spec == SPEC
    result = replay_in_process(plan, OPEN_LOOP, settle_time=0.0)
    np.testing.assert_array_equal(result.pos, plan.path.pos)
    assert result.tracking["pos_max_m"] == 0.0 and result.tracking["rot_max_deg"] == 0.0


def test_closed_loop_replay_tracks_the_recorded_path(short_demo_file) -> None:
    plan = load_plan(short_demo_file)
    result = replay_in_process(plan, CLOSED_LOOP, settle_time=0.0)
    moved = np.linalg.norm(plan.path.pos[-1] - plan.path.pos[0])
    assert moved > 0.05  # the demo goes somewhere, so tracking it is a test
    # The law aims one step ahead; at a steady speed v it lags by about 0.34 v dt (LIBERO's response covers a
    # quarter of the goal offset per step, k = 3): 3 mm at the followable 0.18 m/s, the demo's cruising speed. Where
    # the demo turns, robosuite's OSC also translates the TCP through the Panda's inertia and the law corrects it
    # a step late: 4.1 mm RMS here.
    assert result.tracking["pos_rms_m"] <= 5e-3 and result.tracking["rot_rms_deg"] <= 1.0, result.tracking
    assert result.tracking["pos_rms_m"] > 0.0  # closed loop is not the recording played back


def test_the_plan_starts_the_arm_on_the_demos_first_joints(short_demo_file) -> None:
    demo = read_demos(short_demo_file).demos[0]
    plan = plan_from_demo(demo)
    np.testing.assert_array_equal(plan.start_q, demo.joint_states[0])
    assert plan.placed == [False, False, False]  # 6 s in, nothing is placed yet


def _with(demo: Demo, **changes) -> Demo:
    fields = {k: getattr(demo, k) for k in Demo.__dataclass_fields__}
    fields.update(changes)
    return Demo(**fields)


def test_joints_that_do_not_match_the_recorded_tcp_are_refused(short_demo_file) -> None:
    demo = read_demos(short_demo_file).demos[0]
    joints = demo.joint_states.copy()
    joints[0, 0] += 0.05  # 5 cm at the TCP
    with pytest.raises(LiberoFormatError, match="first joint state puts the TCP"):
        plan_from_demo(_with(demo, joint_states=joints))


def test_a_demo_of_another_arm_starts_by_ik_on_its_first_tcp_pose(short_demo_file) -> None:
    """A Panda demo (7 joints, ee_ori its hand's): the AUBO starts where IK puts its TCP on the first pose."""
    demo = read_demos(short_demo_file).demos[0]
    n = demo.num_samples
    p0, R0 = fk(HOME_Q + 0.1)
    hand = Rotation.from_matrix(R0 @ PANDA_HAND_TO_TCP.T).as_rotvec()
    panda = _with(demo, joint_states=np.zeros((n, 7)), ee_pos=np.tile(p0, (n, 1)), ee_ori=np.tile(hand, (n, 1)),
                  attrs={**demo.attrs, "robot": "Panda"})  # fmt: skip
    plan = plan_from_demo(panda)
    pos, R = fk(plan.start_q)
    np.testing.assert_allclose(pos, p0, atol=1e-4)
    np.testing.assert_allclose(R, R0, atol=1e-4)


def test_an_unreachable_first_pose_is_a_clear_error(short_demo_file) -> None:
    demo = read_demos(short_demo_file).demos[0]
    far = _with(demo, joint_states=np.zeros((demo.num_samples, 7)), ee_pos=demo.ee_pos + [3.0, 0.0, 0.0])
    with pytest.raises(LiberoFormatError, match="cannot reach"):
        plan_from_demo(far)


def test_load_plan_picks_a_demo_by_name_or_says_which_exist(short_demo_file) -> None:
    assert load_plan(short_demo_file, "demo_0").demo.name == "demo_0"
    with pytest.raises(LiberoFormatError, match=r"no demo 'demo_7'; it holds \['demo_0'\]"):
        load_plan(short_demo_file, "demo_7")


def test_a_demo_without_its_task_cannot_be_replayed(short_demo_file, tmp_path) -> None:
    demo = read_demos(short_demo_file).demos[0]
    bare = _with(demo, attrs={k: v for k, v in demo.attrs.items() if k != "task_spec"})
    path = tmp_path / "bare.hdf5"
    write_demo_file(path, [bare], {}, {})
    with pytest.raises(LiberoFormatError, match="no 'task_spec' attribute"):
        load_plan(path)


def test_tracking_summary_figures(short_demo_file) -> None:
    plan = load_plan(short_demo_file)
    n = plan.steps
    pos = plan.path.pos.copy()
    pos[:, 2] += 0.003  # 3 mm everywhere
    pos[-1, 2] += 0.004  # 7 mm at the end
    tilt = Rotation.from_rotvec([0.0, 0.0, np.radians(2.0)])
    rotvec = (tilt * Rotation.from_matrix(plan.path.R)).as_rotvec()
    s = tracking_summary(plan, pos, rotvec)
    assert s["steps_compared"] == n
    assert s["pos_max_m"] == pytest.approx(0.007) and s["pos_final_m"] == pytest.approx(0.007)
    assert s["pos_rms_m"] == pytest.approx(np.sqrt(((n - 1) * 0.003**2 + 0.007**2) / n))
    assert s["rot_rms_deg"] == pytest.approx(2.0) and s["rot_max_deg"] == pytest.approx(2.0)
    short = tracking_summary(plan, pos[:10], rotvec[:10])  # a replay cut short compares what it has
    assert short["steps_compared"] == 10 and short["pos_max_m"] == pytest.approx(0.003)
    with pytest.raises(ValueError, match="no replayed steps"):
        tracking_summary(plan, pos[:0], rotvec[:0])


def test_the_status_step_by_step_is_the_reports_tracking_so_far(short_demo_file) -> None:
    """/replay/status (replay_node): each step's errors computed as the replay goes, summed up as the report
    sums them up, in mm and deg; at the end the report's outcome."""
    plan = load_plan(short_demo_file)
    pos = plan.path.pos.copy()
    pos[:, 0] += np.linspace(0.0, 0.004, plan.steps)  # drifts to 4 mm
    rotvec = (Rotation.from_rotvec([np.radians(1.5), 0.0, 0.0]) * Rotation.from_matrix(plan.path.R)).as_rotvec()
    errors: tuple[list[float], list[float]] = ([], [])
    statuses = []
    for k in range(plan.steps):  # as replay_node does: one row at a time
        p, r = tracking_errors(plan, pos[k][None], rotvec[k][None], first=k)
        errors[0].append(float(p[0]))
        errors[1].append(float(r[0]))
        statuses.append(replay_status(OPEN_LOOP, plan.steps, k + 1, error_summary(*errors)))
    assert [s["step"] for s in statuses] == list(range(1, plan.steps + 1))
    assert all(s["steps"] == plan.steps and s["mode"] == OPEN_LOOP and not s["done"] for s in statuses)
    assert statuses[0]["pos_err_rms_mm"] == pytest.approx(0.0, abs=1e-9)
    assert statuses[-1]["pos_err_max_mm"] == pytest.approx(4.0)
    assert all(s["rot_err_rms_deg"] == pytest.approx(1.5) for s in statuses)
    report = tracking_summary(plan, pos, rotvec)  # the same figures as the report's, for the whole replay
    assert statuses[-1]["pos_err_rms_mm"] == pytest.approx(report["pos_rms_m"] * 1e3, rel=1e-12)
    assert statuses[-1]["rot_err_max_deg"] == pytest.approx(report["rot_max_deg"], rel=1e-12)
    assert error_summary(*tracking_errors(plan, pos, rotvec)) == report
    outcome = {"recorded_placed": [True, False, False], "replayed_placed": [True, False, False], "same": True}
    end = replay_status(OPEN_LOOP, plan.steps, plan.steps, report, done=True, outcome=outcome)
    assert end["done"] and end["outcome"] == outcome and "error" not in end
    assert end["pos_err_max_mm"] == pytest.approx(report["pos_max_m"] * 1e3)
    failed = replay_status(CLOSED_LOOP, plan.steps, 0, None, done=True, error="sim reset refused: busy")
    assert failed["pos_err_rms_mm"] is None and failed["error"] == "sim reset refused: busy" and failed["done"]
    with pytest.raises(ValueError, match="do not fit"):
        tracking_errors(plan, pos[:2], rotvec[:2], first=plan.steps - 1)


def test_modes_are_checked() -> None:
    assert check_mode(OPEN_LOOP) == OPEN_LOOP and check_mode(CLOSED_LOOP) == CLOSED_LOOP
    with pytest.raises(ValueError, match="replay mode must be one of"):
        check_mode("openloop")


def test_strip_steps_span_the_replay() -> None:
    assert strip_steps(783, 6) == [0, 156, 313, 469, 626, 782]
    assert strip_steps(3, 6) == [0, 1, 2]
    assert strip_steps(0, 6) == [] and strip_steps(10, 0) == []


def test_side_by_side_puts_recorded_over_replayed() -> None:
    a = [np.full((4, 5, 3), 10 * i, np.uint8) for i in range(3)]
    b = [np.full((4, 5, 3), 100 + i, np.uint8) for i in range(3)]
    img = side_by_side(a, b, gap=2)
    assert img.shape == (10, 19, 3)
    assert img[0, 7, 0] == 10 and img[6, 7, 0] == 101 and img[4, 0, 0] == 255  # column 1, both rows; the gap
    with pytest.raises(ValueError, match="as many recorded as replayed"):
        side_by_side(a, b[:2])
    with pytest.raises(ValueError, match="frame 1 is"):
        side_by_side(a, [b[0], np.zeros((3, 5, 3), np.uint8), b[2]])


def test_read_frames_reads_only_the_steps_asked_for(short_demo_file) -> None:
    with h5py.File(short_demo_file, "r") as f:
        want = f["data/demo_0/obs/agentview_rgb"][[3, 50]]
    np.testing.assert_array_equal(read_frames(short_demo_file, "demo_0", "agentview_rgb", [3, 50]), want)
    with pytest.raises(LiberoFormatError, match="asked for steps"):
        read_frames(short_demo_file, "demo_0", "agentview_rgb", [STEPS])
    with pytest.raises(LiberoFormatError, match="not an image key"):
        read_frames(short_demo_file, "demo_0", "ee_pos", [0])
    with pytest.raises(LiberoFormatError, match="has no"):
        read_frames(short_demo_file, "demo_9", "agentview_rgb", [0])


def test_write_demo_file_never_overwrites_and_leaves_nothing_on_failure(short_demo_file, tmp_path) -> None:
    with pytest.raises(FileExistsError, match="exists"):
        write_demo_file(short_demo_file, [], {}, {})

    def failing():
        yield read_demos(short_demo_file).demos[0]
        raise RuntimeError("the recorder died")

    path = tmp_path / "new.hdf5"
    with pytest.raises(RuntimeError, match="recorder died"):
        write_demo_file(path, failing(), {}, {})
    assert list(tmp_path.iterdir()) == []  # neither the file nor its .partial


def test_held_ticks_trusts_only_differences_a_recording_can_vouch_for() -> None:
    from sim_cell.replay import held_ticks

    np.testing.assert_array_equal(held_ticks(None, 3, 5), [5, 5, 5])  # simulation data: one control period each
    np.testing.assert_array_equal(held_ticks([10, 16, 20, 25], 4, 5), [6, 4, 5, 5])  # the last: nominal
    # unknown (-1) on either side, a gap over twice nominal (a dropped step), a restart of the count
    np.testing.assert_array_equal(held_ticks([10, -1, 20, 31, 3, 7], 6, 5), [5, 5, 5, 5, 4, 5])
    np.testing.assert_array_equal(held_ticks([10, 10, 15], 3, 5), [0, 5, 5])  # replaced within one servo period
    np.testing.assert_array_equal(held_ticks([10, 14, 20], 2, 5), [4, 5])  # only the replayed steps
    np.testing.assert_array_equal(held_ticks([10], 1, 5), [5])
    np.testing.assert_array_equal(held_ticks([10, 20], 2, 5), [10, 5])  # twice nominal is still believed


def test_the_replays_bar_follows_the_replay_nodes_progress_lines_once_the_graph_is_up(capsys) -> None:
    """`workcell replay`'s progress (workcell.replay_run.ReplayProgress): the nodes up, then the steps replayed
    as the demo_replay node logs them (PROGRESS), one bar at a time, on stderr. A stand-in for the graph."""
    from workcell.replay_run import PROGRESS, REPLAY_NODE, ReplayProgress, replayed_steps

    class Graph:
        def __init__(self) -> None:
            self.names, self.is_up, self.lines = ["sim_world", REPLAY_NODE], [], []

        def up(self) -> list[str]:
            return self.is_up

        def tail(self, name: str) -> list[str]:
            assert name == REPLAY_NODE
            return self.lines

    def logged(done: int) -> str:
        return f"[INFO] [12.5] [demo_replay]: {PROGRESS.format(done=done, total=40)}"

    assert replayed_steps(["x", logged(2), logged(10), "[INFO] [13.0] [demo_replay]: settling"]) == (10, 40)
    assert replayed_steps(["replaying demos.hdf5:demo_0 (40 steps, open_loop)"]) is None
    graph = Graph()
    progress = ReplayProgress(graph)
    graph.lines = [logged(2)]
    progress.poll()  # the replay's line before every node is up: still the nodes' bar alone
    graph.is_up = list(graph.names)
    for done in (2, 20, 40):
        graph.lines.append(logged(done))
        progress.poll()
    progress.close()
    err = capsys.readouterr().err.splitlines()
    assert [line.split(":")[0] for line in err] == ["nodes up", "nodes up", "replaying", "replaying"], err
    assert re.search(r" 2/2 ", err[1]) and re.search(r"^replaying: 100%.* 40/40 ", err[3]), err
