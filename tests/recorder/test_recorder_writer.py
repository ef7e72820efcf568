"""The episode writer and its session file: LIBERO's layout, resume, discard, and nothing lost on a crash."""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, fill_disk, wait_for
from recorded_steps import ENV, KEYS, PROBLEM, frame, record, step

from libero_workcell.libero_format import read_demos
from libero_workcell.processes import pid_alive
from recorder.episode_writer import EpisodeWriter
from recorder.session_file import RecorderError, SessionFile
from recorder.step import ArmReport

SRC = Path(__file__).resolve().parents[2] / "src"






def test_saved_episodes_read_back_in_libero_layout_with_their_timing(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = record(session, 30, {"belt_speed": 0.03, "slot_permutation": [2, 0, 1]}, skip=(10, 11))
    saved = w.save()
    assert saved.name == "demo_0" and saved.num_samples == 28 and saved.dropped_steps == 2
    # its first and last step's stamps: where it is in a session log (docs/session_log.md)
    assert (saved.start_time, saved.end_time) == (step(0).stamp, step(29).stamp)
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
    assert (d.attrs["start_time"], d.attrs["end_time"]) == (step(0).stamp, step(29).stamp)
    with h5py.File(tmp_path / "d2s.hdf5") as h:
        assert h["data"].attrs["num_demos"] == 2 and h["data"].attrs["total"] == 40
        timing = h["data/demo_0/timing"]
        np.testing.assert_allclose(timing["action_latency"][:], 0.004, atol=1e-9)
        np.testing.assert_allclose(timing["frame_age_agentview_rgb"][:], 0.02, atol=1e-9)
        np.testing.assert_allclose(np.diff(timing["obs_stamp"][:])[:9], 0.05)


def test_each_step_stores_what_the_arm_did_with_its_action_whenever_its_report_came(tmp_path) -> None:
    """The arm driver's report (Topics.ACTION_RESULT) may arrive before or after its step is added. Per step the
    file keeps the requested action, whether the arm accepted it (1, 0 refused, -1 no report), the action it
    applied (NaN when refused or unreported) and the servo tick (-1 likewise); a report for an action never
    recorded (a dropped step) is left out."""
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0)
    steps = [step(t) for t in range(5)]

    def applied(k: int) -> np.ndarray:  # what the arm did: the requested step, clipped
        return np.array([0.05 + 0.01 * k, 0, 0, 0, 0, 0, -1.0])

    w.arm_report(steps[0].action_time, ArmReport(True, applied(0), 100))  # before its step
    w.add(steps[0])
    w.add(steps[1])
    w.arm_report(steps[1].action_time, ArmReport(True, applied(1), 106))
    w.arm_report(step(7).action_time, ArmReport(True, applied(7), 140))  # not recorded
    for s in steps[2:4]:
        w.add(s)
    w.arm_report(steps[3].action_time, ArmReport(False))  # refused; steps[2]'s report never came
    w.add(steps[4])
    w.arm_report(steps[4].action_time, ArmReport(True, applied(4), 120))
    w.save()
    d = read_demos(tmp_path / "d2s.hdf5").demos[0]
    np.testing.assert_array_equal(d.servo_tick, [100, 106, -1, -1, 120])
    assert d.servo_tick.dtype == np.int64
    np.testing.assert_array_equal(d.actions, [s.action for s in steps])  # what was asked, every step
    with h5py.File(tmp_path / "d2s.hdf5") as h:
        accepted, done = h["data/demo_0/action_accepted"][:], h["data/demo_0/applied_actions"][:]
    assert accepted.dtype == np.int8 and list(accepted) == [1, 1, -1, 0, 1]
    assert done.shape == (5, 7) and done.dtype == np.float64
    for i in (0, 1, 4):
        np.testing.assert_array_equal(done[i], applied(i))
    assert np.isnan(done[2:4]).all()


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
    with pytest.raises(RecorderError, match=r"recorded with env_args .*: record into a new file"):
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
    path = tmp_path / "a_file" / "d2s.hdf5"  # its folder would be a file
    with pytest.raises(RecorderError, match=rf"cannot record into {path}: Not a directory \(.*a_file.*\)"):
        SessionFile(path, PROBLEM, ENV)


