"""``workcell``: the project command (bringup, check, env, call, status, plan, demo, replay).

Why: launch_ros is not installable from PyPI, so ``workcell bringup`` runs the
same graph as ``ros2 launch libero_workcell sim_workcell.launch.py`` through
:mod:`workcell.launcher`, with loopback DDS on a per-run domain by
default.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from libero_workcell import dds
from libero_workcell.cell_file import redact
from libero_workcell.progress import BesideBars
from workcell import bringup, run_registry
from workcell.launcher import NodesUp

DESCRIPTION = "LIBERO-Industry workcell: run the simulated workcell graph and the demo."


def _domain_id(explicit: int | None) -> int:
    """--domain-id, else an inherited ROS_DOMAIN_ID, else a per-run one."""
    if explicit is not None:
        return explicit
    inherited = dds.inherited_domain_id()
    return dds.per_run_domain_id() if inherited is None else inherited


def _graph_env(values: dict[str, Any], explicit: int | None) -> tuple[dict[str, str], dds.DomainClaim]:
    """The child environment and the claim of its domain, held while the graph runs (every graph claims its domain
    machine-wide, so no other graph or worker gets it): loopback DDS on ``explicit``, an inherited ROS_DOMAIN_ID or
    a free per-run one; with the graph's loopback_dds argument false, the lab's own DDS settings on ``explicit``,
    the inherited ROS_DOMAIN_ID or ROS's default 0."""
    if values.get("loopback_dds", True):
        claim = run_registry.claim_graph_domain(explicit)
        return dds.loopback_env(claim.domain_id), claim
    env = dict(os.environ)
    if explicit is not None:
        env["ROS_DOMAIN_ID"] = str(explicit)
    inherited = dds.inherited_domain_id(env)
    return env, run_registry.claim_graph_domain(0 if inherited is None else inherited)


def job_overrides(job: str | None, overrides: Sequence[str]) -> dict[str, Any]:
    """A job's launch-file defaults (launch_presets.JOBS) with the command line's overrides over them."""
    from workcell.launch_presets import JOBS

    if job is not None and job not in JOBS:
        raise bringup.GraphError(f"--job {job!r}: jobs are {', '.join(JOBS)}")
    return {**{k: bringup.launch_text(v) for k, v in JOBS.get(job or "", {}).items()},
            **bringup.parse_overrides(overrides)}  # fmt: skip


