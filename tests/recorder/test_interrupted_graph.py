"""A graph whose session log's disk fills and one of whose nodes is then killed, mid-episode, through ``workcell
bringup`` as an operator runs it (issue 35, item 5): the log stops on the full disk and the graph runs on; the
killed node makes bring-up stop every node, and the episode being recorded is kept, marked interrupted."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import h5py
import pytest
from conftest import wait_for

from libero_workcell.libero_format import read_demos
from recorder.session_file import interrupted_episodes
from session_log import review
from workcell import launch_presets

pytestmark = [pytest.mark.ros, pytest.mark.slow]
UP_TIMEOUT = 240.0  # wall s for the graph to come up and the log's disk to fill, on a loaded machine


def node_pid(parent: int, name: str) -> int:
    """The pid of the node ``name`` that the launcher ``parent`` started (its command line names it)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().split(b"\0")
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and f"__node:={name}".encode() in cmd:
            return int(entry.name)
    raise AssertionError(f"no node {name} under {parent}")


def steps_recorded(text: str) -> int:
    """The recorder's latest once-a-second count of the open episode's steps (0 before one)."""
    counts = re.findall(r"episode demo_0 \|\s+[\d.]+ s \| (\d+) steps", text)
    return int(counts[-1]) if counts else 0


def test_a_full_log_disk_stops_only_the_log_and_a_killed_node_leaves_the_episode_kept_as_interrupted(
        small_disk, tmp_path, ros_env) -> None:  # fmt: skip
    session, mcap = tmp_path / "demos" / "d2s.hdf5", small_disk / "session.mcap"  # the recorder's disk has room
    logs, out = tmp_path / "logs", tmp_path / "bringup.out"
    args = [f"{k}:={v}" for k, v in launch_presets.TELEOP_COLLECT_SIM.items()] + [
        f"record_path:={session}", f"record_mcap:={mcap}", f"sim_link:=interrupted_{os.getpid()}",
        "session_log.image_hz:=0",  # every camera frame: the log's 4 MiB disk fills within seconds
        "sim_world.stall_timeout:=120",  # a loaded machine (the tests beside this one) delays a step's frames
    ]  # fmt: skip
    # the smallest graph that records an episode into a session and a log: the belt's driver adds nothing here
    args += ["--only", "sim_world,aubo_bridge,external_camera,wrist_camera,teleop_pico,recorder,session_log"]
    with open(out, "w") as f:
        bringup = subprocess.Popen([sys.executable, "-m", "workcell.cli", "bringup", *args, "--log-dir", str(logs)],
                                   env=ros_env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        log_text = lambda name: (logs / f"{name}.log").read_text() if (logs / f"{name}.log").exists() else ""  # noqa: E731
        assert wait_for(lambda: "logging stopped" in log_text("session_log") or bringup.poll() is not None,
                        UP_TIMEOUT, 0.5), out.read_text()[-3000:]  # fmt: skip
        assert bringup.poll() is None, out.read_text()[-3000:]  # the graph runs on without its log
        assert "No space left on device" in log_text("session_log")
        at_stop = steps_recorded(log_text("recorder"))
        assert wait_for(lambda: steps_recorded(log_text("recorder")) >= at_stop + 20 or bringup.poll() is not None,
                        120, 0.5), log_text("recorder")[-2000:]  # fmt: skip
        assert bringup.poll() is None, out.read_text()[-3000:]  # ... and the episode records on
        os.kill(node_pid(bringup.pid, "aubo_bridge"), signal.SIGKILL)  # mid-episode: the arm's node dies
        assert bringup.wait(timeout=120) == 1  # bring-up stops every node and says which one died
    finally:
        if bringup.poll() is None:
            os.killpg(bringup.pid, signal.SIGINT)
            bringup.wait(timeout=60)
    said = out.read_text()
    assert "node aubo_bridge was killed by SIGKILL" in said, said[-3000:]
    recorded = log_text("recorder")
    assert "kept as demo_0.hdf5.interrupted" in recorded, recorded[-3000:]
    (kept,) = interrupted_episodes(session)
    demo = read_demos(kept, images=True).demos[0]
    assert demo.num_samples >= at_stop + 20 and demo.images["agentview_rgb"].shape[0] == demo.num_samples
    assert demo.attrs["interrupted"] == ("the recorder was stopped (SIGINT) before the episode was saved or "
                                         "discarded")  # fmt: skip
    with h5py.File(session) as f:  # never in the session: not a demo anyone saved
        assert f["data"].attrs["num_demos"] == 0 and list(f["data"]) == []
    assert "logging stopped" in log_text("session_log") and "Traceback" not in log_text("session_log")
    logged = [m for m in review.messages(mcap, decode=False)]  # what the log wrote before its disk filled
    assert len(logged) > 100 and not review.has_summary(mcap)
    print(f"kept {kept.name}: {demo.num_samples} steps; the log stopped after {len(logged)} messages "
          f"({mcap.stat().st_size} bytes); the recorder's last lines:\n" + "\n".join(recorded.splitlines()[-4:]))