def test_dropped_steps_count_the_control_periods_without_a_step(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0)
    assert w.dropped_steps() == 0
    w.add(step(0))
    assert w.dropped_steps() == 0
    w.add(step(2))  # step 1's period passed without a step
    assert w.dropped_steps() == 1
    w.discard()


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
    from recorded_steps import KEYS, PROBLEM, ENV, step
    session = SessionFile({path!r}, PROBLEM, ENV)
    for n in range(2):
        w = EpisodeWriter(session, {{}}, KEYS, control_hz=20.0)
        for t in range(8):
            w.add(step(t))
        w.save()
    print("SAVED", flush=True)
    w = EpisodeWriter(session, {{}}, KEYS, control_hz=20.0)
    print(f"WRITER {{w.proc.pid}}", flush=True)
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
def test_kill_9_mid_episode_or_mid_save_keeps_every_saved_demo_and_marks_the_partial(tmp_path, mode, marker,
                                                                                     caplog) -> None:  # fmt: skip
    path = tmp_path / "d2s.hdf5"
    code = CHILD.format(src=str(SRC), tests=str(FIXTURES), path=str(path), mode=mode)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    writer = 0
    try:
        for line in proc.stdout:
            if line.startswith("WRITER"):
                writer = int(line.split()[1])
            if marker in line:
                break
        time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        proc.kill()
    assert wait_for(lambda: not pid_alive(writer), timeout=30)  # its episode's writer does not outlive it
    f = read_demos(path, images=True)
    assert [d.name for d in f.demos] == ["demo_0", "demo_1"]  # every earlier demo readable, whole
    assert all(d.images["agentview_rgb"].shape == (8, 256, 256, 3) for d in f.demos)
    with caplog.at_level("WARNING", logger="recorder.session_file"):
        session = SessionFile(path, PROBLEM, ENV)  # resuming: the partial is reported, kept, never linked
    assert f"{path}: incomplete episodes from an earlier run, kept as they are: ['demo_2.hdf5.partial']" in caplog.text
    assert session.partials == ["demo_2.hdf5.partial"] and session.names == ["demo_0", "demo_1"]
    assert session.next_name() == "demo_3"  # its number is not reused


def test_a_saved_episode_the_index_missed_is_adopted_on_resume(tmp_path, caplog) -> None:
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    record(session, 5).save()
    w = record(session, 6)
    session.add = lambda *a: None  # the crash came between the episode's rename and the index's rewrite
    w.save()
    assert [d.name for d in read_demos(path).demos] == ["demo_0"]
    with caplog.at_level("WARNING", logger="recorder.session_file"):
        resumed = SessionFile(path, PROBLEM, ENV)
    assert f"{path}: complete episodes not yet in the index, added: ['demo_1']" in caplog.text
    assert resumed.names == ["demo_0", "demo_1"] and resumed.total == 11
    assert [d.num_samples for d in read_demos(path).demos] == [5, 6]
    session.episode_path("demo_0").unlink()  # an episode file the index lists, gone
    with pytest.raises(RecorderError, match=rf"{path}: demo_0's episode file .*demo_0\.hdf5 is missing"):
        SessionFile(path, PROBLEM, ENV)


def test_an_index_that_missed_its_only_episode_lists_it_on_resume(tmp_path) -> None:
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    w = record(session, 4)
    session.add = lambda *a: None
    w.save()
    assert SessionFile(path, PROBLEM, ENV).names == ["demo_0"]
    assert [d.num_samples for d in read_demos(path).demos] == [4]  # rewritten at once, not at the next save