def _raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def cmd_bringup(args: argparse.Namespace) -> int:
    """Run the graph until Ctrl-C (exit 0) or until a node dies (exit 1, with its last lines)."""
    graph = bringup.Graph.load(args.graph)
    overrides = job_overrides(args.job, args.overrides)
    values = graph.argument_values(overrides)
    nodes = graph.resolve(overrides)
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = sorted(set(wanted) - {n.name for n in nodes})
        if unknown:
            raise bringup.GraphError(f"--only: {unknown} not in this graph run; nodes: {[n.name for n in nodes]}")
        nodes = [n for n in nodes if n.name in wanted]
    log_dir = Path(args.log_dir) if args.log_dir else None
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in handlers:  # Ctrl-C and SIGTERM stop the graph, even when this process was started with SIGINT
        signal.signal(sig, _raise_keyboard_interrupt)  # ignored (a background job, a test worker); set before
        # the first line is printed: a caller that signals on seeing a line must find the handler in place
    running = nodes_up = claim = record = None
    exits: list = []
    try:  # a Ctrl-C from here on, however early, stops what was started and exits cleanly
        try:
            env, claim = _graph_env(values, args.domain_id)
        except RuntimeError as exc:  # the domain is another graph's (dds.DomainHeldError), or every one is held
            raise bringup.GraphError(str(exc)) from None
        name = args.name or run_registry.unique_name(args.job or Path(graph.path).stem, claim.domain_id)
        print(f"workcell: graph {graph.path}, named {name}", flush=True)
        if values.get("loopback_dds", True):
            print(f"workcell: loopback DDS, ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']} "
                  f"(other shells: eval \"$(workcell env --domain-id {env['ROS_DOMAIN_ID']})\")", flush=True)
        for spec in nodes:
            print(f"workcell: node {spec.name} ({spec.module}) {redact(spec.parameters)}", flush=True)
        if args.dry_run:
            return 0
        running = bringup.launch(nodes, env=env, log_dir=log_dir, echo=BesideBars(sys.stdout))  # lines above the bar
        nodes_up = NodesUp(running)  # "nodes up k/N" on stderr until all are
        if "ROS_DOMAIN_ID" in env:  # where `workcell call` / `status` in another shell find this graph
            record = run_registry.GraphRecord(claim.domain_id, os.getpid(), time.time(),
                                              bool(values.get("use_sim", True)), args.job or "",
                                              str(values.get("cell", "")), tuple(n.name for n in nodes),
                                              name)  # fmt: skip
            run_registry.announce(record)
        exits = _wait_for_a_needed_node(running, nodes, nodes_up)
    except KeyboardInterrupt:  # exits stays [] (a stop asked for, not a node that died)
        if nodes_up is not None:
            nodes_up.close()
        print("workcell: stopping", flush=True)
    finally:
        if nodes_up is not None:
            nodes_up.close()
        for sig in handlers:  # a second Ctrl-C must not cut the orderly shutdown short
            signal.signal(sig, signal.SIG_IGN)
        if running is not None:
            running.stop()
        if record is not None:
            run_registry.withdraw()
        if claim is not None:  # after every node stopped: the domain is free again
            claim.release()
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if exits:
        print("workcell: " + str(bringup.NodeDiedError(exits)), file=sys.stderr, flush=True)
        return 1
    return 0


def _wait_for_a_needed_node(running: Any, nodes: Sequence[bringup.NodeSpec], nodes_up: Any) -> list:
    """Until a node the cell needs ends (those ends): an observer that ends (the session log on a full disk, the
    console) is said once, loudly, and the graph runs on without it."""
    observers = {n.name for n in nodes if n.observer}
    told: set[str] = set()
    while True:
        exits = running.wait(nodes_up=nodes_up, known=told)
        for ended in (e for e in exits if e.name in observers):
            told.add(ended.name)
            print(f"workcell: {ended.describe()}\nworkcell: {ended.name} only watches the cell: the graph runs on "
                  "without it", file=sys.stderr, flush=True)  # fmt: skip
        if needed := [e for e in exits if e.name not in observers]:
            return needed


def cmd_check(args: argparse.Namespace) -> int:
    """The preflight of the graph bringup would start (workcell.check): 0 all passed, 1 a check failed."""
    from libero_workcell.preflight import Context
    from workcell import check

    graph = bringup.Graph.load(args.graph)
    nodes = graph.resolve(job_overrides(args.job, args.overrides))
    names = tuple(n.name for n in nodes)
    print(f"workcell check: graph {graph.path}" + (f", job {args.job}" if args.job else "") +
          f"; nodes {', '.join(names)}", flush=True)  # fmt: skip
    checks = check.run(nodes, Context(names, check.ports_busy(), args.timeout), progress=True)
    print(check.report(checks), flush=True)
    return check.exit_code(checks)


def cmd_env(args: argparse.Namespace) -> int:
    """Print the loopback DDS environment as shell lines (``eval "$(workcell env)"``)."""
    for key in dds.CONFLICTING_VARS:
        print(f"unset {key}")
    for key, value in dds.loopback_vars(_domain_id(args.domain_id)).items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def cmd_demo(argv: Sequence[str]) -> int:
    """Hand the arguments to ``workcell.demo.run_demo`` (imported only when asked for)."""
    try:
        from workcell.demo import run_demo
    except ModuleNotFoundError as exc:
        if exc.name != "workcell.demo":
            raise
        print("workcell demo: workcell.demo is missing from this install", file=sys.stderr)
        return 2
    return int(run_demo(list(argv)) or 0)


