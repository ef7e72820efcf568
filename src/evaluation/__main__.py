"""``python -m evaluation {sim,real} --out DIR [...]``: the paper's evaluation protocol, results in DIR.

``sim``: every trial on the simulated workcell, against the local policy server (the scripted expert's chunks) or
``--policy-url``: ``--workers`` processes on this machine or Ray actors across a cluster (``--ray``), each keeping
one deploy graph warm on a DDS domain of its own (evaluation.warm_graph); a trial whose graph or worker fails runs
again on a fresh one, up to ``--max-attempts``.
``real``: on the physical workcell, with its graph already running (``ros2 launch libero_workcell
deploy_real.launch.py policy_autostart:=false ...``): the operator sets up each trial and labels each
placement (``--horizon S``: a dry run of S seconds per trial); a trial that fails with an error stops the run
there, for a person to see to the cell (the same command then goes on from it). Either way DIR gets
``results.jsonl`` (one line per trial, as it finishes: a rerun resumes), ``results.json`` (settings, trials,
metrics, failed trials), ``results.png``, and the printed table; in sim also every rollout (``rollouts/``, LIBERO's HDF5
layout) and policy_node's per-step timing (``timing/``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from evaluation.preference_scores import REPORT_DIR, sa_line, score_trials
from evaluation.protocol import TRIALS_PER_SPEED, Trial, protocol_trials
from evaluation.report import PLOT_FILE, plot, table, write_results
from evaluation.scheduler import MAX_ATTEMPTS, LocalWorkers, run_trials
from evaluation.settings import EvalSettings, recorded
from evaluation.warm_graph import warm_host
from libero_workcell.task import SPEEDS
from policy_node.clients import scheme_of
from preferences.catalogue import PreferenceError
from workcell.cluster import code_version


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m evaluation", description=__doc__.splitlines()[0])
    ap.add_argument("where", choices=("sim", "real"))
    ap.add_argument("--out", type=Path, required=True, help="results folder (an existing one is resumed)")
    ap.add_argument("--speeds", type=float, nargs="+", default=list(SPEEDS))
    ap.add_argument("--trials-per-speed", type=int, default=TRIALS_PER_SPEED)
    ap.add_argument("--workers", type=int, default=None,
                    help="sim: trials at once, each worker a warm graph on its own DDS domain (default: 1 here; with "
                         "--ray, one per CPU of the cluster)")  # fmt: skip
    ap.add_argument("--ray", default=None, metavar="auto|HOST:PORT",
                    help="sim: run the trials on a Ray cluster, one warm graph per actor (docs/cluster.md): auto joins "
                         "this machine's cluster (or starts one on loopback); HOST:PORT joins that head")
    ap.add_argument("--max-attempts", type=int, default=MAX_ATTEMPTS,
                    help="sim: attempts per trial when its graph or worker fails (a harness failure, not the policy's)")
    ap.add_argument("--checkpoint", default=None, help="the checkpoint's name, recorded with the results")
    ap.add_argument("--policy-url", default="", help="sim: a policy server instead of the local one")
    ap.add_argument("--mode", choices=("async", "sync"), default="async")
    ap.add_argument("--replan-steps", type=int, default=5)
    ap.add_argument("--preference", default="",
                    help="LIBERO-PeRM preference for every trial: a catalogue spec, or two joined by '+' (config/"
                         "preferences/catalogue.yaml); SR and SA are scored from the recorded rollouts")  # fmt: skip
    ap.add_argument("--set", action="append", default=[], metavar="NAME:=VALUE", help="sim: a graph override")
    ap.add_argument(
        "--record", action="store_true", help="real: record each rollout (the graph runs with record_rollouts:=true)"
    )
    ap.add_argument("--horizon", type=float, default=None, metavar="S",
                    help="real: run the policy S seconds per trial instead of the trial's horizon (a dry run); "
                         "each result records the horizon it ran as horizon_s")  # fmt: skip
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--console", type=int, default=None, metavar="PORT",
                    help="show the progress on the console page at http://127.0.0.1:PORT (docs/console.md)")
    return ap.parse_args(argv)


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM stops a run as Ctrl-C does: the workers stop their graphs, results are kept


def main(argv: Sequence[str] | None = None) -> int:
    if threading.current_thread() is not threading.main_thread():
        return _main(argv)
    previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return _main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _main(argv: Sequence[str] | None) -> int:
    a = _parse(argv)
    extra = {}
    for item in a.set:
        name, sep, value = item.partition(":=")
        if not sep:
            print(f"evaluation: --set wants NAME:=VALUE, got {item!r}", file=sys.stderr)
            return 2
        extra[name] = value
    if a.horizon is not None and (a.where != "real" or not 0 < a.horizon < float("inf")):
        print("evaluation: --horizon S is for the physical cell (real), S > 0 seconds; a simulated trial runs its "
              "task's horizon", file=sys.stderr)  # fmt: skip
        return 2
    if a.max_attempts < 1 or (a.workers is not None and a.workers < 1):
        print("evaluation: --max-attempts and --workers must be >= 1", file=sys.stderr)
        return 2
    if a.policy_url:  # a scheme no policy client speaks would fail every trial's graph: refused once, here
        try:
            scheme_of(a.policy_url)
        except ValueError as exc:
            print(f"evaluation: --policy-url: {exc}", file=sys.stderr)
            return 2
    checkpoint = a.checkpoint or ("builtin:expert" if a.where == "sim" and not a.policy_url else "unnamed")
    settings = EvalSettings(checkpoint, a.policy_url, a.mode, a.replan_steps, a.preference, extra)
    trials = protocol_trials(tuple(a.speeds), a.trials_per_speed, a.preference)
    try:
        for trial in trials:  # a preference that cannot be scored, or does not fit a trial's task, stops it here
            trial.spec  # noqa: B018
    except PreferenceError as exc:
        print(f"evaluation: --preference: {exc}", file=sys.stderr)
        return 2
    a.out.mkdir(parents=True, exist_ok=True)
    console = None
    if a.console is not None:
        from evaluation.live_console import EvaluationConsole

        try:
            console = EvaluationConsole(a.out, len(trials), a.console)
        except (OSError, RuntimeError) as exc:
            print(f"evaluation: --console: {exc}", file=sys.stderr)
            return 2
        print(f"evaluation: progress at {console.url}", flush=True)
    try:
        return _evaluate(a, settings, trials)
    finally:
        if console is not None:
            console.close()


def _evaluate(a: argparse.Namespace, settings: EvalSettings, trials: list[Trial]) -> int:
    if a.where == "sim":
        try:
            pool = _sim_pool(a, settings)
        except (ValueError, RuntimeError, ConnectionError) as exc:
            print(f"evaluation: {exc}", file=sys.stderr)
            return 2
        a.workers = pool.slots  # what ran: the workers asked, or the cluster's actors
        if a.ray is not None:
            print(f"evaluation: {pool.description}; {pool.slots} actors", flush=True)
        rows = run_trials(trials, a.out, pool, progress=not a.no_progress, max_attempts=a.max_attempts)
    else:
        try:
            rows, stopped, settings = _run_real(trials, a.out, settings, a.record, a.horizon)
        except (RuntimeError, TimeoutError) as exc:  # the graph's policy node or arm could not be read
            print(f"evaluation: {exc}", file=sys.stderr)
            return 2
        if stopped is not None:
            print(f"evaluation: {stopped}\nevaluation: stopped there: the cell needs a person (check it, `workcell "
                  f"status`); the finished trials are kept in {a.out}; run the same command again to go on from this "
                  "trial", file=sys.stderr)  # fmt: skip
        if not rows:
            return 1
    failed = [r for r in rows if r.get("failed")]
    rows = [r for r in rows if not r.get("failed")]  # the metrics count trials that ran, not a harness failure
    doc = write_results(
        a.out,
        rows,
        {
            **recorded(settings),  # (a URL's credentials redacted)
            "where": a.where,
            "speeds": a.speeds,
            "trials_per_speed": a.trials_per_speed,
            "workers": a.workers,
            "ray": a.ray,  # None: on this machine
            "horizon": a.horizon,  # real: a dry run's horizon per trial (None: each trial's own)
            "commit": code_version(),  # with a hash of uncommitted changes, as a cluster node reports it
        },
        failed=failed,
    )
    plot(doc["metrics"], a.out / PLOT_FILE, f"{settings.checkpoint} on the {a.where} workcell ({len(rows)} trials)")
    print(table(doc["metrics"]))
    prefs = score_trials(rows, a.out) if (a.where == "sim" or a.record) else None
    if prefs is not None:  # SR and SA from the recorded rollouts, beside the task metrics
        doc = write_results(a.out, rows, doc["settings"], prefs, failed=failed)
        print(sa_line(prefs) + f"; report {a.out / REPORT_DIR / 'report.html'}")
    aborted = [(r["trial"]["index"], r["aborted"]) for r in rows if r.get("aborted")]
    for index, reason in aborted:  # a node of the loop stopped answering: the trial failed for that, not the policy
        print(f"warning: trial {index} ended early: {reason}")
    for r in failed:  # not run to the end: not in the metrics; a rerun of the same command tries them again
        print(f"error: trial {r['trial']['index']} failed: {r['failed']}", file=sys.stderr)
    if failed:
        print(f"{len(failed)} of {len(trials)} trials failed (results.json: failed_trials); run the same command "
              "again to retry them (finished trials are kept)", file=sys.stderr)  # fmt: skip
    print(f"results: {a.out / 'results.json'}, plot: {a.out / PLOT_FILE}")
    return 0 if len(rows) == len(trials) else 1


def _sim_pool(a: argparse.Namespace, settings: EvalSettings):
    """Where the simulated trials run: ``--workers`` processes here, or Ray actors (only then is Ray imported)."""
    if a.ray is None:
        return LocalWorkers(warm_host(settings), a.out, a.workers or 1)
    from evaluation.ray_pool import RayActors

    return RayActors(warm_host(settings), a.out, a.ray, a.workers)


def _run_real(trials, out: Path, settings: EvalSettings, record: bool, horizon: float | None):
    """The trials on the running graph, with what its policy node runs as the settings (its server's URL, mode,
    replan steps: what the results record); (rows, why the run stopped or None, those settings)."""
    from evaluation.probe import GraphProbe
    from evaluation.real_trials import run_real_trials
    from policy_node.config import TASK_PARAM

    prefix = TASK_PARAM.partition(".")[0]  # policy_node's parameters are its PolicyConfig's fields: policy.<field>
    with GraphProbe("evaluation") as probe:
        probe.watch_arm()
        policy = probe.get_params("policy_node", [f"{prefix}.{k}" for k in ("url", "mode", "replan_steps")])
        url, mode, replan_steps = policy.values()
        settings = replace(settings, policy_url=str(url), mode=str(mode), replan_steps=int(replan_steps))
        home_q = list(probe.get_params("aubo_bridge", ("home_q",))["home_q"])
        rows, stopped = run_real_trials(trials, out, settings, lambda service: probe.call(service, lambda: None),
                                        lambda since: probe.wait_home(home_q, since, lambda: None),
                                        set_param=probe.set_param, record=record, horizon=horizon)  # fmt: skip
    return rows, stopped, settings


if __name__ == "__main__":
    raise SystemExit(main())
