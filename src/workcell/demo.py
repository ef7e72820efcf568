"""``workcell demo``: the full stack on the simulated workcell, scripted expert driving.

For each belt speed (and seed) it brings up the whole graph (sim world,
arm bridge, conveyor, both cameras, scripted expert), every node its own
process on loopback DDS, waits for the episode to end, saves the last
camera frames, stops the graph and prints the LIBERO-Industry metrics.
This is what a new user runs first (``./run.sh``).

The graph runs on sim time in lockstep (docs/sim_time.md): the outcome is the
same on any machine and under any load. ``--real-time-factor`` only caps the
speed: 1.0 (the default) to watch it, 0 (``--fast``) as fast as the machine allows.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import cv2

from libero_workcell import dds, ros_msgs
from libero_workcell.contract import CAMERA_NAMES, Qos, Topics
from libero_workcell.json_topics import JsonTopicReader, SimEpisodeReport
from libero_workcell.loopback import free_port
from libero_workcell.progress import progress_bar, write_beside
from policy_node.clients import local_url
from workcell import run_registry
from workcell.bringup import Graph, GraphError
from workcell.launcher import NodeDiedError, NodesUp, launch

SOURCES = ("expert", "policy")
CONSOLE_PORT = 8080  # the graph's console_port default (config/workcell.yaml)


def console_port(wanted: int) -> int:
    """``wanted`` if nothing listens there, else a free port: a second demo (or a test) beside a first one still
    gets a console."""
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", wanted))
        except OSError:
            return free_port()
    return wanted


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="workcell demo", description=__doc__.splitlines()[0])
    ap.add_argument("--speeds", type=float, nargs="+", default=[0.03, 0.05], help="belt speeds, m/s")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0], help="task seeds (combination + permutation)")
    ap.add_argument("--out", type=Path, default=Path("demo-output"), help="logs and camera snapshots")
    ap.add_argument("--domain-id", type=int, default=None,
                    help="ROS_DOMAIN_ID, held machine-wide while it runs (default: an inherited one, else a free one)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="wall s to wait for one episode (default: 4 x its horizon + 60: a loaded machine is slower)")
    pace = ap.add_mutually_exclusive_group()
    pace.add_argument("--real-time-factor", type=float, default=1.0, metavar="X",
                      help="at most X sim seconds per wall second (default 1.0; 0: as fast as possible)")
    pace.add_argument("--fast", dest="real_time_factor", action="store_const", const=0.0,
                      help="as fast as the machine allows (--real-time-factor 0)")
    ap.add_argument("--no-console", dest="console", action="store_false",
                    help="do not serve the operator's console (by default at http://127.0.0.1:8080, docs/console.md)")
    ap.add_argument("--console-port", type=int, default=CONSOLE_PORT,
                    help=f"the console's port (default {CONSOLE_PORT}; taken: another free one, printed)")
    ap.add_argument("--source", choices=SOURCES, default="expert",
                    help="who drives: the scripted expert, or policy_node against the local openpi policy server "
                         "(the deploy loop, no GPU)")  # fmt: skip
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="NAME:=VALUE",
                    help="a graph override, as for `workcell bringup` (repeatable; e.g. record_rollouts:=true "
                         "rollout_recorder.record_source:=expert record_path:=PATH records each episode)")  # fmt: skip
    return ap.parse_args(list(argv))


class _Watcher:
    """Probe node: the latest /sim/episode report and camera frames."""

    def __init__(self) -> None:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from sensor_msgs.msg import Image
        from std_msgs.msg import String

        from libero_workcell.ros_qos import qos

        self.context = Context()
        rclpy.init(args=[], context=self.context)  # the demo's command line (--set NAME:=VALUE) is not ROS's
        self.node = rclpy.create_node(f"demo_watcher_{os.getpid()}", context=self.context)
        self.episode: dict | None = None
        self.frames: dict[str, Image] = {}
        self._episode_reader = JsonTopicReader(SimEpisodeReport, Topics.SIM_EPISODE, self.node.get_logger())
        self.node.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        for cam in CAMERA_NAMES:
            self.node.create_subscription(
                Image, Topics.image(cam), lambda m, c=cam: self.frames.__setitem__(c, m), qos(Qos.SENSOR)
            )
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self.executor.spin, daemon=True)
        self.thread.start()

    def _on_episode(self, msg) -> None:
        got = self._episode_reader.checked(msg)  # a bad one is counted, logged and dropped
        if got is not None:
            self.episode = got[1]

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        self.context.try_shutdown()


def source_overrides(source: str, port: int) -> list[str]:
    """Who drives: the scripted expert, or policy_node against the local policy server on ``port``."""
    if source == "expert":
        return ["expert:=true"]
    if source == "policy":
        return [
            "policy:=true",
            "policy_local_server:=true",
            f"policy_port:={port}",
            f"policy_url:={local_url(port)}",
        ]
    raise ValueError(f"source must be one of {list(SOURCES)}, got {source!r}")


def run_episode_graph(speed: float, seed: int, out: Path, env: dict[str, str], timeout: float | None,
                      source: str = "expert", real_time_factor: float = 1.0, label: str = "episode",
                      console: int = 0, extra: Sequence[str] = ()) -> dict:  # fmt: skip
    """One episode through the whole graph; returns the final /sim/episode report. Progress on stderr: the nodes
    up while the graph comes up, then the episode's sim seconds of its horizon (the bar's ``label``). ``console``:
    the console's port (0: no console); ``extra``: more graph overrides (``--set``), over the demo's own."""
    tag = f"v{speed:g}_seed{seed}"
    overrides = [
        *source_overrides(source, free_port() if source == "policy" else 0),
        f"belt_speed:={speed}",
        f"sim_link:=demo_{os.getpid()}",
        f"sim_world.seed:={seed}",
        f"real_time_factor:={real_time_factor}",
        *(["console:=true", f"console_port:={console}"] if console else []),
        *extra,
    ]
    if timeout is None:
        from libero_workcell.task import TaskSpec

        timeout = 4 * TaskSpec.from_seed(seed, belt_speed=speed).horizon + 60
    log_dir = out / tag
    graph = launch(Graph.load().resolve(overrides), env=env, log_dir=log_dir)
    watcher = _Watcher()
    nodes_up, sim_s = NodesUp(graph), None
    try:
        t0 = time.monotonic()
        last_print = -1
        while time.monotonic() - t0 < timeout:
            graph.check()
            nodes_up.poll()
            ep = watcher.episode
            if ep is not None:
                t = int(ep.get("sim_time", 0))
                if sim_s is None and nodes_up.done:  # one bar at a time: the episode's once the graph is up
                    sim_s = progress_bar(int(ep.get("horizon", t)), f"{label} sim s", "s")  # whole seconds
                if sim_s is not None:
                    sim_s.update(min(t, sim_s.total) - sim_s.n)
                if t // 5 != last_print:
                    last_print = t // 5
                    m = ep.get("metrics", {})
                    write_beside(f"  [{tag}] t={ep.get('sim_time', 0):5.1f}s placed {m.get('num_placed', 0)}/3")
                if ep.get("done"):
                    break
            time.sleep(0.2)
        else:
            raise TimeoutError(f"episode {tag} did not finish within {timeout} s; logs in {log_dir}")
        for cam, msg in watcher.frames.items():
            rgb = ros_msgs.image_from_msg(msg)
            cv2.imwrite(str(log_dir / f"{cam}_last.png"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR))
        return watcher.episode
    finally:
        nodes_up.close()
        if sim_s is not None:
            sim_s.close()
        watcher.close()
        graph.stop(timeout=10)


def run_demo(argv: Sequence[str]) -> int:
    args = _parse(argv)
    try:  # a bad --set is refused, naming it, before anything starts
        Graph.load().resolve(args.overrides)
    except GraphError as exc:
        print(f"workcell demo: {exc}")
        return 2
    try:  # the graph's domain, held machine-wide while it runs (docs/operator.md, "Finding the running graph")
        claim = run_registry.claim_graph_domain(args.domain_id)
    except (ValueError, RuntimeError) as exc:  # (a held domain: dds.DomainHeldError, a RuntimeError)
        print(f"workcell demo: {exc}")
        return 2
    with claim:
        return _demo(args, dds.loopback_env(claim.domain_id))


def _demo(args: argparse.Namespace, env: dict[str, str]) -> int:
    args.out.mkdir(parents=True, exist_ok=True)
    os.environ.update(env)  # this process's probe node uses the same loopback domain
    pace = "as fast as possible" if args.real_time_factor <= 0 else f"real_time_factor {args.real_time_factor:g}"
    print(f"workcell demo: full graph on the simulated workcell, {args.source} driving, sim time in lockstep "
          f"({pace}), ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} (loopback)")  # fmt: skip
    port = console_port(args.console_port) if args.console else 0
    if port:
        print(f"console: http://127.0.0.1:{port} (the cameras, the arm and the episode; --no-console: none)")
    rows = []
    episodes = [(speed, seed) for speed in args.speeds for seed in args.seeds]
    for k, (speed, seed) in enumerate(episodes, 1):
        print(f"episode: belt {speed} m/s, seed {seed}", flush=True)
        try:
            report = run_episode_graph(speed, seed, args.out, env, args.timeout, args.source,
                                       args.real_time_factor, f"episode {k}/{len(episodes)}", port,
                                       args.overrides)  # fmt: skip
        except (NodeDiedError, TimeoutError) as exc:
            print(f"episode failed: {exc}")
            return 1
        spec, m = report["spec"], report["metrics"]
        if m.get("aborted"):
            print(f"episode aborted: {m['aborted']}")
            return 1
        rows.append((speed, seed, spec["workpieces"], spec["slot_permutation"], m))
    print()
    header = ("belt m/s", "seed", "workpieces", "slots", "SR", "PCR_T", "PCR_S", "init")
    print("{:>8} {:>4}  {:<44} {:<9} {:>4} {:>6} {:>6} {:>5}".format(*header))
    for speed, seed, wps, perm, m in rows:
        print(
            f"{speed:>8.2f} {seed:>4}  {', '.join(wps):<44} {tuple(perm)!s:<9} "
            f"{m['SR']:>4.0f} {m['PCR_T']:>6.2f} {m['PCR_S']:>6.2f} {m['pcr_s_init']:>5.2f}"
        )
    summary = args.out / "metrics.json"
    summary.write_text(json.dumps([{"belt_speed": r[0], "seed": r[1], "metrics": r[4]} for r in rows], indent=2))
    print(f"\nlogs, camera snapshots and {summary.name} in {args.out}/")
    return 0