def cmd_replay(argv: Sequence[str]) -> int:
    """Hand the arguments to ``workcell.replay_run.run_replay``."""
    from workcell.replay_run import run_replay

    return int(run_replay(list(argv)) or 0)


def cmd_call(args: argparse.Namespace) -> int:
    """One operator command on the running graph: 0 if every step succeeded, 1 if one was refused, 2 if the command
    is wrong or names no one graph. ``stop-all`` with no graph named runs on every graph of the machine."""
    from workcell import operator_cli as op

    try:
        steps = op.steps_of(args.what, args.args)
        targets = op.find_targets(args.name, args.domain_id, every=args.what == "stop-all")
        command = " ".join([args.what, *args.args])
        if len(targets) == 1:
            print(f"workcell: {command} on {targets[0].describe()}", flush=True)
            with op.joined(targets[0].domain_id) as client:
                return 0 if op.run_steps(client, steps, nodes=targets[0].nodes) else 1
        names = ", ".join(t.record.name if t.record else str(t.domain_id) for t in targets)
        print(f"workcell: {command} on every graph of this machine ({len(targets)}: {names}; --name NAME for one)",
              flush=True)  # fmt: skip
        refused = op.run_on_each(targets, steps)
        print(f"workcell: {command} done on {len(targets) - len(refused)} of {len(targets)} graphs" +
              (f"; REFUSED on {', '.join(t.describe() for t in refused)}" if refused else ""), flush=True)  # fmt: skip
        return 1 if refused else 0
    except op.OperatorError as exc:
        print(f"workcell: {exc}", file=sys.stderr)
        return 2


def cmd_status(args: argparse.Namespace) -> int:
    """One screen of the running graph's state: 0 when every node the graph started was heard from, 1 when one was
    not (or, for a graph not recorded, nothing was), 2 when no one graph is named."""
    from workcell import operator_cli as op

    try:
        (target,) = op.find_targets(args.name, args.domain_id)
        with op.joined(target.domain_id) as client:
            seen = op.snapshot(client, args.seconds, target.nodes, max(args.timeout, args.seconds))
        print(op.format_status(seen, target.domain_id, target.record.name if target.record else ""), flush=True)
    except op.OperatorError as exc:
        print(f"workcell: {exc}", file=sys.stderr)
        return 2
    return 0 if op.heard_all(seen) else 1


