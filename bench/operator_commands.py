"""How long an operator's command takes against a running graph, from the shell to its answer.

``.venv/bin/python -m bench.operator_commands [--calls 10]``

The simulated workcell's graph as ``workcell bringup --job sim_workcell`` starts it (at real time, on a domain it
claims, announced in a runtime folder of this run's own), then ``--calls`` times ``workcell call hold`` and
``workcell status``, each a new process as from an operator's other shell: wall seconds from its start to its
exit (Python's start and imports, joining the graph's DDS domain, finding the service or hearing every node, the
answer). Most of a call is DDS discovery of the new participant (docs/bringup_sim.md, "Loopback-only DDS").
Not a test: prints the figures (p50, max); compare within one run.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
WORKCELL = str(Path(sys.executable).parent / "workcell")
UP_TIMEOUT = 120.0


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[1:])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return took


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=10)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-operator-") as tmp:
        runtime = Path(tmp) / "runtime"
        runtime.mkdir(mode=0o700)
        env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime), "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
        env.pop("ROS_DOMAIN_ID", None)
        log_path = Path(tmp) / "bringup.log"
        log = open(log_path, "w")  # noqa: SIM115 (open while the graph runs)
        graph = subprocess.Popen([WORKCELL, "bringup", "--job", "sim_workcell", "--log-dir", str(Path(tmp) / "logs"),
                                  "real_time_factor:=1"], env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + UP_TIMEOUT
            while "nodes up: 100%" not in log_path.read_text():
                if graph.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the graph did not come up:\n" + log_path.read_text()[-3000:])
                time.sleep(0.2)
            figures = {
                "workcell call hold": [timed([WORKCELL, "call", "hold"], env) for _ in range(args.calls)],
                "workcell status": [timed([WORKCELL, "status"], env) for _ in range(args.calls)],
            }
        finally:
            os.killpg(graph.pid, signal.SIGINT)  # Ctrl-C, as in its terminal
            graph.wait(timeout=60)
            log.close()
    print(f"{'command':24} {'p50 s':>7} {'max s':>7}   ({args.calls} each, a new process each, the graph at real time)")
    for name, took in figures.items():
        print(f"{name:24} {np.percentile(took, 50):7.2f} {max(took):7.2f}")


if __name__ == "__main__":
    main()
