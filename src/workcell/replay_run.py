"""``workcell replay DEMO.hdf5``: sim-in-the-loop replay of a recorded demo through the whole graph.

Brings up the simulated workcell with ``replay:=true`` (the world in the demo's task, the arm on its
first pose, the ``demo_replay`` node driving as source ``policy``), waits until the replay node has
written its report and exited, stops the graph and prints the tracking error and both outcomes.
The same graph as ``ros2 launch libero_workcell sim_replay.launch.py demo_path:=...``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from libero_workcell import dds
from libero_workcell.progress import progress_bar
from workcell import run_registry
from workcell.bringup import Graph, GraphError
from workcell.launcher import NodeDiedError, NodesUp, RunningGraph, launch

REPLAY_NODE = "demo_replay"
REPORT_FILE = "replay_report.json"  # what the demo_replay node (sim_cell.replay_node) writes
# The demo_replay node's progress, a line of its log about PROGRESS_LINES times a replay and at its last step; the
# replay's bar reads the newest (replayed_steps).
PROGRESS = "replayed {done} of {total} steps"
PROGRESS_LINES = 20
_PROGRESS_RE = re.compile(r"replayed (\d+) of (\d+) steps")


def replayed_steps(lines: Sequence[str]) -> tuple[int, int] | None:
    """(steps replayed, of how many) from the newest PROGRESS line among ``lines``, or None."""
    for line in reversed(lines):
        if m := _PROGRESS_RE.search(line):
            return int(m.group(1)), int(m.group(2))
    return None


class ReplayProgress:
    """The replay's progress bars on stderr: the nodes up while the graph comes up, then the steps replayed."""

    def __init__(self, graph: RunningGraph) -> None:
        self._graph, self.nodes_up, self._steps = graph, NodesUp(graph), None

    def poll(self) -> None:
        self.nodes_up.poll()
        if not self.nodes_up.done or REPLAY_NODE not in self._graph.names:
            return  # one bar at a time
        progress = replayed_steps(self._graph.tail(REPLAY_NODE))
        if progress is not None:
            done, total = progress
            if self._steps is None:
                self._steps = progress_bar(total, "replaying", "step")
            self._steps.update(done - self._steps.n)

    def close(self) -> None:
        self.nodes_up.close()
        if self._steps is not None:
            self._steps.close()


def replay_overrides(demo_path: Path, demo: str, mode: str, out: Path, extra: Sequence[str] = ()) -> list[str]:
    """The graph overrides of one replay (absolute paths: every node has its own working directory)."""
    return [
        "replay:=true",
        f"demo_path:={demo_path.resolve()}",
        f"demo:={demo}",
        f"replay_mode:={mode}",
        f"replay_out:={out.resolve()}",
        f"sim_link:=replay_{os.getpid()}",
        "real_time_factor:=0",  # in lockstep the replay is the same at any speed: as fast as the machine allows
        *extra,
    ]