def cmd_plan(args: argparse.Namespace) -> int:
    """The collection plan against a session file: what to set up next, or the progress."""
    from recorder.collection_plan import plan_report

    try:
        print(plan_report(args.session, args.per_config, args.what))
    except (OSError, ValueError) as exc:
        print(f"workcell: {args.session}: {exc}", file=sys.stderr)
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workcell", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("bringup", help="run the workcell graph until Ctrl-C",
                       description="Run the graph (default config/workcell.yaml). Overrides: ARG:=VALUE for "
                       "launch arguments (use_sim, sim_link, expert, ...), NODE.PARAM:=VALUE for node parameters.")
    p.add_argument("overrides", nargs="*", metavar="key:=value")
    p.add_argument("--graph", default=None, help="graph YAML file (path or name in config/)")
    p.add_argument("--job", default=None, metavar="NAME",
                   help="start from a job's defaults, as its launch file does (NAME.launch.py): sim_workcell, "
                        "real_workcell, teleop_collect_sim, teleop_collect, deploy_sim, deploy_real, sim_replay")
    p.add_argument("--log-dir", default=None, help="write <node>.log and <node>.params.yaml here")
    p.add_argument("--domain-id", type=int, default=None,
                   help="ROS_DOMAIN_ID (default: inherited ROS_DOMAIN_ID, else a free one from the pid's); claimed "
                        "for the graph: one another graph holds is refused")
    p.add_argument("--name", default=None, help="what operators name this graph by (`workcell call --name NAME`; "
                   "default: the job, or the graph file's name, made unique on this machine)")
    p.add_argument("--dry-run", action="store_true", help="print the resolved nodes and exit")
    p.add_argument("--only", default="", metavar="NODE[,NODE]",
                   help="start only these nodes of the graph (e.g. to check one device on its own)")
    p.set_defaults(func=cmd_bringup)

    p = sub.add_parser("check", help="a read-only preflight of the devices the graph bringup would start uses",
                       description="Check what the graph `workcell bringup` would start needs, with the same "
                       "arguments: the controller's RPC and RTDE ports, the login and the arm's modes, the gripper "
                       "and the conveyor drive at their Modbus IDs (reads only), each camera, the headset service, "
                       "the policy server, the recorder's folder. Nothing is enabled, started or moved. Exit 0: "
                       "all passed; 1: a check failed (each says what to do); 2: bad arguments.")  # fmt: skip
    p.add_argument("overrides", nargs="*", metavar="key:=value")
    p.add_argument("--graph", default=None, help="graph YAML file (path or name in config/)")
    p.add_argument("--job", default=None, metavar="NAME", help="start from a job's defaults, as for bringup")
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="seconds per probe (default 10)")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("env", help="print the loopback DDS environment as shell lines")
    p.add_argument("--domain-id", type=int, default=None)
    p.set_defaults(func=cmd_env)

    from workcell.operator_cli import COMMANDS, STATUS_TIMEOUT_S

    p = sub.add_parser("call", help="an operator command on the running graph (enable, stop-all, belt, ...)",
                       description="Commands: " + "; ".join(f"{k}: {v[0]}" for k, v in COMMANDS.items()) +
                       ". The running graph is found by itself when it is the only one; with several, name one "
                       "(--name or --domain-id): the command refuses and lists them, except stop-all, which "
                       "stops every one.", formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("what", metavar="COMMAND", choices=list(COMMANDS), help=", ".join(COMMANDS))
    p.add_argument("args", nargs="*", metavar="ARG")
    p.add_argument("--name", default=None, help="the graph's name (bringup prints it; default: the only one)")
    p.add_argument("--domain-id", type=int, default=None, help="the graph's ROS_DOMAIN_ID (default: found)")
    p.set_defaults(func=cmd_call)

    p = sub.add_parser("status", help="one screen of the running graph: arm, source, belt, cameras, episode")
    p.add_argument("--seconds", type=float, default=1.0, help="how long to listen at least (default 1)")
    p.add_argument("--timeout", type=float, default=STATUS_TIMEOUT_S,
                   help="how long to wait at most for every node the graph started to be heard from (default "
                        f"{STATUS_TIMEOUT_S:g})")
    p.add_argument("--name", default=None, help="the graph's name (bringup prints it; default: the only one)")
    p.add_argument("--domain-id", type=int, default=None, help="the graph's ROS_DOMAIN_ID (default: found)")
    p.set_defaults(func=cmd_status)

    p = sub.add_parser("plan", help="the collection plan: next (what to set up) or status (demos per configuration)")
    p.add_argument("what", choices=("next", "status"))
    p.add_argument("--session", default="demos/d2s.hdf5", help="the session file being collected (record_path)")
    p.add_argument("--per-config", type=int, default=5, help="demos per configuration (recorder.plan_per_config)")
    p.set_defaults(func=cmd_plan)

    sub.add_parser("demo", help="the full demo on the simulated workcell (`workcell demo --help`)", add_help=False)
    sub.add_parser("replay", help="replay a recorded demo through the graph (`workcell replay --help`)",
                   add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "demo":  # everything after `demo` belongs to the demo, --help included
        return cmd_demo(argv[1:])
    if argv and argv[0] == "replay":
        return cmd_replay(argv[1:])
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except (bringup.GraphError, FileNotFoundError) as exc:
        print(f"workcell: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
