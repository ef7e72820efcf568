"""The simulated workcell on sim time: how fast whole episodes run through the graph, and what lockstep costs.

``.venv/bin/python -m bench.sim_time [--repeat 2]``:

1. one expert episode through the full graph (world, arm bridge, conveyor, both cameras at 20 Hz, the scripted
   expert) in lockstep at ``real_time_factor`` 0: sim seconds per wall second (target >= 5 on 2 cores) and the
   outcome, ``--repeat`` times;
2. the same episode with the world running free (``lockstep:=false``), for contrast: what the barrier costs,
   and what it buys (the outcome free-running depends on the machine);
3. the deploy graph (policy_node against the local openpi server, the rollout recorder recording) in lockstep
   at ``real_time_factor`` 0;

Evaluation throughput (workers, warm graphs, a Ray cluster, the protocol's projection) is bench.scale's.

Each episode is timed from the world's first report of it (all participants up) to its end, on the world's
own ``/sim/episode`` reports (sim time) and this process's clock (wall time). Not a test: a missed target
never fails the run. The machine is small and shared: compare the figures of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt
from bench.graph import proc_cpu_seconds
from libero_workcell.contract import CONTROL_HZ_DEFAULT

TARGET_RTF = 5.0
REPO = Path(__file__).resolve().parents[1]


def episode(overrides: list[str], env: dict[str, str], log_dir: Path, timeout: float = 400.0) -> dict[str, Any]:
    """One episode of the graph with ``overrides``: sim and wall seconds from its start to its end, its outcome."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from std_msgs.msg import String

    from libero_workcell.contract import Qos, Topics
    from libero_workcell.ros_qos import qos
    from workcell.bringup import Graph
    from workcell.launcher import launch

    graph = launch(Graph.load().resolve(overrides), env=env, log_dir=log_dir)
    ctx = Context()
    rclpy.init(context=ctx)
    node = rclpy.create_node(f"bench_simtime_{os.getpid()}", context=ctx)
    ex = SingleThreadedExecutor(context=ctx)
    ex.add_node(node)
    reports: list[tuple[float, dict]] = []
    node.create_subscription(String, Topics.SIM_EPISODE, lambda m: reports.append((time.monotonic(),
                             json.loads(m.data))), qos(Qos.LATCHED))  # fmt: skip
    cpu_start: dict[str, float] = {}
    cpu_end: dict[str, float] = {}
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not (reports and reports[-1][1].get("done")):
            graph.check()
            ex.spin_once(timeout_sec=0.05)
            if reports and not cpu_start:
                cpu_start = {n: proc_cpu_seconds(p) for n, p in graph.pids.items()}
        cpu_end = {n: proc_cpu_seconds(p) for n, p in graph.pids.items()}
        if not (reports and reports[-1][1].get("done")):
            raise TimeoutError(f"no episode end within {timeout:g} s; logs in {log_dir}")
    finally:
        ex.shutdown()
        node.destroy_node()
        ctx.try_shutdown()
        graph.stop(timeout=15)
    first_ep = reports[-1][1]["episode"]
    start = next(r for r in reports if r[1]["episode"] == first_ep)
    end = next(r for r in reports if r[1].get("done"))
    sim, wall = end[1]["sim_time"] - start[1]["sim_time"], end[0] - start[0]
    m = end[1]["metrics"]
    steps = sim * CONTROL_HZ_DEFAULT
    cpu = {n: (cpu_end[n] - cpu_start[n]) / steps * 1e3 for n in cpu_end if n in cpu_start and steps > 0}
    return {"sim_s": sim, "wall_s": wall, "rtf": sim / wall if wall > 0 else float("nan"), "placed": m["placed"],
            "aborted": m.get("aborted"), "cpu_ms_per_step": cpu}  # fmt: skip


def cpu_line(r: dict[str, Any]) -> str:
    """CPU ms each node used per control step, their sum, and the cores the graph kept busy."""
    cpu = r["cpu_ms_per_step"]
    total = sum(cpu.values())
    wall_ms = 1e3 / (r["rtf"] * CONTROL_HZ_DEFAULT)
    parts = ", ".join(f"{n} {v:.1f}" for n, v in sorted(cpu.items(), key=lambda kv: -kv[1]))
    return (f"  CPU ms per control step (50 ms of sim): {parts}; sum {total:.1f} in {wall_ms:.1f} ms of wall: "
            f"{total / wall_ms:.2f} cores busy")


def line(label: str, r: dict[str, Any], target: bool = False) -> str:
    verdict = ("PASS" if r["rtf"] >= TARGET_RTF else "MISS") if target else "info"
    out = f"  {label:52s} {r['sim_s']:5.1f} s of sim in {r['wall_s']:5.1f} s wall: {fmt(r['rtf'])} sim s per wall s"
    out += f"  placed {r['placed']}"
    if target:
        out += f"  (target >= {TARGET_RTF:g}: {verdict})"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2, help="lockstep expert episodes (each its own graph)")
    a = ap.parse_args(argv)
    from libero_workcell import dds
    from libero_workcell.loopback import free_port
    from policy_node.clients import local_url
    from sim_bridge.provenance import produced_by
    from workcell import launch_presets

    env = dds.loopback_env(dds.per_run_domain_id())
    os.environ.update(env)
    os.environ.setdefault("MUJOCO_GL", "egl")
    env = dict(os.environ)
    print(f"bench.sim_time on {produced_by()['cpu']} ({os.cpu_count()} cores), load {os.getloadavg()[0]:.2f}")
    base = ["expert:=true", "real_time_factor:=0"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print("1. the main job's graph, one expert episode, both cameras at 20 Hz, lockstep, as fast as it goes")
        runs = []
        for i in range(a.repeat):
            runs.append(episode([*base, f"sim_link:=bench_ls{i}"], env, tmp / f"ls{i}"))
            print(line(f"run {i + 1}", runs[-1], target=True))
            print(cpu_line(runs[-1]))
        same = all(r["placed"] == runs[0]["placed"] for r in runs)
        print(f"  the same outcome every run: {same}")
        print("2. the same episode, the world running free (lockstep:=false), for contrast")
        free = episode([*base, "lockstep:=false", "sim_link:=bench_free"], env, tmp / "free")
        print(line("free-running", free))
        print(cpu_line(free))
        best = max(r["rtf"] for r in runs)
        print(f"  lockstep costs {fmt(free['rtf'] / best)}x the free-running wall time per sim second; free-running "
              f"placed {free['placed']} (on sim time nothing waits: a node that falls behind misses steps)")
        print("3. the deploy graph: policy_node against the local openpi server, the rollout recorder, lockstep")
        port = free_port()
        deploy = [*(f"{k}:={v}" for k, v in launch_presets.DEPLOY_SIM.items()), "real_time_factor:=0",
                  "record_rollouts:=true", f"record_path:={tmp / 'rollouts.hdf5'}", f"policy_port:={port}",
                  f"policy_url:={local_url(port)}", "sim_link:=bench_deploy"]  # fmt: skip
        r = episode(deploy, env, tmp / "deploy")
        print(line("deploy, latency 0", r))
        print(cpu_line(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
