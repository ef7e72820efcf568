"""The simulated workcell on sim time, through the whole ROS graph: deterministic whatever the machine does.

The main job's graph (the world, the arm bridge, the conveyor, both cameras, the scripted expert) with a
recorder recording the expert's episode: run once on an idle machine as fast as it goes, once beside a CPU
hog on both cores at real time, it records the same episode bit for bit (actions, TCP path, joints, both
cameras' frames) with the same outcome. A node that stops answering is named and the episode ends, never a
hang.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import json_messages, ros_probe, wait_for

from libero_workcell.contract import Topics
from libero_workcell.libero_format import read_demos
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]
# A shorter episode, for suite time: arrivals 8 s apart, 3 s to complete the last (horizon 4 + 16 + 3 + 2 s)
SHORT = ["sim_world.arrival_interval:=8.0", "sim_world.t_complete:=3.0", "belt_speed:=0.05", "sim_world.seed:=1"]


def _spin() -> None:
    while True:
        pass


@contextmanager
def cpu_hog(cores: int = 2) -> Iterator[None]:
    """``cores`` busy processes for the duration (a loaded machine)."""
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.join(5)


def expert_episode(out: Path, env: dict[str, str], rtf: float, extra: list[str] = ()) -> tuple[Path, dict]:
    """One expert episode through the graph, recorded whole; the recording and the world's final report."""
    path = out / "expert.hdf5"
    overrides = ["expert:=true", "record_rollouts:=true", "rollout_recorder.record_source:=expert",
                 f"record_path:={path}", f"sim_link:=simtime_{os.getpid()}_{out.name}", f"real_time_factor:={rtf}",
                 *SHORT, *extra]  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=env, log_dir=out / "logs")
    reports: list[dict] = []
    status: list[dict] = []
    try:
        with ros_probe("simtime_probe") as node:
            reports, status = json_messages(node, Topics.SIM_EPISODE), json_messages(node, Topics.RECORDER_STATUS)
            saved = wait_for(lambda: reports and reports[-1].get("done") and status and status[-1]["num_demos"] == 1
                             and not status[-1]["saving"], timeout=300, interval=0.2)  # fmt: skip
            graph.check()
    finally:
        graph.stop(timeout=20)
    assert saved, (reports[-1:] or "no episode report", status[-1:])
    return path, reports[-1]


def test_an_episode_is_the_same_on_an_idle_machine_as_fast_as_it_goes_and_beside_a_cpu_hog_at_real_time(
    tmp_path, ros_env
) -> None:
    t0 = time.monotonic()
    idle, idle_report = expert_episode(tmp_path / "idle", ros_env, rtf=0.0)
    fast_wall = time.monotonic() - t0
    with cpu_hog(2):
        t0 = time.monotonic()
        loaded, loaded_report = expert_episode(tmp_path / "loaded", ros_env, rtf=1.0)
        slow_wall = time.monotonic() - t0
    a, b = read_demos(idle, images=True).demos[0], read_demos(loaded, images=True).demos[0]
    sim_s = a.num_samples / 20
    print(f"{sim_s:.1f} s of sim: {fast_wall:.1f} s wall idle at rtf 0, {slow_wall:.1f} s beside two hogs at rtf 1")
    assert idle_report["metrics"]["placed"][:2] == [True, True]  # the last has 3 s: it may not make it
    assert idle_report["metrics"]["placed"] == loaded_report["metrics"]["placed"]
    assert a.num_samples == b.num_samples and a.num_samples > 300
    for key in ("actions", "ee_pos", "ee_ori", "gripper_states", "joint_states", "robot_states"):
        np.testing.assert_array_equal(getattr(a, key), getattr(b, key), err_msg=key)
    for key in ("agentview_rgb", "eye_in_hand_rgb"):
        np.testing.assert_array_equal(a.images[key], b.images[key], err_msg=key)
    assert slow_wall >= sim_s  # real time is a cap: never faster than the sim time it ran


def test_a_node_that_stops_answering_is_named_and_the_episode_ends(tmp_path, ros_env) -> None:
    """The expert is frozen (SIGSTOP) mid-episode: the world names it and what it was waiting for, ends the
    episode (aborted, with the reason) after its stall timeout, and goes on without it."""
    overrides = ["expert:=true", f"sim_link:=stall_{os.getpid()}", "sim_world.stall_timeout:=3.0", *SHORT]
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=tmp_path / "logs")
    reports: list[dict] = []
    try:
        with ros_probe("stall_probe") as node:
            reports = json_messages(node, Topics.SIM_EPISODE)
            assert wait_for(lambda: reports and reports[-1]["sim_time"] > 1.0, timeout=60), reports[-1:]
            expert = graph.pids["scripted_expert"]
            os.kill(expert, signal.SIGSTOP)
            try:
                assert wait_for(lambda: reports[-1].get("done"), timeout=30, interval=0.1), reports[-1]
                at = reports[-1]["sim_time"]
                assert wait_for(lambda: reports[-1]["sim_time"] >= at, timeout=5)  # the clock runs on, paused
            finally:
                os.kill(expert, signal.SIGCONT)
            graph.check()
    finally:
        graph.stop(timeout=20)
    reason = reports[-1]["metrics"]["aborted"]
    assert "node scripted_expert" in reason and "stopped answering" in reason, reason
    assert reports[-1]["sim_time"] < 10.0  # ended there, not at its horizon
    assert "stopped answering" in (tmp_path / "logs" / "sim_world.log").read_text()
