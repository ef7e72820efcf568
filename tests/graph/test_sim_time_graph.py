"""The simulated workcell on sim time, through the whole ROS graph: deterministic whatever the machine does.

The main job's graph (the world, the arm bridge, the conveyor, both cameras, the scripted expert) with a
recorder recording the expert's episode: the suite's reference run of it is the main job's, idle as fast as it
goes (tests/fixtures/expert_reference.py); here the same episode runs again beside a CPU hog at real time, past
its first placement, and the graph is stopped: what it recorded (kept as an interrupted episode) is the reference's
episode bit for bit (actions, TCP path, joints, both cameras' frames), and the world did the same. A node that stops
answering is named and the episode ends, never a hang.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from conftest import json_messages, ros_probe, wait_for
from expert_reference import EXPERT_LOGS, EXPERT_SPEC, RECORD_EXPERT, expert_run

from libero_workcell.contract import Topics
from libero_workcell.libero_format import read_demos
from recorder.session_file import interrupted_episodes
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]
# The stall test's task, short: arrivals 8 s apart, 3 s to complete the last (horizon 4 + 16 + 3 + 2 s); its episode
# ends at the stall, long before
SHORT = ["sim_world.arrival_interval:=8.0", "sim_world.t_complete:=3.0", "belt_speed:=0.05", "sim_world.seed:=1"]
STALL_GRAPH = ("sim_world", "aubo_bridge", "scripted_expert")
# The reference's episode (its task), stopped at UNTIL_S of sim time: past its first placement (at 11.8 s)
SAME_TASK = [f"belt_speed:={EXPERT_SPEC.belt_speed:g}", f"sim_world.seed:={EXPERT_SPEC.seed}"]
UNTIL_S = 13.0


def _spin() -> None:
    while True:
        pass


@contextmanager
def cpu_hog(cores: int = 1) -> Iterator[None]:
    """``cores`` busy processes for the duration (a loaded machine: the graph's processes share what is left)."""
    procs = [multiprocessing.get_context("spawn").Process(target=_spin, daemon=True) for _ in range(cores)]
    for p in procs:
        p.start()
    try:
        yield
    finally:
        for p in procs:
            p.kill()
            p.join(5)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, ros_env):
    return expert_run(tmp_path_factory, ros_env)


def expert_episode_until(out: Path, env: dict[str, str], rtf: float, until_s: float) -> tuple[Path, dict]:
    """The expert's episode through the graph, recorded, the graph stopped once the world reported ``until_s`` of
    sim time: the episode the recorder kept (interrupted by the stop) and the world's last report."""
    path = out / "expert.hdf5"
    overrides = ["expert:=true", *RECORD_EXPERT, f"record_path:={path}", f"sim_link:=simtime_{os.getpid()}_{out.name}",
                 f"real_time_factor:={rtf}", *SAME_TASK]  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=env, log_dir=out / "logs")
    reports: list[dict] = []
    try:
        with ros_probe("simtime_probe") as node:
            reports = json_messages(node, Topics.SIM_EPISODE)
            reached = wait_for(lambda: reports and reports[-1]["sim_time"] >= until_s, timeout=300, interval=0.1)
            graph.check()
    finally:
        codes = graph.stop(timeout=20)
    assert reached, reports[-1:] or "no episode report"
    assert not any(codes.values()), codes  # a clean stop: the recorder completed its episode's file
    (kept,) = interrupted_episodes(path)
    return kept, reports[-1]


def world_events(log: Path) -> list[tuple[float, str]]:
    """The world's episode events from its log, in order: ``(sim time, "placed: wp_0 (...) in its slot")``."""
    found = re.findall(r"\[t=([\d.]+)s\] ((?:arrival|placed|removed|lost): .*)", log.read_text())
    return [(float(t), what) for t, what in found]


def placed_by(events: list[tuple[float, str]]) -> list[bool]:
    """Which workpieces are placed after ``events`` (each placed, or removed again, in order)."""
    placed = [False] * EXPERT_SPEC.num_workpieces
    for _, what in events:
        if m := re.match(r"(placed|removed): wp_(\d+) ", what):
            placed[int(m.group(2))] = m.group(1) == "placed"
    return placed


def test_an_episode_beside_a_cpu_hog_at_real_time_is_the_reference_episode_bit_for_bit(reference, tmp_path,
                                                                                        ros_env) -> None:  # fmt: skip
    """The reference ran idle at real_time_factor 0 to its horizon; this run, past its first placement, beside a
    busy process at 1."""
    ref_out, ref = reference
    assert ref["returncode"] == 0 and ref["recording"], ref["stdout"][-3000:]
    with cpu_hog():
        t0 = time.monotonic()
        loaded, report = expert_episode_until(tmp_path, ros_env, rtf=1.0, until_s=UNTIL_S)
        slow_wall = time.monotonic() - t0
    a, b = read_demos(ref["recording"], images=True).demos[0], read_demos(loaded, images=True).demos[0]
    n = b.num_samples
    print(f"{n / 20:.1f} s of sim: {slow_wall:.1f} s wall beside a busy process at rtf 1 (the reference: "
          f"{a.num_samples / 20:.1f} s of sim, idle at rtf 0)")
    assert "stop" in b.attrs["interrupted"], b.attrs["interrupted"]
    assert 20 * (UNTIL_S - 1) < n < a.num_samples, (report, n, a.num_samples)
    for key in ("actions", "ee_pos", "ee_ori", "gripper_states", "joint_states", "robot_states"):
        np.testing.assert_array_equal(getattr(a, key)[:n], getattr(b, key), err_msg=key)
    for key in ("agentview_rgb", "eye_in_hand_rgb"):
        np.testing.assert_array_equal(a.images[key][:n], b.images[key], err_msg=key)
    # the same world: each arrival and placement at the same sim time, up to where the loaded run was stopped
    events = world_events(tmp_path / "logs" / "sim_world.log")
    before = lambda es: [e for e in es if e[0] < n / 20 - 1e-3]  # noqa: E731
    assert before(events) == before(world_events(ref_out / EXPERT_LOGS / "sim_world.log")), events
    assert placed_by(before(events))[0], events  # its first workpiece placed, as in the reference
    assert slow_wall >= n / 20  # real time is a cap: never faster than the sim time it ran


def test_a_node_that_stops_answering_is_named_and_the_episode_ends(tmp_path, ros_env) -> None:
    """The expert is frozen (SIGSTOP) mid-episode: the world names it and what it was waiting for, ends the
    episode (aborted, with the reason) after its stall timeout, and goes on without it. On the smallest graph
    that closes the loop: the world (not rendering), the arm bridge and the expert, its only participants."""
    overrides = ["expert:=true", f"sim_link:=stall_{os.getpid()}", "sim_world.stall_timeout:=3.0", *SHORT,
                 f"sim_world.participants:={','.join(STALL_GRAPH[1:])}", "sim_world.render:=false"]  # fmt: skip
    nodes = [n for n in Graph.load().resolve(overrides) if n.name in STALL_GRAPH]
    assert sorted(n.name for n in nodes) == sorted(STALL_GRAPH)
    graph = launch(nodes, env=ros_env, log_dir=tmp_path / "logs")
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