def replay_graph(
    demo_path: Path, demo: str, mode: str, out: Path, env: dict[str, str], timeout: float, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """One replay through the graph; the replay node's report (raises if the graph fails or times out)."""
    if not demo_path.is_file():
        raise FileNotFoundError(f"{demo_path}: no such demo file")
    out.mkdir(parents=True, exist_ok=True)
    report_path = out / REPORT_FILE
    report_path.unlink(missing_ok=True)  # a report left by an earlier run must not pass for this one
    graph = launch(Graph.load().resolve(replay_overrides(demo_path, demo, mode, out, extra)), env=env,
                   log_dir=out / "logs")  # fmt: skip
    progress = ReplayProgress(graph)
    try:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            progress.poll()
            exits = graph.exited()
            if exits:
                others = [e for e in exits if e.name != REPLAY_NODE or e.returncode not in (0, 1)]
                if others:
                    raise NodeDiedError(others)
                break  # the replay node finished (0) or failed with a report (1)
            time.sleep(0.2)
        else:
            raise TimeoutError(f"the replay did not finish within {timeout:g} s; logs in {out / 'logs'}")
        progress.poll()  # its last lines
    finally:
        progress.close()
        graph.stop(timeout=10)
    if not report_path.is_file():
        raise RuntimeError(f"the replay node wrote no report; logs in {out / 'logs'}")
    return json.loads(report_path.read_text())


def describe(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"replay failed: {report['error']}"
    t, o, timing = report["tracking"], report["outcome"], report["timing"]
    rtf = timing["real_time_factor"]
    return "\n".join([
        f"{report['demo']} ({report['mode']}, {report['steps']} of {report['demo_steps']} steps)",
        f"  tracking: position RMS {t['pos_rms_m'] * 1e3:.2f} mm (max {t['pos_max_m'] * 1e3:.2f}), "
        f"rotation RMS {t['rot_rms_deg']:.2f} deg (max {t['rot_max_deg']:.2f})",
        f"  outcome: recorded placed {o['recorded_placed']}, replayed placed {o['replayed_placed']}"
        f" -> {'same' if o['same'] else 'DIFFERENT' if o['same'] is False else 'no recorded outcome'}",
        f"  timing: {timing['sim_s']:.1f} s of sim time in {timing['wall_s']:.1f} s wall "
        f"({'n/a' if rtf is None else f'{rtf:.2f}'} sim s per wall s, lockstep)",
        f"  strip: {report.get('strip') or 'none'}",
    ])  # fmt: skip


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="workcell replay", description=__doc__.splitlines()[0])
    ap.add_argument("demo_path", type=Path, help="a LIBERO-layout HDF5 file")
    ap.add_argument("--demo", default="", help="which demo in it (default: the first)")
    ap.add_argument("--mode", default="open_loop", choices=("open_loop", "closed_loop"))
    ap.add_argument("--out", type=Path, default=Path("replay-output"), help="report, strip and logs")
    ap.add_argument("--timeout", type=float, default=None, help="s (default: the demo's length + 120)")
    ap.add_argument("--domain-id", type=int, default=None,
                    help="ROS_DOMAIN_ID, held machine-wide while it runs (default: an inherited one, else a free one)")
    ap.add_argument("overrides", nargs="*", metavar="key:=value", help="more graph overrides")
    return ap.parse_intermixed_args(list(argv))


def run_replay(argv: Sequence[str]) -> int:
    args = _parse(argv)
    try:  # the graph's domain, held machine-wide while it runs (docs/operator.md, "Finding the running graph")
        claim = run_registry.claim_graph_domain(args.domain_id)
    except (ValueError, RuntimeError) as exc:  # (a held domain: dds.DomainHeldError, a RuntimeError)
        print(f"workcell replay: {exc}")
        return 2
    with claim:
        return _replay(args, dds.loopback_env(claim.domain_id))


def _replay(args: argparse.Namespace, env: dict[str, str]) -> int:
    timeout = args.timeout
    if timeout is None:
        from libero_workcell.libero_format import DemoReader

        with DemoReader(args.demo_path) as reader:  # the one demo replayed, not the whole file
            name = args.demo or reader.names[0]
            demo = reader.demo(name) if name in reader.names else None
        timeout = (demo.num_samples / 20.0 * 3 if demo is not None else 0.0) + 120.0  # a loaded machine: 1/3 x
    print(f"workcell replay: {args.demo_path} ({args.mode}) on the simulated workcell, "
          f"ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback)", flush=True)  # fmt: skip
    try:
        report = replay_graph(args.demo_path, args.demo, args.mode, args.out, env, timeout, args.overrides)
    except (NodeDiedError, TimeoutError, RuntimeError, FileNotFoundError, GraphError) as exc:
        print(f"workcell replay: {exc}")
        return 1
    print(describe(report))
    print(f"report: {args.out / REPORT_FILE}")
    return 1 if "error" in report else 0
