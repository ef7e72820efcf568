"""Conversion at scale: how fast one demo converts, how many demos per hour a batch converts here and on Ray.

``.venv/bin/python -m bench.conversion [--steps 300] [--copies 8] [--no-ray]``

1. Conversion speed as a multiple of real time (sim seconds of demo per wall second), in this process: the
   kinematic fast path (headless; target >= 50x, issue 24), the physics path headless, and the physics path
   rendering both cameras. The demos are scripted-expert episodes of the workcell task at the followable speed,
   recorded on the simulated AUBO (seeds 0 and 1; the Panda source does not yet finish whole episodes inside the
   AUBO's reach).
2. Batch throughput in demos per hour, headless, on the kinematic and the physics path: the two demos copied into
   one file of ``--copies`` demos each, converted by ``run_batch`` with ``--jobs 1``, ``--jobs 2`` and ``--ray`` on
   a two-node Ray cluster on this machine (tests/fixtures/ray_cluster.py, one CPU per node). Each figure is
   run_batch's wall time (starting the processes and the cluster's workers included; joining the cluster is not:
   it is item 3), with how busy the workers' CPUs were (the demos' own conversion time over wall time x CPUs), and
   whether all three gave the same rows.
3. Ray's start-up: the two-node cluster, joining it (with the code check on every node), and ``--ray auto``
   starting a single-machine Ray for a run (in a process of its own, as the command does).

A benchmark, not a test: nothing fails here. The machine is small and shared: compare figures of one run (the load
average is printed with each).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("MUJOCO_GL", "egl")  # offscreen rendering, before MuJoCo is imported

from libero_workcell.libero_format import Demo, write_demo_file
from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import followable_expert, record_expert_demo
from sim_bridge.convert import convert_demo
from sim_bridge.convert_batch import run_batch

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures"  # the tests' two-node Ray cluster

TARGET_KINEMATIC = 50.0  # x real time, headless
HZ = 20.0
PATHS = {"kinematic": {"render": False, "kinematic": True}, "physics": {"render": False}}


def load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def expert_demos(steps: int, seeds: Sequence[int] = (0, 1)) -> list[Demo]:
    return [record_expert_demo(TaskSpec.from_seed(s), f"demo_{s}", False, steps, expert=followable_expert())[0]
            for s in seeds]  # fmt: skip


def conversion_speed(demos: Sequence[Demo]) -> None:
    """Item 1 (also bench.sim_real's): each path's speed on ``demos``, in this process."""
    sim = sum(d.num_samples for d in demos) / HZ
    print(f"1. conversion speed ({len(demos)} expert demos, {sim:g} s of demo)")
    for label, kwargs, target in (
        ("kinematic, headless", PATHS["kinematic"], TARGET_KINEMATIC),
        ("physics, headless", PATHS["physics"], None),
        ("physics, rendering both cameras", {"render": True}, None),
    ):
        t0 = time.perf_counter()
        results = [convert_demo(d, **kwargs) for d in demos]
        wall = time.perf_counter() - t0
        how = sorted({r.demo.attrs["conversion"] for r in results})
        rms = np.mean([r.tracking.pos_rms for r in results]) * 1e3
        verdict = "" if target is None else f"  target >= {target:g}x: {'PASS' if sim / wall >= target else 'MISS'}"
        print(f"   {label:<32} {sim / wall:7.1f}x real time ({wall:.2f} s for {sim:g} s; {how}, "
              f"tracking RMS {rms:.2f} mm; {load()}){verdict}")  # fmt: skip


def copies_file(demos: Sequence[Demo], copies: int, path: Path) -> Path:
    """``demos`` copied ``copies`` times each into one file (demo_0, demo_1, ...)."""
    many = [Demo(f"demo_{i}", d.actions, d.ee_pos, d.ee_ori, d.gripper_states, d.joint_states, d.robot_states,
                 attrs=d.attrs) for i, d in enumerate(d for _ in range(copies) for d in demos)]  # fmt: skip
    return write_demo_file(path, many, {"language_instruction": "bench"}, {})


def batch(label: str, cpus: int, src: Path, out: Path, **kwargs: Any) -> list[dict[str, Any]]:
    """run_batch of ``src`` into ``out`` with ``kwargs``, timed; its figures printed, its rows."""
    t0 = time.perf_counter()
    rows = run_batch([src], out, progress=False, **kwargs)
    wall = time.perf_counter() - t0
    done = [r for r in rows if r["status"] == "converted"]
    busy = sum(r["seconds"] for r in done) / (wall * cpus)
    sim = sum(r["steps"] for r in done) / HZ
    print(f"   {label:<10} {len(done):3d} demos in {wall:6.1f} s: {3600 * len(done) / wall:8.0f} demos/hour, "
          f"{sim / wall:5.1f}x real time ({cpus} CPU{'s' * (cpus > 1)} {busy:.0%} busy converting; {load()})")
    return rows


def same_rows(*runs: list[dict[str, Any]]) -> bool:
    strip = [[{k: v for k, v in r.items() if k not in ("seconds", "output", "node")} for r in rows] for rows in runs]
    return all(s == strip[0] for s in strip)


def throughput(demos: Sequence[Demo], copies: int, work: Path, address: str | None) -> None:
    src = copies_file(demos, copies, work / "src.hdf5")
    n = len(demos) * copies
    for path, kwargs in PATHS.items():
        print(f"2{'ab'[path == 'physics']}. batch throughput, {path} path headless, {n} demos of "
              f"{demos[0].num_samples / HZ:g} s")  # fmt: skip
        runs = [batch(f"--jobs {j}", j, src, work / f"{path}_jobs{j}", jobs=j, **kwargs) for j in (1, 2)]
        if address is not None:
            runs.append(batch("--ray", 2, src, work / f"{path}_ray", on_ray=True, **kwargs))
        print(f"   the same rows from every runner: {same_rows(*runs)}")


def auto_start() -> float:
    """``--ray auto`` with no cluster here: the wall time of connect (a single-machine Ray, code checked)."""
    with tempfile.TemporaryDirectory(prefix="ray-bench-") as temp:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"RAY_TMPDIR": temp}
        code = ("import time\nt = time.monotonic()\nfrom workcell import cluster\nprint(cluster.connect('auto'))\n"
                "print(time.monotonic() - t)\ncluster.shutdown()\n")  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return float(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="control steps per expert demo")
    ap.add_argument("--copies", type=int, default=8, help="copies of each demo in the batch")
    ap.add_argument("--no-ray", action="store_true", help="no Ray cluster: items 1 and 2 without --ray")
    args = ap.parse_args(argv)
    from sim_bridge.provenance import produced_by

    print(f"bench.conversion on {produced_by()['cpu']} ({os.cpu_count()} cores), {load()}")
    demos = expert_demos(args.steps)
    conversion_speed(demos)
    with tempfile.TemporaryDirectory(prefix="bench_conversion_") as tmp:
        work = Path(tmp)
        if args.no_ray:
            throughput(demos, args.copies, work, None)
            return 0
        sys.path.insert(0, str(FIXTURES))
        from ray_cluster import running_cluster

        from workcell import cluster

        t0 = time.perf_counter()
        with running_cluster(work / "cluster") as address:
            started = time.perf_counter() - t0
            t0 = time.perf_counter()
            print(cluster.connect(address))
            joined = time.perf_counter() - t0
            try:
                throughput(demos, args.copies, work, address)
            finally:
                cluster.shutdown()
        print(f"3. Ray's start-up: the two-node cluster {started:.1f} s, joining it {joined:.1f} s, "
              f"--ray auto starting a single-machine Ray {auto_start():.1f} s ({load()})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
