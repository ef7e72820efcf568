"""Sim-real alignment figures: conversion speed, replay real-time factor, the action response through the graph.

``.venv/bin/python -m bench.sim_real [--steps 300] [--no-response]``

1. Conversion speed as a multiple of real time (sim seconds of demo per wall second): the kinematic fast
   path (headless), the physics path headless and with rendering (bench.conversion's item 1, which also
   measures batches). Target (issue 8): >= 50x headless.
2. Sim-in-the-loop replay through the whole graph (every node its own process, loopback DDS): an AUBO
   expert demo replayed open and closed loop; the achieved real-time factor (sim time per wall time over
   the replay), late control steps, tracking error.
3. (unless ``--no-response``) robosuite's measured action response through the graph: every sequence of
   tests/data/robosuite_osc_response.json replayed open loop through DDS to aubo_bridge; per sequence the
   RMS error over its travel (target <= 5 %, issue 26), next to the same in one process. The sequences run
   back to back: the response starts over from the Panda's start pose at each rest between them, so each
   starts as robosuite's data did. ~3 min.

A benchmark, not a test: nothing fails here. The machine is small and shared: compare figures of one run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering, before MuJoCo is imported

from bench.conversion import conversion_speed, expert_demos
from libero_workcell import dds
from libero_workcell.libero_format import write_demo_file
from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import record_expert_demo
from sim_bridge.response_reference import load_reference, reference_demo, segment_errors, table
from sim_cell.replay import held_ticks, plan_from_demo, replay_in_process
from workcell.replay_run import describe, replay_graph


def replay_rtf(steps: int, work: Path, env: dict[str, str]) -> None:
    print(f"\n2. replay through the graph ({steps} steps of an AUBO expert demo)")
    demo, _ = record_expert_demo(TaskSpec.from_seed(0), render=True, max_steps=steps)
    path = write_demo_file(work / "expert.hdf5", [demo], {}, {})
    for mode in ("open_loop", "closed_loop"):
        report = replay_graph(path, "", mode, work / mode, env, timeout=steps / 20 + 120,
                              extra=["demo_replay.strip_frames:=0"])  # fmt: skip
        print("\n".join(f"   {line}" for line in describe(report).splitlines()))  # what `workcell replay` prints


def response_through_graph(work: Path, env: dict[str, str]) -> None:
    seqs = load_reference()
    demo, segments = reference_demo(seqs, TaskSpec.from_seed(0).to_json())
    print(f"\n3. robosuite's response through the graph ({len(seqs)} sequences, {demo.num_samples / 20:g} s)")
    path = write_demo_file(work / "reference.hdf5", [demo], {}, {})
    report = replay_graph(path, "", "open_loop", work / "response", env, timeout=demo.num_samples / 20 + 120,
                          extra=["demo_replay.strip_frames:=0", "sim_world.pause_at_done:=false"])  # fmt: skip
    if "error" in report:
        print(f"   failed: {report['error']}")
        return
    step = report["per_step"]
    graph = segment_errors(segments, np.array(step["tcp_pos"]), np.array(step["tcp_rotvec"]))
    plan = plan_from_demo(demo)
    local = replay_in_process(plan, "open_loop", settle_time=0.0)
    same = replay_in_process(plan, "open_loop", settle_time=0.0, servo_tick=step["servo_tick"])
    held = held_ticks(step["servo_tick"], plan.steps, 5)
    shares = {int(n): float(np.mean(held == n)) for n in np.unique(held)}
    print("   servo ticks each action held the arm: " + ", ".join(f"{n}: {v:.1%}" for n, v in shares.items()))
    print("   through the graph (target <= 5 % per commanded component)")
    print("\n".join("   " + line for line in table(graph).splitlines()))
    print("   in one process, each action 5 servo ticks")
    print("\n".join("   " + line for line in table(segment_errors(segments, local.pos, local.rotvec)).splitlines()))
    print("   in one process, on the graph's schedule")
    print("\n".join("   " + line for line in table(segment_errors(segments, same.pos, same.rotvec)).splitlines()))
    worst = max(max(e.pos_ratio if e.compares_pos else 0.0, e.rot_ratio if e.compares_rot else 0.0) for e in graph)
    print(f"   worst through the graph: {worst:.1%} (target <= 5 %: {'PASS' if worst <= 0.05 else 'MISS'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="control steps per demo (conversion, replay)")
    ap.add_argument("--no-response", action="store_true", help="skip the response through the graph (~3 min)")
    args = ap.parse_args(argv)
    env = dds.loopback_env(None)
    conversion_speed(expert_demos(args.steps))
    with tempfile.TemporaryDirectory(prefix="bench_sim_real_") as tmp:
        replay_rtf(args.steps, Path(tmp), env)
        if not args.no_response:
            response_through_graph(Path(tmp), env)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