def test_the_session_names_its_files_as_documented_and_never_takes_a_name_twice(tmp_path, monkeypatch) -> None:
    from recorder.session_file import complete_episodes, episodes_dir_of

    assert episodes_dir_of(tmp_path / "d2s.hdf5") == tmp_path / "d2s_episodes"  # docs/data.md
    folder = tmp_path / "nested" / "deeper" / "d2s.hdf5"  # its folders are made
    session = SessionFile(folder, {"problem_name": "x"}, ENV)
    for name in ("demo_10.hdf5", "demo_2.hdf5", "demo_9.hdf5.partial", "notes.txt"):
        (session.episodes_dir / name).write_bytes(b"")
    assert complete_episodes(session.episodes_dir) == ["demo_2", "demo_10"]  # demo order, not text order
    assert session.next_name() == "demo_11"  # past every number, a stray file ignored
    monkeypatch.setattr(session, "next_name", lambda: "demo_9")  # another recorder took it meanwhile
    with pytest.raises(RecorderError, match=r"cannot start .*demo_9\.hdf5\.partial: File exists"):
        session.reserve()
    monkeypatch.undo()
    stale = folder.parent / ".d2s.hdf5.k3j4h5.writing"  # an index write a crash cut short
    stale.write_bytes(b"half")
    for n, instruction in ((3, "first"), (2, "second")):  # the file's instruction: the first demo's, if it had none
        record(session, n, {"language_instruction": instruction}).save()
    with h5py.File(folder) as h:
        assert json.loads(h["data"].attrs["problem_info"])["language_instruction"] == "first"
    SessionFile(folder, {"problem_name": "x"}, ENV)
    assert not stale.exists()




# ---------------------------------------------------------------- a full disk, a hung or dead writer
def test_a_full_disk_during_a_save_fails_that_episode_only(small_disk) -> None:
    """A real ENOSPC mid-save: HDF5 fails the episode file's close, and freeing that file object crashes the
    process holding it (SIGSEGV). The writer's process takes that; here, the save fails with the reason, the
    episode the operator started meanwhile goes on and saves once there is space, and so does the next one."""
    session = SessionFile(small_disk / "d2s.hdf5", PROBLEM, ENV, min_free_bytes=0)
    record(session, 5).save()
    full = record(session, 10)
    meanwhile = EpisodeWriter(session, {}, KEYS, control_hz=20.0)  # the next episode, started during the save
    assert wait_for(lambda: meanwhile.partial.stat().st_size > 0, timeout=30)  # the next episode's file is open
    ballast = fill_disk(small_disk)
    with pytest.raises(RecorderError, match=r"(?s)demo_1 could not be written.*No space left on device"):
        full.save()
    assert full.partial.exists()  # marked, never linked
    del full
    gc.collect()  # nothing of the failed file lives in this process: freeing its writer is harmless
    ballast.unlink()  # the operator frees space
    for t in range(6):
        meanwhile.add(step(t))
    assert meanwhile.save().num_samples == 6
    assert record(session, 4).save().name == "demo_3"
    assert [(d.name, d.num_samples) for d in read_demos(session.path).demos] == [("demo_0", 5), ("demo_2", 6),
                                                                                ("demo_3", 4)]  # fmt: skip
    assert SessionFile(session.path, PROBLEM, ENV, min_free_bytes=0).partials == ["demo_1.hdf5.partial"]


