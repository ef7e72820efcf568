"""The episode writer and its session file: LIBERO's layout, resume, discard, and nothing lost on a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from libero_workcell.libero_format import read_demos
from recorder.episode_writer import EpisodeWriter
from recorder.session_file import RecorderError, SessionFile
from recorder.step import RecordedStep

KEYS = ("agentview_rgb", "eye_in_hand_rgb")
PROBLEM = {"problem_name": "libero_industry_d2s", "language_instruction": "put the parts in the tray"}
ENV = {"env_name": "libero_industry_workcell_d2s", "robot": "AUBO-i5H"}
SRC = Path(__file__).resolve().parent.parent / "src"


def frame(t: int, key: str, size: int = 256) -> np.ndarray:
    """A distinct, asymmetric image per step and camera: a bar whose position encodes t."""
    img = np.zeros((size, size, 3), np.uint8)
    img[:, :, 0] = 40 if key == KEYS[0] else 200
    img[t % size, : size // 2, 1] = 255
    return img


def step(t: int, hz: float = 20.0, stale: frozenset = frozenset()) -> RecordedStep:
    stamp = 1000.0 + t / hz
    return RecordedStep(
        stamp=stamp,
        ee_pos=np.array([0.3 + 0.001 * t, 0.0, 0.3]),
        ee_ori=np.array([np.pi, 0.0, 0.0]),
        gripper=0.5,
        joints=np.full(6, 0.01 * t),
        action=np.array([0.1, 0, 0, 0, 0, 0, -1.0]),
        action_time=stamp + 0.004,
        images={k: frame(t, k) for k in KEYS},
        image_stamps={k: stamp - 0.02 for k in KEYS},
        stale=stale,
    )


def record(session: SessionFile, steps: int, attrs: dict | None = None, skip: tuple[int, ...] = ()) -> EpisodeWriter:
    w = EpisodeWriter(session, attrs or {"belt_speed": 0.03}, KEYS, control_hz=20.0)
    for t in range(steps):
        if t not in skip:
            w.add(step(t))
    return w


def test_saved_episodes_read_back_in_libero_layout_with_their_timing(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = record(session, 30, {"belt_speed": 0.03, "slot_permutation": [2, 0, 1]}, skip=(10, 11))
    saved = w.save()
    assert saved.name == "demo_0" and saved.num_samples == 28 and saved.dropped_steps == 2
    record(session, 12).save()
    f = read_demos(tmp_path / "d2s.hdf5", images=True)  # through the index's links, from anywhere
    assert [d.name for d in f.demos] == ["demo_0", "demo_1"] and f.problem_info == PROBLEM and f.env_args == ENV
    d = f.demos[0]
    assert d.num_samples == 28 and d.actions.shape == (28, 7) and d.joint_states.shape == (28, 6)
    assert d.images["agentview_rgb"].shape == (28, 256, 256, 3) and d.images["eye_in_hand_rgb"].dtype == np.uint8
    ts = [t for t in range(30) if t not in (10, 11)]
    for i in (0, 9, 10, 27):  # each image is its own step's, in order
        np.testing.assert_array_equal(d.images["eye_in_hand_rgb"][i], frame(ts[i], KEYS[1]))
    np.testing.assert_allclose(d.ee_pos[:, 0], [0.3 + 0.001 * t for t in ts])
    assert json.loads(d.attrs["slot_permutation"]) == [2, 0, 1] and d.attrs["dropped_steps"] == 2
    with h5py.File(tmp_path / "d2s.hdf5") as h:
        assert h["data"].attrs["num_demos"] == 2 and h["data"].attrs["total"] == 40
        timing = h["data/demo_0/timing"]
        np.testing.assert_allclose(timing["action_latency"][:], 0.004, atol=1e-9)
        np.testing.assert_allclose(timing["frame_age_agentview_rgb"][:], 0.02, atol=1e-9)
        np.testing.assert_allclose(np.diff(timing["obs_stamp"][:])[:9], 0.05)


def test_each_steps_servo_tick_is_stored_from_the_drivers_report_whenever_it_came(tmp_path) -> None:
    """The arm driver's report (Topics.ACTION_RESULT) may arrive before or after its step is added; a step with
    no report stores -1; a report for an action never recorded (a dropped step) is left out."""
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0)
    steps = [step(t) for t in range(5)]
    w.took_effect(steps[0].action_time, 100)
    w.add(steps[0])
    w.add(steps[1])
    w.took_effect(steps[1].action_time, 106)
    w.took_effect(step(7).action_time, 140)  # not recorded
    for s in steps[2:4]:
        w.add(s)
    w.took_effect(steps[3].action_time, 115)  # steps[2]'s report never came
    w.add(steps[4])
    w.took_effect(steps[4].action_time, 120)
    w.save()
    d = read_demos(tmp_path / "d2s.hdf5").demos[0]
    np.testing.assert_array_equal(d.servo_tick, [100, 106, -1, 115, 120])
    assert d.servo_tick.dtype == np.int64


def test_discard_leaves_no_trace_and_resume_continues_the_counts(tmp_path) -> None:
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    record(session, 5).save()
    dropped = record(session, 7)
    dropped.discard()
    assert not dropped.partial.exists()
    again = SessionFile(path, PROBLEM, ENV)  # a new run resumes the file
    assert again.names == ["demo_0"] and again.total == 5
    w = record(again, 4)
    assert w.name == "demo_1"
    w.save()
    with h5py.File(path) as h:
        assert list(h["data"]) == ["demo_0", "demo_1"] and h["data"].attrs["total"] == 9


def test_resuming_with_other_env_args_or_a_broken_file_is_refused(tmp_path) -> None:
    path = tmp_path / "d2s.hdf5"
    SessionFile(path, PROBLEM, ENV)
    with pytest.raises(RecorderError, match="recorded with env_args"):
        SessionFile(path, PROBLEM, {**ENV, "robot": "Panda"})
    bad = tmp_path / "bad.hdf5"
    bad.write_bytes(b"not hdf5")
    with pytest.raises(RecorderError, match="not a session file"):
        SessionFile(bad, PROBLEM, ENV)
    assert bad.read_bytes() == b"not hdf5"


def test_an_unwritable_place_or_too_little_space_is_an_error_before_recording(tmp_path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.access(locked, os.W_OK):
            pytest.skip("running as a user that writes anywhere (root)")
        with pytest.raises(RecorderError, match="cannot record into"):
            SessionFile(locked / "d2s.hdf5", PROBLEM, ENV)
    finally:
        locked.chmod(0o700)
    with pytest.raises(RecorderError, match="MiB free"):
        SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV, min_free_bytes=2**62)


def test_an_unwritable_path_under_root_is_an_error_too(tmp_path) -> None:
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(RecorderError, match="cannot record into"):
        SessionFile(tmp_path / "a_file" / "d2s.hdf5", PROBLEM, ENV)  # its folder would be a file


def test_stale_frames_are_counted_and_stored(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0)
    for t in range(10):
        w.add(step(t, stale=frozenset({"eye_in_hand_rgb"}) if 3 <= t < 7 else frozenset()))
    saved = w.save()
    assert saved.stale_frames == {"agentview_rgb": 0, "eye_in_hand_rgb": 4}
    with h5py.File(tmp_path / "d2s.hdf5") as h:
        assert list(h["data/demo_0/timing/stale_eye_in_hand_rgb"][:]) == [0, 0, 0, 1, 1, 1, 1, 0, 0, 0]


# ---------------------------------------------------------------- crashes
CHILD = textwrap.dedent(
    """
    import sys, time
    sys.path[:0] = [{src!r}, {tests!r}]
    from recorder.session_file import SessionFile
    from recorder.episode_writer import EpisodeWriter
    import recorder.episode_writer as ew
    from test_recorder_writer import KEYS, PROBLEM, ENV, step
    session = SessionFile({path!r}, PROBLEM, ENV)
    for n in range(2):
        w = EpisodeWriter(session, {{}}, KEYS, control_hz=20.0)
        for t in range(8):
            w.add(step(t))
        w.save()
    print("SAVED", flush=True)
    w = EpisodeWriter(session, {{}}, KEYS, control_hz=20.0)
    if {mode!r} == "save":  # stop inside save, after the episode's datasets are written, before its rename
        real = ew.os.replace
        def stall(*a):
            print("IN_SAVE", flush=True)
            time.sleep(60)
        ew.os.replace = stall
    for t in range(40):
        w.add(step(t))
    print("RECORDING", flush=True)
    if {mode!r} == "save":
        w.save()
    time.sleep(60)
    """
)


@pytest.mark.parametrize("mode, marker", [("episode", "RECORDING"), ("save", "IN_SAVE")])
def test_kill_9_mid_episode_or_mid_save_keeps_every_saved_demo_and_marks_the_partial(tmp_path, mode, marker) -> None:
    path = tmp_path / "d2s.hdf5"
    code = CHILD.format(src=str(SRC), tests=str(Path(__file__).parent), path=str(path), mode=mode)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        for line in proc.stdout:
            if marker in line:
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    f = read_demos(path, images=True)
    assert [d.name for d in f.demos] == ["demo_0", "demo_1"]  # every earlier demo readable, whole
    assert all(d.images["agentview_rgb"].shape == (8, 256, 256, 3) for d in f.demos)
    session = SessionFile(path, PROBLEM, ENV)  # resuming: the partial is reported, kept, never linked
    assert session.partials == ["demo_2.hdf5.partial"] and session.names == ["demo_0", "demo_1"]
    assert session.next_name() == "demo_3"  # its number is not reused


def test_a_saved_episode_the_index_missed_is_adopted_on_resume(tmp_path) -> None:
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    record(session, 5).save()
    w = record(session, 6)
    session.add = lambda *a: None  # the crash came between the episode's rename and the index's rewrite
    w.save()
    assert [d.name for d in read_demos(path).demos] == ["demo_0"]
    resumed = SessionFile(path, PROBLEM, ENV)
    assert resumed.names == ["demo_0", "demo_1"] and resumed.total == 11
    assert [d.num_samples for d in read_demos(path).demos] == [5, 6]


def test_a_full_disk_fails_the_episode_clearly_and_keeps_the_earlier_ones(tmp_path, monkeypatch) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    record(session, 5).save()
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0)
    w.add(step(0))
    real = h5py.Dataset.__setitem__

    def enospc(self, key, value):
        if self.name.endswith("_rgb"):
            raise OSError(28, "No space left on device")
        return real(self, key, value)

    monkeypatch.setattr(h5py.Dataset, "__setitem__", enospc)
    with pytest.raises(RecorderError, match="No space left"):  # the writer thread's error reaches the caller
        for t in range(1, 200):
            w.add(step(t))
            time.sleep(0.01)
    assert "No space left" in str(w.failed)
    with pytest.raises(RecorderError, match="could not be written"):
        w.save()
    monkeypatch.undo()
    assert [d.name for d in read_demos(tmp_path / "d2s.hdf5").demos] == ["demo_0"]
    assert w.partial.exists()  # marked, never linked


def test_an_episode_shorter_than_two_steps_is_not_saved(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = record(session, 1)
    with pytest.raises(RecorderError, match="at least 2"):
        w.save()
    assert session.num_demos == 0 and not w.partial.exists()
