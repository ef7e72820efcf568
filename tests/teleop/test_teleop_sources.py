"""Controller sources: the headset through xrobotoolkit-sdk's API, and scripted session files."""

from __future__ import annotations

import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.spatial.transform import Rotation
from teleop_reference import teleop_reference

from libero_workcell import layout
from libero_workcell.contract import make_state
from libero_workcell.task import TaskSpec
from teleop_pico.core import Button, Status, TeleopCore
from teleop_pico.sources import SESSION_FORMAT, HeadsetSource, ScriptedSource, SessionFileError, load_session

STATE = make_state(layout.HOME_TCP_POS, Rotation.from_matrix(layout.HOME_TCP_ROTMAT).as_rotvec(), 0.0)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def sdk_playing(samples: list[dict]) -> SimpleNamespace:
    """An object with xrobotoolkit_sdk's API surface (the functions HeadsetSource calls), playing samples."""
    state = {"i": -1, "inits": 0, "closes": 0}

    def cur() -> dict:
        return samples[min(state["i"], len(samples) - 1)]

    def stamp() -> int:
        state["i"] += 1  # one sample per read: the stamp is read first
        return cur()["t"]

    return SimpleNamespace(
        init=lambda: state.__setitem__("inits", state["inits"] + 1),
        close=lambda: state.__setitem__("closes", state["closes"] + 1),
        get_time_stamp_ns=stamp,
        get_right_controller_pose=lambda: list(cur()["pose"]),
        get_right_trigger=lambda: cur().get("trigger", 0.0),
        get_right_grip=lambda: cur().get("grip", 0.0),
        get_A_button=lambda: cur().get("a", False),
        get_B_button=lambda: cur().get("b", False),
        state=state,
    )


def test_the_headset_source_reads_the_sdk_into_the_core_clutch_trigger_and_buttons() -> None:
    q = (0.0, 0.0, 0.0, 1.0)
    sdk = sdk_playing([
        {"t": 1, "pose": (0.0, 1.0, -0.3, *q), "grip": 1.0},
        {"t": 2, "pose": (0.0, 1.0, -0.31, *q), "grip": 1.0, "trigger": 0.9},  # 10 mm forward, closing
        {"t": 3, "pose": (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0), "a": True},  # tracking lost, A pressed
    ])  # fmt: skip
    source, core = HeadsetSource(sdk), TeleopCore(arm_enabled=True)
    steps = [core.step(source.read(), STATE, 0.05 * i) for i in range(3)]
    assert [s.status for s in steps] == [Status.FOLLOWING, Status.FOLLOWING, Status.NO_TRACKING]
    np.testing.assert_allclose(steps[1].action, [0.6, 0, 0, 0, 0, 0, 1.0], atol=1e-9)
    np.testing.assert_array_equal(steps[2].action, [0, 0, 0, 0, 0, 0, 1.0])  # holding, still gripping
    assert steps[2].presses == (Button.A,)
    source.close()
    source.close()
    assert sdk.state["inits"] == 1 and sdk.state["closes"] == 1 and source.read() is None


def test_an_sdk_error_is_no_sample_and_the_arm_holds() -> None:
    def broken() -> list[float]:
        raise RuntimeError("PC service went away")

    sdk = sdk_playing([{"t": 1, "pose": (0.0, 1.0, -0.3, 0.0, 0.0, 0.0, 1.0), "grip": 1.0}])
    sdk.get_right_controller_pose = broken
    source = HeadsetSource(sdk)
    assert source.read() is None
    assert TeleopCore(arm_enabled=True).step(source.read(), STATE, 0.0).status is Status.NO_SOURCE


def test_the_real_sdk_without_its_service_is_no_tracking() -> None:
    """xrobotoolkit-sdk itself, no PC service on this machine: init returns, the getters give zeros."""
    sdk = pytest.importorskip("xrobotoolkit_sdk")
    source = HeadsetSource(sdk)
    try:
        steps = [TeleopCore(arm_enabled=True).step(source.read(), STATE, 0.0) for _ in range(3)]
    finally:
        source.close()
    assert all(s.status in (Status.NO_TRACKING, Status.FROZEN) for s in steps)
    assert all(not np.any(s.action[:6]) for s in steps)


# ---------------------------------------------------------------- scripted sessions
def session_dict(**changes) -> dict:
    q0 = (0.0, 0.0, 0.0, 1.0)
    q1 = tuple(Rotation.from_rotvec([0.0, 0.4, 0.0]).as_quat())
    d = {
        "format": SESSION_FORMAT,
        "description": "test",
        "keyframes": [
            {"t": 0.0, "pose": [0.0, 1.0, -0.3, *q0], "grip": 0.0, "trigger": 0.0},
            {"t": 2.0, "pose": [0.2, 1.0, -0.5, *q1], "grip": 1.0, "trigger": 1.0},
        ],
        "buttons": [{"t": 0.5, "button": "A"}],
    }
    d.update(changes)
    return d