def test_a_save_that_hangs_is_stopped_after_its_bound_and_the_next_one_saves(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    # (a short bound: the stopped writer cannot finish within any, and the test waits it out)
    w = EpisodeWriter(session, {}, KEYS, control_hz=20.0, save_timeout=0.5)
    for t in range(5):
        w.add(step(t))
    os.kill(w.proc.pid, signal.SIGSTOP)  # the writer hangs (a disk that stopped answering)
    with pytest.raises(RecorderError, match=r"demo_0: the save did not finish within 0\.5 s.*kept as .*\.partial"):
        w.save()
    assert w.proc.exitcode == -signal.SIGKILL and w.partial.exists() and session.num_demos == 0
    assert record(session, 3).save().name == "demo_1"
    assert [d.name for d in read_demos(session.path).demos] == ["demo_1"]


def test_a_writer_that_falls_behind_refuses_steps_with_the_reason_and_discard_still_ends_it(tmp_path) -> None:
    """Recording never blocks on the disk: once QUEUE_SECONDS of steps wait for a stalled writer, add() refuses
    (after one control period), the episode has failed; a discard stops the writer and leaves no trace."""
    from recorder.episode_writer import QUEUE_SECONDS

    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    hz = 4.0  # QUEUE_SECONDS is QUEUE_SECONDS * hz steps; the refusal waits one period (0.25 s)
    w = EpisodeWriter(session, {}, KEYS, control_hz=hz)
    queued = int(QUEUE_SECONDS * hz)
    os.kill(w.proc.pid, signal.SIGSTOP)
    with pytest.raises(RecorderError, match=f"fell {QUEUE_SECONDS:.0f} s behind"):
        for t in range(10 * queued):
            w.add(step(t))
    assert queued <= w.steps < 10 * queued and "behind" in w.failed
    with pytest.raises(RecorderError, match="behind"):
        w.add(step(999))
    w.discard()
    assert w.proc.exitcode == -signal.SIGKILL and not w.partial.exists()
    with pytest.raises(RecorderError, match="closed"):
        w.add(step(1000))


def test_each_saved_demos_attributes_are_listed_for_the_plan(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    record(session, 3, {"belt_speed": 0.03, "combination": 1}).save()
    record(session, 2, {"belt_speed": 0.05, "combination": 2}).save()
    attrs = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV).demo_attrs()
    assert [(a["belt_speed"], a["combination"], a["num_samples"]) for a in attrs] == [(0.03, 1, 3), (0.05, 2, 2)]


class ExitOnArrival:
    """Pickles as a call of os._exit(code): the writer process ends by itself as it reads the step (as a bug, an
    exception outside its handlers, would end it), before it could say anything."""

    def __init__(self, code: int) -> None:
        self.code = code

    def __reduce__(self):
        return os._exit, (self.code,)


@pytest.mark.parametrize("how, reason", [("killed", "killed by SIGKILL"), ("exits", "exit code 3")])
def test_a_writer_process_that_dies_fails_its_episode_with_the_reason(tmp_path, how, reason) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = record(session, 3)
    if how == "killed":
        w.proc.kill()
    else:
        w.add(replace(step(3), image_stamps=dict.fromkeys(KEYS, ExitOnArrival(3))))

    def refused() -> bool:
        try:
            w.add(step(w.steps))
        except RecorderError as exc:
            assert reason in str(exc)
            return True
        return False

    assert wait_for(refused, timeout=30)  # add() refuses the dead writer's episode
    with pytest.raises(RecorderError, match=rf"demo_0 could not be written.*{reason}"):
        w.save()
    assert w.partial.exists() and record(session, 2).save().name == "demo_1"


# ---------------------------------------------------------------- the index
def test_concurrent_saves_all_reach_the_index(tmp_path, monkeypatch) -> None:
    """Saves run on threads of their own and may end together: every one is in the index, none fails."""
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    writers = [record(session, 3 + i) for i in range(4)]
    real_fsync = os.fsync

    def slow_fsync(fd: int) -> None:  # a slow disk: the index writes overlap
        time.sleep(0.05)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", slow_fsync)
    barrier, errors = threading.Barrier(len(writers)), []

    def save(w: EpisodeWriter) -> None:
        barrier.wait()
        try:
            w.save()
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=save, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert errors == []
    monkeypatch.undo()
    f = read_demos(tmp_path / "d2s.hdf5")
    assert [(d.name, d.num_samples) for d in f.demos] == [(f"demo_{i}", 3 + i) for i in range(4)]
    with h5py.File(tmp_path / "d2s.hdf5") as h:
        assert h["data"].attrs["num_demos"] == 4 and h["data"].attrs["total"] == 18
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["d2s.hdf5"]  # no temporary file left


def test_an_index_that_cannot_be_written_is_the_recorders_error_and_the_next_start_lists_it(
    tmp_path, monkeypatch
) -> None:
    import tempfile

    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    real, temporaries = os.replace, []

    def no_space_for_the_index(src, dst) -> None:
        if Path(dst) == path:
            temporaries.append(Path(src).name)
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)

    monkeypatch.setattr(os, "replace", no_space_for_the_index)
    told = r"index could not be rewritten \(No space left on device\); the episode files are complete, and the recorder"
    with pytest.raises(RecorderError, match=told + "'s next start lists any the index missed"):
        record(session, 3).save()
    monkeypatch.undo()
    assert len(temporaries) == 1 and re.fullmatch(r"\.d2s\.hdf5\.\w+\.writing", temporaries[0])  # what a start clears
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == ["d2s.hdf5"]  # its temporary file is gone
    with h5py.File(path) as h:
        assert h["data"].attrs["num_demos"] == 0  # the index as it was
    resumed = SessionFile(path, PROBLEM, ENV)
    assert resumed.names == ["demo_0"]

    def no_room_for_a_temporary(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tempfile, "mkstemp", no_room_for_a_temporary)
    with pytest.raises(RecorderError, match=r"index could not be rewritten \(No space left on device\)"):
        record(resumed, 2).save()


