"""Evaluation at scale: trials per hour on 1 and 2 local workers and on a two-node Ray cluster on this machine, the
warm graph's per-trial overhead, and the full protocol's projected wall time on 1, 4 and 16 machines.

``.venv/bin/python -m bench.scale [--trials 4] [--no-ray]``

Each configuration is one ``python -m evaluation sim`` run, as a user runs it, of the same ``--trials`` protocol
trials (0.05 m/s, the built-in expert, a 9 s arrival interval to keep the bench short). Figures:

- trials per hour and sim seconds per wall second (the run's wall time, graph start-up included);
- per-trial overhead: ``setup_s`` of each result row: the graph's start for a worker's first trial, the reset
  (task parameters and ``/sim/reset``) for every later one (target <= 1 s warm);
- whether every configuration gave the same answer (outcome and rollout digest per trial);
- the projection: the protocol's 48 trials (2 speeds x 24, the default task schedule) over M machines of this
  kind, each running 2 workers. Each machine runs its trials independently (its own graphs, its own loopback DDS);
  the head only writes result lines. So the projected wall time is one graph start plus ceil(48 / (2 M)) rounds of
  the mean wall time of a warm trial at 2 workers, scaled from the bench's task horizon to the protocol's mean
  horizon (sim time per wall second is what a machine delivers; a trial's wall time is its horizon over it).

Not a test: a missed target never fails the run. The machine is small and shared: compare the figures of one run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import fmt

REPO = Path(__file__).resolve().parents[1]
TARGET_WARM_SETUP_S = 1.0
ARRIVAL = "9.0"  # s between arrivals in the bench's trials (the protocol's default is longer)
MACHINES = (1, 4, 16)
WORKERS_PER_MACHINE = 2


def evaluate(out: Path, trials: int, extra: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "evaluation", "sim", "--out", str(out), "--speeds", "0.05", "--trials-per-speed",
           str(trials), "--no-progress", "--set", f"sim_world.arrival_interval:={ARRIVAL}", *extra]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "ROS_DOMAIN_ID"}
    t0 = time.monotonic()
    run = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=7200)
    wall = time.monotonic() - t0
    if run.returncode != 0:
        raise RuntimeError(run.stdout[-1500:] + run.stderr[-1500:])
    rows = json.loads((out / "results.json").read_text())["trials"]
    return {"wall_s": wall, "rows": rows, "sim_s": sum(r["sim_time"] for r in rows)}


def answer(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["trial"]["index"], r["outcome"]["placed"], r["rollout_digest"]) for r in rows]


def report(name: str, r: dict[str, Any]) -> None:
    rows = r["rows"]
    cold = [x["setup_s"] for x in rows if x["worker"]["trial_on_graph"] == 1]
    warm = [x["setup_s"] for x in rows if x["worker"]["trial_on_graph"] > 1]
    per_hour = 3600 * len(rows) / r["wall_s"]
    verdict = "" if not warm else ("PASS" if max(warm) <= TARGET_WARM_SETUP_S else "MISS")
    print(f"  {name:<22} {r['wall_s']:6.0f} s wall, {per_hour:5.0f} trials/hour, {fmt(r['sim_s'] / r['wall_s'])} sim s "
          f"per wall s; setup per trial: graph start {fmt(statistics.mean(cold))} s (x{len(cold)}), warm reset "
          + (f"{fmt(statistics.mean(warm))} s, max {fmt(max(warm))} s (x{len(warm)}; target <= "
             f"{TARGET_WARM_SETUP_S:g} s: {verdict})" if warm else "n/a"))  # fmt: skip


def projection(r2: dict[str, Any]) -> None:
    from evaluation.protocol import protocol_trials

    rows = r2["rows"]
    horizon = statistics.mean(float(x["world_horizon"]) for x in rows)  # the world's, with the bench's schedule
    warm_wall = statistics.mean(x["wall_s"] - x["setup_s"] for x in rows)  # a trial's episode at 2 workers
    start = statistics.mean(x["setup_s"] for x in rows if x["worker"]["trial_on_graph"] == 1)
    protocol = protocol_trials()
    mean_horizon = statistics.mean(t.spec.horizon for t in protocol)
    per_trial = warm_wall * mean_horizon / horizon
    print(f"projection: the protocol's {len(protocol)} trials (mean horizon {mean_horizon:.0f} s of sim time; this "
          f"bench's {horizon:.0f} s), {WORKERS_PER_MACHINE} workers per machine, a trial {fmt(per_trial)} s of wall "
          f"time at 2 workers, one graph start ({fmt(start)} s)")  # fmt: skip
    for m in MACHINES:
        rounds = math.ceil(len(protocol) / (m * WORKERS_PER_MACHINE))
        print(f"  {m:>2} machine(s): {rounds} rounds -> {(start + rounds * per_trial) / 60:5.1f} min")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=4, help="protocol trials per configuration")
    ap.add_argument("--no-ray", action="store_true", help="skip the two-node Ray cluster")
    a = ap.parse_args(argv)
    from sim_bridge.provenance import produced_by

    print(f"bench.scale on {produced_by()['cpu']} ({os.cpu_count()} cores), load {os.getloadavg()[0]:.2f}; "
          f"{a.trials} trials at 0.05 m/s, the built-in expert")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        for workers in (1, 2):
            results[f"--workers {workers}"] = evaluate(Path(tmp) / f"w{workers}", a.trials, ["--workers", str(workers)])
            report(f"--workers {workers}", results[f"--workers {workers}"])
        if not a.no_ray:
            sys.path.insert(0, str(REPO / "tests" / "fixtures"))  # the tests' two-node cluster on loopback
            from ray_cluster import running_cluster

            with running_cluster(Path(tmp) / "cluster", nodes=2) as address:
                results["--ray (2 nodes)"] = evaluate(Path(tmp) / "ray", a.trials, ["--ray", address])
            report("--ray (2 nodes, 1 CPU each)", results["--ray (2 nodes)"])
    answers = {name: answer(r["rows"]) for name, r in results.items()}
    first = next(iter(answers.values()))
    print(f"the same answer (outcome and rollout digest per trial) in every configuration: "
          f"{all(x == first for x in answers.values())}")
    projection(results["--workers 2"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