def test_a_scripted_session_interpolates_poses_and_presses_buttons_for_one_period(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(session_dict()))
    clock = Clock()
    src = ScriptedSource(load_session(path), clock)
    first = src.read()  # the session starts at the first read
    assert first.pose[:3] == pytest.approx((0.0, 1.0, -0.3)) and not first.a
    clock.t += 0.5
    mid = src.read()
    assert mid.a and mid.grip == pytest.approx(0.25) and mid.pose[0] == pytest.approx(0.05)
    clock.t += 0.5
    half = src.read()
    assert not half.a  # pressed for 0.15 s only
    assert Rotation.from_quat(half.pose[3:]).magnitude() == pytest.approx(0.2)  # slerp halfway
    assert half.stamp_ns == 1_000_000_000
    clock.t += 1.5
    assert src.read() is None and src.finished  # over: the core holds


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"format": "other"}, "not a teleop session"),
        ({"keyframes": []}, "at least 2 keyframes"),
        ({"keyframes": [{"t": 0, "pose": [0] * 7}, {"t": 1, "pose": [0, 0, 0, 0, 0, 0, 1]}]}, "unit norm"),
        ({"keyframes": [{"t": 1, "pose": [0, 0, 0, 0, 0, 0, 1]}, {"t": 1, "pose": [0, 0, 0, 0, 0, 0, 1]}]}, "increase"),
        ({"keyframes": [{"t": 0, "pose": [0, 0, 0]}, {"t": 1, "pose": [0, 0, 0, 0, 0, 0, 1]}]}, "7 finite"),
        ({"keyframes": [{"t": 0}, {"t": 1}]}, "malformed"),
        ({"buttons": [{"t": 0, "button": "X"}]}, "'A' or 'B'"),
    ],
)
def test_a_bad_session_file_is_a_clear_error(tmp_path, changes, message) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(session_dict(**changes)))
    with pytest.raises(SessionFileError, match=message):
        load_session(path)


def test_a_session_round_trips_through_its_json(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(session_dict()))
    s = load_session(path)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(s.to_json()))
    t = load_session(again)
    np.testing.assert_array_equal(t.pos, s.pos) and np.testing.assert_array_equal(t.quat, s.quat)
    assert t.buttons == s.buttons and t.description == "test"


@pytest.mark.slow
@pytest.mark.ros
def test_the_shipped_scripted_session_does_the_whole_d2s_task_in_its_world(tmp_path_factory, ros_env) -> None:
    """config/teleop/d2s_scripted_session.json through the teleop core on the simulated workcell (sim time), in the
    task it was made for: all three workpieces placed. Its run is the reference run's (tests/fixtures/
    teleop_reference.py: the teleop job's graph played it, every keyframe and press of it, then a tail of motion after
    its end), recorded from its first press (A: record) to its second (A: save)."""
    from libero_workcell.config_files import find_config_file
    from libero_workcell.contract import CONTROL_HZ_DEFAULT
    from libero_workcell.demo_reading import placed_of
    from libero_workcell.libero_format import read_demos
    from teleop_pico.node import TASK_KEYS

    shipped = load_session(find_config_file("config/teleop/d2s_scripted_session.json"))
    reference = teleop_reference(tmp_path_factory, ros_env)
    played, n = load_session(reference.session), len(shipped.times)
    for field in ("times", "pos", "quat", "grip", "trigger"):  # the shipped session, then the tail after its end
        np.testing.assert_array_equal(getattr(played, field)[:n], getattr(shipped, field), err_msg=field)
    assert played.times[n] > shipped.duration and played.buttons == shipped.buttons and played.task == shipped.task
    (demo,) = read_demos(reference.demos).demos
    assert placed_of(demo.attrs) == [True, True, True]
    spec = json.loads(demo.attrs["task_spec"])  # the world held the session's task
    assert {k: spec[k] for k in TASK_KEYS} == {k: shipped.task[k] for k in TASK_KEYS}
    # record ... save: the demo is every control step from the first press's to the second's
    (record, first), (save, second) = shipped.buttons
    assert first == second == Button.A.value
    assert demo.num_samples == round((save - record) * CONTROL_HZ_DEFAULT) + 1, demo.num_samples


def test_making_a_session_shows_the_experts_sim_seconds_on_stderr(tmp_path, monkeypatch, capsys) -> None:
    """`python -m sim_bridge.teleop_session` (an expert episode, ~10 s): the episode's sim seconds of its horizon
    on stderr, its one line on stdout. A straight path stands in for the expert's episode."""
    import sim_bridge.teleop_session as ts
    from sim_cell.episode import EpisodeResult

    def episode(spec, source, record, on_step):
        result = EpisodeResult(spec, {"placed": [True, True, True]}, 0, 0)
        rig = SimpleNamespace(world=SimpleNamespace(sim_time=0.0))
        for k in range(200):  # 10 s at 20 Hz
            rig.world.sim_time = k / 20
            result.states.append(make_state([0.4 + k * 1e-3, 0.0, 0.3], [np.pi, 0.0, 0.0], 0.0))
            result.actions.append(np.zeros(7))
            on_step(rig, result.actions[-1], result.states[-1])
        return result

    monkeypatch.setattr(ts, "run_episode", episode)
    assert ts.main([str(tmp_path / "s.json"), "--seed", "0"]) == 0
    out, err = capsys.readouterr()
    horizon = math.ceil(TaskSpec.from_seed(0, arrival_interval=ts.SESSION_ARRIVAL_INTERVAL).horizon)
    assert re.search(rf"^expert episode sim s: .* 9/{horizon} ", err.splitlines()[-1]), err
    assert out == f"{tmp_path / 's.json'}: 220 keyframes, 10.9 s; the expert placed [True, True, True]\n"