def test_a_torn_episode_is_set_aside_by_name_and_the_session_resumes_with_the_rest(tmp_path, caplog) -> None:
    from recorder.session_file import saved_demo_attrs

    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    for n in (5, 6, 7):
        record(session, n).save()
    torn = session.episode_path("demo_1")
    cut = torn.read_bytes()[: torn.stat().st_size // 2]
    torn.write_bytes(cut)  # a copy cut short
    stray = session.episode_path("demo_4")  # complete by its name, not in the index, unreadable
    stray.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    earlier = stray.with_name("demo_4.hdf5.unreadable")  # set aside by an earlier start, copied back since
    earlier.write_bytes(b"earlier")
    with caplog.at_level("WARNING", logger="recorder.session_file"):
        assert len(saved_demo_attrs(path)) == 2  # `workcell plan` counts the readable ones
    assert f"{path}: demo_1 is unreadable, not counted: Unable to synchronously open file (truncated" in caplog.text
    caplog.clear()
    with caplog.at_level("ERROR", logger="recorder.session_file"):
        resumed = SessionFile(path, PROBLEM, ENV)
    assert f"{path}: demo_1 is unreadable (Unable to synchronously open file (truncated file" in caplog.text
    assert "moved aside as demo_1.hdf5.unreadable; resuming with the other episodes" in caplog.text
    assert resumed.names == ["demo_0", "demo_2"] and resumed.total == 12
    assert sorted(resumed.set_aside) == ["demo_1", "demo_4"] and "truncated" in resumed.set_aside["demo_1"]
    assert not torn.exists() and torn.with_name("demo_1.hdf5.unreadable").read_bytes() == cut  # kept, not deleted
    assert earlier.read_bytes() == b"earlier" and stray.with_name("demo_4.hdf5.unreadable.1").exists()  # both kept
    assert [d.name for d in read_demos(path).demos] == ["demo_0", "demo_2"]
    w = record(resumed, 3)
    assert w.name == "demo_5"  # the numbers set aside are not reused
    w.save()
    assert SessionFile(path, PROBLEM, ENV).names == ["demo_0", "demo_2", "demo_5"]


def test_an_episode_that_holds_fewer_steps_than_it_declares_is_set_aside_and_one_that_cannot_be_moved_is_an_error(
    tmp_path, monkeypatch
) -> None:
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    record(session, 5).save()
    with h5py.File(session.episode_path("demo_0"), "r+") as f:
        f["data/demo_0"].attrs["num_samples"] = 9
    resumed = SessionFile(path, PROBLEM, ENV)
    assert resumed.set_aside == {"demo_0": "demo_0 declares 9 samples and holds 5 actions"}
    record(resumed, 4).save()
    resumed.episode_path("demo_1").write_bytes(b"torn")
    real = os.replace

    def refuse(src, dst) -> None:
        if str(dst).endswith(".unreadable"):
            raise OSError(errno.EROFS, "Read-only file system")
        real(src, dst)

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(RecorderError,
                       match=r"demo_1\.hdf5 is unreadable \(.*\) and cannot be moved aside: .*Read-only"):
        SessionFile(path, PROBLEM, ENV)


def test_an_episode_shorter_than_two_steps_is_not_saved(tmp_path) -> None:
    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    w = record(session, 1)
    with pytest.raises(RecorderError, match="at least 2"):
        w.save()
    assert session.num_demos == 0 and not w.partial.exists()
