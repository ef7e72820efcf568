"""Batch conversion on a Ray cluster (``--ray``): the local runner's rows, resumed the same way, a worker killed
mid-conversion run again, a demo whose worker always dies a failed row after three attempts; every socket on
loopback; and no Ray at all without ``--ray``."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from conftest import wait_for
from ray_cluster import cluster_pids, kill_a_worker_node, listening, matching, pids_below, running_cluster, task_pids
from test_convert_batch import SEQUENCES, _source_file

from libero_workcell.libero_format import read_demos
from sim_bridge.convert_batch import SUMMARY_FILE, SourceCache, plan_jobs, run_batch
from sim_bridge.convert_cluster import MARKER, convert_task, row_of, write_new
from workcell.cluster import Outcome

NOT_COMPARED = ("seconds", "output", "node")  # where and how fast: the rest is the conversion's
KINEMATIC = ("--no-images", "--kinematic")


def convert_cmd(src: Path, out: Path, *options: str) -> list[str]:
    return [sys.executable, "-m", "sim_bridge.convert_batch", str(src), "--out", str(out), *options]


def on_ray(src: Path, out: Path, address: str, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(convert_cmd(src, out, "--ray", address, *options), capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def compared(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k not in NOT_COMPARED} for r in rows]


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    """Three demos and one without a task, converted on the kinematic path with ``--ray auto`` and no cluster here
    (no ``ray start`` record in Ray's temp folder and no RAY_ADDRESS): a single-machine Ray for this run alone. Kept:
    the run's output, every socket Ray's processes (the run's children) listened on while it ran, and whether all
    of them had ended after it."""
    work = tmp_path_factory.mktemp("auto_run")
    src = _source_file(work / "src.hdf5", with_a_bad_one=True)
    temp = Path(tempfile.mkdtemp(prefix="ray-auto-"))  # short: Ray's socket paths live under it
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": str(temp)}
    run = subprocess.Popen(convert_cmd(src, work / "out", "--ray", "auto", *KINEMATIC), env=env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    seen: set[str] = set()
    try:
        while run.poll() is None:
            seen |= set(listening(pids_below({run.pid})))
            time.sleep(0.2)
        stdout, stderr = run.communicate()
        gone = wait_for(lambda: not matching(lambda args: str(temp) in args), timeout=30)
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    return SimpleNamespace(src=src, out=work / "out", returncode=run.returncode, stdout=stdout, stderr=stderr,
                           seen=seen, gone=gone)  # fmt: skip


@pytest.mark.slow
def test_a_ray_run_gives_the_local_runners_rows_and_files(auto_run, tmp_path: Path) -> None:
    assert auto_run.returncode == 1, auto_run.stderr  # one demo has no task
    rows = json.loads((auto_run.out / SUMMARY_FILE).read_text())
    local = run_batch([auto_run.src], tmp_path / "local", jobs=1, render=False, progress=False, kinematic=True)
    assert compared(rows) == compared(local)
    assert [r["status"] for r in rows] == ["converted", "converted", "converted", "failed"]
    assert all(r["node"].startswith(os.uname().nodename) for r in rows)
    for r, here in zip(rows[:3], local[:3], strict=True):  # the kinematic path is deterministic: the same file
        a, b = read_demos(r["output"]).demos[0], read_demos(here["output"]).demos[0]
        np.testing.assert_array_equal(a.actions, b.actions)
        np.testing.assert_array_equal(a.ee_pos, b.ee_pos)
    assert "demo_9    failed    LiberoFormatError" in auto_run.stdout
    assert not list(auto_run.out.glob(".convert_batch_token"))


@pytest.mark.slow
def test_a_resumed_ray_run_keeps_finished_demos(auto_run, ray_cluster: str, tmp_path: Path) -> None:
    """The run above resumed on the two-node cluster this session joined: what it converts is the local runner's."""
    out = tmp_path / "out"
    shutil.copytree(auto_run.out, out)
    (out / "src" / "demo_1.hdf5").unlink()
    (out / "src" / "demo_1.hdf5.partial").write_bytes(b"half a file")  # as a killed writer leaves it
    kept = {p.name: p.stat().st_mtime_ns for p in (out / "src").glob("*.hdf5")}
    done = on_ray(auto_run.src, out, ray_cluster, *KINEMATIC)
    assert done.returncode == 1, done.stderr
    assert re.search(rf"Ray at {ray_cluster} \(joined\): 2 nodes, 2 CPUs, code [0-9a-f]{{40}}", done.stderr)
    rows = json.loads((out / SUMMARY_FILE).read_text())
    assert [r["status"] for r in rows] == ["kept", "converted", "kept", "failed"]
    assert {p.name: p.stat().st_mtime_ns for p in (out / "src").glob("*.hdf5") if p.name in kept} == kept
    assert "2 kept from an earlier run" in done.stdout and not list(out.glob("*/*.partial"))
    assert "demo_9    failed    LiberoFormatError" in done.stdout and not list(out.glob(".convert_batch_token"))
    first = json.loads((auto_run.out / SUMMARY_FILE).read_text())
    assert compared([rows[1]]) == compared([first[1]])  # demo_1, as the first run had it
    assert rows[1]["node"].startswith(os.uname().nodename) and rows[3]["node"].startswith(os.uname().nodename)
    again, before = read_demos(rows[1]["output"]).demos[0], read_demos(first[1]["output"]).demos[0]
    np.testing.assert_array_equal(again.actions, before.actions)


@pytest.mark.slow
def test_a_killed_worker_is_run_again_and_one_that_always_dies_ends_a_failed_row(ray_cluster: str,
                                                                                 tmp_path: Path) -> None:  # fmt: skip
    """Physics conversions (long enough to be caught running): demo_0's worker is SIGKILLed once, demo_1's every
    time it runs; demo_2 is left alone."""
    src = _source_file(tmp_path / "src.hdf5", names=SEQUENCES)
    out = tmp_path / "out"
    run = subprocess.Popen(convert_cmd(src, out, "--ray", ray_cluster, "--no-images"), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    kills = {"demo_0": set(), "demo_1": set()}
    while run.poll() is None:
        for demo, pids in kills.items():
            if demo == "demo_0" and pids:
                continue
            for pid in task_pids(ray_cluster, f"ray::convert src/{demo}"):
                if pid not in pids:
                    os.kill(pid, signal.SIGKILL)
                    pids.add(pid)
        time.sleep(0.01)
    stdout, stderr = run.communicate()
    assert run.returncode == 1, stderr
    rows = {r["demo"]: r for r in json.loads((out / SUMMARY_FILE).read_text())}
    assert len(kills["demo_0"]) == 1 and len(kills["demo_1"]) == 3, kills
    died = "WorkerCrashedError: The worker died unexpectedly while executing this task"
    assert rows["demo_0"]["status"] == "converted" and rows["demo_2"]["status"] == "converted"
    assert [f.startswith(died) for f in rows["demo_0"]["failed_attempts"]] == [True]
    assert "failed_attempts" not in rows["demo_2"]
    for name in ("demo_0", "demo_2"):
        assert read_demos(out / "src" / f"{name}.hdf5").demos[0].attrs["conversion"] == "physics"
    assert rows["demo_1"]["status"] == "failed" and not (out / "src" / "demo_1.hdf5").exists()
    assert [f.startswith(died) for f in rows["demo_1"]["failed_attempts"]] == [True] * 3
    assert rows["demo_1"]["error"].startswith(f"attempt 1: {died}") and f"attempt 3: {died}" in rows["demo_1"]["error"]
    assert "demo_1    failed    attempt 1: WorkerCrashedError" in stdout


@pytest.mark.slow
def test_a_conversion_whose_machine_dies_runs_on_another(tmp_path: Path) -> None:
    """A cluster of its own (the session's stays whole): the worker node's raylet and every process it started are
    SIGKILLed while it converts a demo, as when its machine dies."""
    src = _source_file(tmp_path / "src.hdf5", names=SEQUENCES)
    out = tmp_path / "out"
    with running_cluster(tmp_path / "cluster") as address:
        run = subprocess.Popen(convert_cmd(src, out, "--ray", address, "--no-images"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)  # fmt: skip
        dead = None
        while run.poll() is None and dead is None:
            dead = kill_a_worker_node(address, "ray::convert src/")
            time.sleep(0.01)
        stdout, stderr = run.communicate()
    assert dead is not None, "no conversion ran on the worker node"
    assert run.returncode == 0, stderr
    rows = json.loads((out / SUMMARY_FILE).read_text())
    assert [r["status"] for r in rows] == ["converted"] * 3 and "3 converted" in stdout
    (moved,) = [r for r in rows if "failed_attempts" in r]
    # NodeDiedError once the head has marked the node dead; WorkerCrashedError if it saw the worker's end first
    assert [f.split(":")[0] for f in moved["failed_attempts"]] in (["NodeDiedError"], ["WorkerCrashedError"]), moved
    assert not moved["node"].endswith(dead[:8]) and read_demos(moved["output"]).demos[0].num_samples == moved["steps"]


LOOPBACK = ("127.0.0.1:", "[::ffff:127.0.0.1]:")


@pytest.mark.slow
def test_the_cluster_listens_on_loopback_only(ray_cluster: str) -> None:
    """Every listening socket of the cluster's processes (its GCS, raylets, agents and workers) is on 127.0.0.1."""
    addresses = listening(cluster_pids(ray_cluster))
    assert len(addresses) >= 5, addresses  # the GCS, two servers per raylet, the runtime env agents, workers
    assert all(a.startswith(LOOPBACK) for a in addresses), addresses


@pytest.mark.slow
def test_ray_auto_with_no_cluster_here_starts_one_on_loopback_for_the_run(auto_run) -> None:
    """No ``ray start`` record in Ray's temp folder and no RAY_ADDRESS: a single-machine Ray for this run alone,
    every socket of it on loopback while it runs, none of its processes left after."""
    assert re.search(r"Ray at 127\.0\.0\.1:\d+ \(started for this run\): 1 node, \d+ CPUs", auto_run.stderr), \
        auto_run.stderr  # fmt: skip
    assert auto_run.returncode == 1 and "3 converted" in auto_run.stdout, auto_run.stderr  # (and one without a task)
    assert len(auto_run.seen) >= 4 and all(a.startswith(LOOPBACK) for a in auto_run.seen), auto_run.seen
    assert auto_run.gone


def test_without_ray_nothing_imports_it(tmp_path: Path) -> None:
    src = _source_file(tmp_path / "src.hdf5", names=SEQUENCES[:1])
    code = ("import sys\nfrom sim_bridge.convert_batch import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            f"assert main([{str(src)!r}, '--out', {str(tmp_path / 'out')!r}, '--jobs', '1', '--no-images', "
            "'--kinematic']) == 0\n"
            "assert not [m for m in sys.modules if m.split('.')[0] == 'ray'], 'ray imported'\n")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "src" / "demo_0.hdf5").is_file()


def test_a_worker_that_does_not_see_the_heads_folder_sends_the_file_and_the_head_writes_it(tmp_path: Path) -> None:
    """The task and the head's handling of its result, here in one process (Ray only carries them between)."""
    src = _source_file(tmp_path / "src.hdf5", names=SEQUENCES[:1])
    job = next(plan_jobs([src], tmp_path / "out"))
    demo = SourceCache().demo(job)
    marker = tmp_path / "out" / MARKER
    marker.parent.mkdir()
    marker.write_text("this run's token")
    row, data = convert_task(job, demo, False, True, marker, "another run's token")  # another machine's folder
    assert data is not None and not job.out.exists()
    written = row_of(job, Outcome(0, (row, data), (), "elsewhere 0123abcd"))
    assert written["status"] == "converted" and written["node"] == "elsewhere 0123abcd"
    assert read_demos(job.out).demos[0].num_samples == written["steps"] and not list(job.out.parent.glob("*.partial"))
    with pytest.raises(FileExistsError):
        write_new(job.out, b"another file")  # nothing written is ever overwritten
    kept, nothing = convert_task(job, demo, False, True, marker, "this run's token")  # after an attempt that died
    assert nothing is None and kept["status"] == "converted" and kept["seconds"] == 0.0  # ... having written it
    job.out.unlink()
    again, nothing = convert_task(job, demo, False, True, marker, "this run's token")
    assert nothing is None and again["seconds"] > 0 and read_demos(job.out).demos[0].num_samples == again["steps"]
