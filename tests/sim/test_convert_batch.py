"""Batch conversion: parallel workers, a per-demo summary, resumable after any interruption (kill -9 included)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest
from source_demos import source_demo

from libero_workcell.libero_format import Demo, read_demos, write_demo_file
from sim_bridge.convert_batch import SUMMARY_FILE, main, run_batch

SEQUENCES = ("rot_rz_pos_0.1", "combined_translation_part", "hold_x_0.2")


def _source_file(path, names=SEQUENCES, with_a_bad_one: bool = False):
    demos = []
    for i, seq in enumerate(names):
        d = source_demo(seq)
        demos.append(Demo(f"demo_{i}", d.actions, d.ee_pos, d.ee_ori, d.gripper_states, d.joint_states,
                          d.robot_states, attrs=d.attrs))  # fmt: skip
    if with_a_bad_one:
        d = demos[0]
        demos.append(
            Demo(
                "demo_9",
                d.actions,
                d.ee_pos,
                d.ee_ori,
                d.gripper_states,
                d.joint_states,
                d.robot_states,
                attrs={"robot": "AUBO-i5H"},
            )
        )  # fmt: skip  (no task: cannot be converted)
    return write_demo_file(path, demos, {"language_instruction": "test"}, {})


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """A folder of three demos and one without its task, converted once in two worker processes (the bar it drew on
    stderr kept) and once in this process: what the tests below compare, each from its own angle."""
    work = tmp_path_factory.mktemp("batch")
    folder = work / "in"
    folder.mkdir()
    src = _source_file(folder / "panda_a.hdf5", with_a_bad_one=True)
    bar = io.StringIO()
    with contextlib.redirect_stderr(bar):
        parallel = run_batch([folder], work / "parallel", jobs=2, render=False)
    serial = run_batch([src], work / "serial", jobs=1, render=False, progress=False)
    return SimpleNamespace(folder=folder, src=src, parallel=parallel, parallel_out=work / "parallel",
                           bar=bar.getvalue(), serial=serial, serial_out=work / "serial")  # fmt: skip


def test_a_folder_converts_in_parallel_with_a_summary_per_demo(batch, capsys) -> None:
    rows, out = batch.parallel, batch.parallel_out
    assert re.search(r"^converting: 100%.* 4/4 ", batch.bar, re.M)  # the bar, on stderr
    assert [(r["demo"], r["status"]) for r in rows] == [
        ("demo_0", "converted"), ("demo_1", "converted"), ("demo_2", "converted"), ("demo_9", "failed"),
    ]  # fmt: skip
    assert "no 'task_spec' attribute" in rows[3]["error"]
    for r in rows[:3]:
        assert r["tracking_pos_rms_m"] <= 2e-3 and r["tracking_rot_rms_deg"] <= 1.0, r
        assert r["same_outcome"] is True and r["placed"] == [False, False, False]
        converted = read_demos(r["output"]).demos[0]
        assert converted.attrs["robot"] == "AUBO-i5H" and converted.num_samples == r["steps"]
    assert json.loads((out / SUMMARY_FILE).read_text()) == rows
    # the command: the table, and a failing exit code because one demo failed
    again = out.parent / "parallel_again"
    shutil.copytree(out, again)
    assert main([str(batch.folder), "--out", str(again), "--jobs", "1"]) == 1
    text = capsys.readouterr().out
    assert "demo_9    failed" in text and "3 kept from an earlier run, 1 failed" in text


def test_parallel_and_serial_conversion_write_the_same_demos(batch) -> None:
    assert [r["status"] for r in batch.serial] == [r["status"] for r in batch.parallel]
    for a, b in zip(batch.serial[:3], batch.parallel[:3], strict=True):
        da, db = read_demos(a["output"]).demos[0], read_demos(b["output"]).demos[0]
        np.testing.assert_array_equal(da.actions, db.actions)
        np.testing.assert_array_equal(da.ee_pos, db.ee_pos)


def test_a_run_resumes_keeping_finished_demos_and_redoing_the_rest(batch, tmp_path) -> None:
    out = tmp_path / "out"
    shutil.copytree(batch.serial_out, out)  # as the serial run left it (the copy keeps each file's mtime)
    (out / "panda_a" / "demo_1.hdf5").unlink()
    (out / "panda_a" / "demo_1.hdf5.partial").write_bytes(b"half a file")  # as a killed writer leaves it
    kept_mtime = (out / "panda_a" / "demo_0.hdf5").stat().st_mtime_ns
    again = run_batch([batch.src], out, jobs=1, render=False, progress=False)
    assert [r["status"] for r in again] == ["kept", "converted", "kept", "failed"]
    assert (out / "panda_a" / "demo_0.hdf5").stat().st_mtime_ns == kept_mtime  # never rewritten
    assert not list(out.glob("*/*.partial"))
    for a, b in zip(batch.serial[:3], again[:3], strict=True):
        assert a["tracking_pos_rms_m"] == pytest.approx(b["tracking_pos_rms_m"])


@pytest.mark.slow
def test_kill_9_mid_batch_loses_nothing_and_the_rerun_completes_it(tmp_path) -> None:
    src = _source_file(tmp_path / "src.hdf5", names=SEQUENCES * 2)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "sim_bridge.convert_batch", str(src), "--out", str(out), "--jobs", "1", "--no-images"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 120
    while not (out / "src" / "demo_1.hdf5").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    done = sorted(p.name for p in (out / "src").glob("*.hdf5"))
    assert "demo_0.hdf5" in done and len(done) < 6, done
    for name in done:  # every file a finished demo left is complete and readable
        assert read_demos(out / "src" / name).demos[0].attrs["source_demo"] == name.removesuffix(".hdf5")
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    rows = json.loads((out / SUMMARY_FILE).read_text())
    assert len(rows) == 6 and all(r["status"] in ("kept", "converted") for r in rows)
    assert sum(r["status"] == "kept" for r in rows) >= len(done)
    assert not list(out.glob("*/*.partial"))
