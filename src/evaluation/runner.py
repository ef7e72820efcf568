"""Running the protocol: every trial through the deploy graph, results kept as they come, a run resumable.

Simulated workcell (:func:`run_sim_trial`): one fresh graph per trial (deploy_sim's: the world in the trial's
task, policy_node against the policy server, the rollout_recorder), on its own loopback DDS domain, on sim
time in lockstep (docs/sim_time.md), as fast as the machine allows: the world's first episode is the trial,
the policy drives it from its first step and the rollout recorder records it whole; the runner waits for the
world to report the episode done (its horizon comes from the belt schedule) and the rollout saved, and reads
the outcome from the world's predicates. A trial's outcome does not depend on the machine or its load.
Trials run ``workers`` at a time, each in a process of its own on its own domain.

Physical workcell (:func:`run_real_trials`): the operator sets up each trial as told and labels each
placement; the runner starts and stops the policy around the trial's horizon (or a shorter dry-run horizon).
A trial that fails with an error (a command refused, a node not answering) stops the run there: the cell needs
a person, and going on would run the next trial on a cell in an unknown state.

Every finished trial is one line of ``results.jsonl`` (written and flushed at once); a rerun with the same
output folder skips the trials there, so an interrupted evaluation resumes where it stopped. A trial that fails
(its trial function raises: a graph that did not come up, a worker process that died) is a line too, with
``failed`` (the reason) and no outcome; the others go on, and a rerun tries the failed ones again.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.connection
import os
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evaluation.protocol import Trial

RESULTS_FILE = "results.jsonl"
START_TIMEOUT = 60.0  # s for a trial's graph to come up
CHILD_STOP_TIMEOUT = 30.0  # s an interrupted trial's process has to stop its graph before it is terminated


@dataclass(frozen=True)
class EvalSettings:
    """What is recorded with the results: enough to know what was evaluated, and how."""

    checkpoint: str = "builtin:expert"  # the checkpoint's name (the server's; the local server's built-in)
    policy_url: str = ""  # "" in sim: the local server; else the server every trial connects to
    mode: str = "async"
    replan_steps: int = 5
    preference: str = ""
    extra: dict[str, str] = field(default_factory=dict)  # further graph overrides, NAME:=VALUE


def load_results(out_dir: Path) -> list[dict[str, Any]]:
    """Every line of an earlier run, failed trials' included, in order (a torn line, from a kill mid-write, is
    ignored)."""
    path = out_dir / RESULTS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def latest_results(out_dir: Path) -> list[dict[str, Any]]:
    """Each trial's last line (a retry's supersedes the failure before it), in trial order."""
    latest = {int(r["trial"]["index"]): r for r in load_results(out_dir)}
    return [latest[k] for k in sorted(latest)]


def failed_row(trial: Trial, exc: BaseException, wall_s: float | None) -> dict[str, Any]:
    """The line of a trial whose trial function raised: which trial (its fields: cheap, unlike the task that
    ``as_dict`` derives), the reason, and where (the traceback's last lines)."""
    tb = "".join(traceback.format_exception(exc)[-3:])[-2000:]
    return {"trial": asdict(trial), "failed": f"{type(exc).__name__}: {exc}", "traceback": tb, "wall_s": wall_s}


def append_result(out_dir: Path, row: dict[str, Any]) -> None:
    path = out_dir / RESULTS_FILE
    torn = path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if torn else "") + json.dumps(row) + "\n")  # after a torn line, on a line of its own
        f.flush()
        os.fsync(f.fileno())


def run_trials(
    trials: Sequence[Trial],
    out_dir: Path,
    run_trial: Callable[[Trial, Path, int], dict[str, Any]],
    workers: int = 1,
    domains: Iterable[int] | None = None,
    progress: bool = True,
    stop_on_failure: bool = False,
) -> list[dict[str, Any]]:
    """Run the trials ``out_dir``'s results do not hold yet (or hold as failed), ``workers`` at a time; every result
    written as it comes. ``run_trial(trial, out_dir, domain_id)`` returns the result row; one that raises is
    written as a failed row (:func:`failed_row`) and the run goes on. ``stop_on_failure`` (one at a time only:
    the physical cell): the exception ends the run instead, that trial unrecorded. Returns each trial's latest
    row (:func:`latest_results`)."""
    from tqdm import tqdm

    out_dir.mkdir(parents=True, exist_ok=True)
    done = {int(r["trial"]["index"]) for r in load_results(out_dir) if not r.get("failed")}
    todo = [t for t in trials if t.index not in done]
    pool = list(domains) if domains is not None else [_domain_for(k) for k in range(max(1, workers))]
    if len(pool) < max(1, workers):
        raise ValueError(f"{workers} workers need as many DDS domains, got {pool}")
    if stop_on_failure and workers > 1:
        raise ValueError("stop_on_failure runs one trial at a time: workers must be 1")
    bar = tqdm(total=len(trials), initial=len(trials) - len(todo), desc="trials", unit="trial", disable=not progress)

    def finished(row: dict[str, Any]) -> None:
        append_result(out_dir, row)
        bar.update()

    if workers <= 1:
        for t in todo:
            t0 = time.monotonic()
            try:
                row = run_trial(t, out_dir, pool[0])
            except Exception as exc:  # one trial's failure is its own line; the others go on
                if stop_on_failure:
                    raise
                row = failed_row(t, exc, time.monotonic() - t0)
            finished(row)
    else:
        _run_in_processes(todo, out_dir, run_trial, pool[:workers], finished)
    bar.close()
    return latest_results(out_dir)


def _domain_for(worker: int) -> int:
    from libero_workcell import dds

    return dds.DOMAIN_ID_MIN + (dds.per_run_domain_id() - dds.DOMAIN_ID_MIN + 1 + worker) % (
        dds.DOMAIN_ID_MAX - dds.DOMAIN_ID_MIN + 1
    )


def _run_in_processes(todo: Sequence[Trial], out_dir: Path, run_trial: Callable[[Trial, Path, int], dict[str, Any]],
                      domains: list[int], finished: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
    """Each trial in a fresh process of its own (spawn: no rclpy state forked), on a DDS domain no other running
    trial has, ``len(domains)`` at a time; each row handed to ``finished`` as it comes. A process that dies
    fails its own trial only (a shared worker pool would fail every trial in it)."""
    ctx = multiprocessing.get_context("spawn")
    queue, free = list(todo), list(domains)
    running: dict[Any, tuple[Any, Trial, int, float]] = {}  # receiving end -> (process, trial, domain, start)
    try:
        while queue or running:
            while queue and free:
                trial, domain = queue.pop(0), free.pop(0)
                recv, send = ctx.Pipe(duplex=False)
                proc = ctx.Process(target=_trial_process, args=(run_trial, trial, out_dir, domain, send),
                                   name=f"trial-{trial.index}")  # fmt: skip
                proc.start()
                send.close()  # only the child holds it now: its death reads as EOF here
                running[recv] = (proc, trial, domain, time.monotonic())
            for conn in multiprocessing.connection.wait(list(running)):
                proc, trial, domain, t0 = running.pop(conn)
                try:
                    row = conn.recv()
                except Exception as exc:  # EOF: it died before it could answer
                    proc.join()
                    why = f"died (exit code {proc.exitcode})" if isinstance(exc, EOFError) else f"sent garbage ({exc})"
                    row = failed_row(trial, ChildProcessError(f"the trial's process {why}"), time.monotonic() - t0)
                conn.close()
                proc.join()
                free.append(domain)
                finished(row)
    finally:
        for proc, *_ in running.values():  # interrupted: the trials stop their graphs on the same Ctrl-C
            proc.join(timeout=CHILD_STOP_TIMEOUT)
            if proc.is_alive():
                proc.terminate()
                proc.join()


def _trial_process(run_trial: Callable[[Trial, Path, int], dict[str, Any]], trial: Trial, out_dir: Path, domain: int,
                   send: Any) -> None:  # fmt: skip
    """A trial's process: its row, or its failed row (made here: the exception itself may not survive pickling)."""
    t0 = time.monotonic()
    try:
        row = run_trial(trial, out_dir, domain)
    except Exception as exc:
        row = failed_row(trial, exc, time.monotonic() - t0)
    send.send(row)
    send.close()


# ---------------------------------------------------------------------- the simulated workcell
def sim_overrides(trial: Trial, settings: EvalSettings, out_dir: Path, port: int) -> dict[str, str]:
    """The deploy graph's arguments for one trial."""
    from policy_node.clients import local_url
    from workcell import launch_presets

    local = not settings.policy_url
    o = {k: str(v) for k, v in launch_presets.DEPLOY_SIM.items()}
    o.update(
        {
            "policy_local_server": str(local).lower(),
            "policy_port": str(port),
            "policy_url": local_url(port) if local else settings.policy_url,
            "policy_autostart": "true",  # in lockstep: the policy drives the world's episode from its first step
            "record_rollouts": "true",  # ... and the rollout recorder records it whole (follow_episodes)
            "real_time_factor": "0",
            "record_path": str(out_dir / "rollouts" / f"trial_{trial.index:03d}.hdf5"),
            "policy_timing": str(out_dir / "timing" / f"trial_{trial.index:03d}.jsonl"),
            "belt_speed": f"{trial.belt_speed:g}",
            "preference": trial.preference or settings.preference,
            "sim_link": f"eval_{os.getpid()}_{trial.index}",
            "sim_world.seed": str(trial.seed),
            "sim_world.combination": str(trial.combination),
            "sim_world.slot_permutation": json.dumps(list(trial.slot_permutation)),
            "policy_node.policy.mode": settings.mode,
            "policy_node.policy.replan_steps": str(settings.replan_steps),
        }
    )
    o.update(settings.extra)
    return o


def run_sim_trial(trial: Trial, out_dir: Path, domain_id: int, settings: EvalSettings | None = None) -> dict[str, Any]:
    """One trial on the simulated workcell, on DDS domain ``domain_id`` (this process's env is set for it)."""
    from libero_workcell import dds
    from libero_workcell.loopback import free_port
    from workcell.bringup import Graph
    from workcell.launcher import launch

    settings = settings or EvalSettings()
    env = dds.apply_loopback_env(domain_id)
    rollouts = out_dir / "rollouts" / f"trial_{trial.index:03d}.hdf5"
    if rollouts.exists():  # an interrupted attempt: kept aside, never overwritten
        rollouts.rename(rollouts.with_name(f"{rollouts.stem}.interrupted-{int(time.time())}.hdf5"))
    overrides = sim_overrides(trial, settings, out_dir, free_port())
    t0 = time.monotonic()
    graph = launch(Graph.load().resolve(overrides), env=env, log_dir=out_dir / "logs" / f"trial_{trial.index:03d}")
    try:
        with _Probe(f"eval_{trial.index}") as probe:
            outcome, episode = probe.run_episode(trial.spec.horizon, graph.check)
    finally:
        graph.stop(timeout=20)
    return {
        "trial": trial.as_dict(),
        "outcome": outcome,
        "sim_time": episode["sim_time"],
        "world_horizon": episode.get("horizon"),
        "aborted": episode["metrics"].get("aborted"),  # a node of the loop stopped answering (the reason)
        "wall_s": time.monotonic() - t0,
        "rollout": str(rollouts),
        "timing": overrides["policy_timing"],
        "settings": asdict(settings),
    }


class _Probe:
    """The runner's rclpy node on the trial's domain: services and the episode report."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> _Probe:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import String

        from libero_workcell.contract import Qos, Topics
        from libero_workcell.ros_qos import qos

        self._ctx = Context()
        rclpy.init(context=self._ctx)
        self.node = rclpy.create_node(self.name, context=self._ctx)
        self._ex = SingleThreadedExecutor(context=self._ctx)
        self._ex.add_node(self.node)
        self.episode: dict[str, Any] | None = None
        self.recorder: dict[str, Any] | None = None
        self.node.create_subscription(
            String, Topics.SIM_EPISODE, lambda m: setattr(self, "episode", json.loads(m.data)), qos(Qos.LATCHED)
        )
        self.node.create_subscription(
            String, Topics.RECORDER_STATUS, lambda m: setattr(self, "recorder", json.loads(m.data)), qos(Qos.LATCHED)
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self._ex.shutdown()
        self.node.destroy_node()
        self._ctx.try_shutdown()

    def spin(self, until: Callable[[], Any], timeout: float, what: str, check: Callable[[], None]) -> None:
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            check()
            self._ex.spin_once(timeout_sec=0.05)

    def call(self, service: str, check: Callable[[], None]) -> str:
        from std_srvs.srv import Trigger

        client = self.node.create_client(Trigger, service)
        try:
            self.spin(client.service_is_ready, START_TIMEOUT, service, check)
            future = client.call_async(Trigger.Request())
            self.spin(future.done, 10.0, f"{service} to answer", check)
            res = future.result()
            if not res.success:
                raise RuntimeError(f"{service} refused: {res.message}")
            return res.message
        finally:
            self.node.destroy_client(client)

    def set_param(self, node: str, name: str, value: Any) -> None:
        from workcell.operator_cli import GraphClient, OperatorError

        try:
            ok, reason = GraphClient(self.node, self._ex).set_parameter(node, name, value)
        except OperatorError as exc:
            ok, reason = False, str(exc)
        if not ok:
            raise RuntimeError(f"{node}.{name} := {value!r} refused: {reason}")

    def run_episode(self, horizon: float, check: Callable[[], None]) -> tuple[dict[str, Any], dict[str, Any]]:
        """The world's first episode, driven by the policy and recorded whole (lockstep: both follow the world's
        episodes); its outcome once the world reports it done and the rollout is saved."""
        self.spin(
            lambda: self.episode is not None and self.recorder is not None,
            START_TIMEOUT,
            "the world and the recorder",
            check,
        )
        self.spin(
            lambda: (
                self.episode.get("done")
                and int(self.recorder.get("num_demos", 0)) >= 1
                and not self.recorder.get("saving")
                and not self.recorder.get("recording")
            ),
            4 * horizon + 60,  # wall s: sim time runs as fast as the machine allows, slower under load
            "the episode's end and its rollout saved",
            check,
        )
        episode = self.episode
        m = episode["metrics"]
        outcome = {
            "placed": [bool(p) for p in m["placed"]],
            "PCR_S": float(m["PCR_S"]),
            "pcr_s_init": float(m.get("pcr_s_init", 0.0)),
            "SR": float(m["SR"]) if not m.get("aborted") else 0.0,
            "PCR_T": float(m["PCR_T"]),
        }
        return outcome, episode


# ---------------------------------------------------------------------- the physical workcell
# What a trial on the physical cell fails with when the cell needs a person: a command refused (RuntimeError,
# OperatorError), a node or service that does not answer (TimeoutError), a lost connection (OSError).
TRIAL_ERRORS = (RuntimeError, TimeoutError, OSError)


def run_real_trial(
    trial: Trial,
    call: Callable[[str], str],
    ask: Callable[[str], str] = input,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    record: bool = False,
    set_param: Callable[[str, str, Any], None] | None = None,
    horizon: float | None = None,
) -> dict[str, Any]:
    """One trial on the physical workcell. The runner does what a command can do: it sets the trial's task on
    the policy node (the prompt names this trial's slot order) and its belt speed, homes the arm, starts the
    belt, runs the policy for the trial's horizon (``horizon`` s instead, for a dry run; the row's
    ``horizon_s`` says which) and stops both (``call`` calls a Trigger service by name,
    ``set_param(node, parameter, value)`` sets a parameter). The operator does what a person must: empties the
    tray and feeds the workpieces in the order said, then labels each placement. With ``record`` (the graph
    runs the rollout_recorder: ``record_rollouts:=true``) the rollout is recorded from the policy's start to
    its stop."""
    from libero_workcell.contract import Params, Services
    from policy_node.config import TASK_PARAM

    s = trial.spec
    run_for = s.horizon if horizon is None else float(horizon)
    if set_param is not None:
        set_param("policy_node", TASK_PARAM, s.language_instruction)
        set_param("conveyor_driver", Params.BELT_SPEED, float(trial.belt_speed))
    call(Services.ARM_HOME)
    say(
        f"trial {trial.index}: the arm is homing and the belt is set to {trial.belt_speed:g} m/s; feed "
        f"{', '.join(s.arriving_words)} (in that order), every {s.arrival_interval:g} s from the start; tray left "
        f"to right: {', '.join(s.tray_words)}"
    )
    ask("empty the tray, have the workpieces ready and the arm at rest at home, then press Enter to start ")
    call(Services.CONVEYOR_START)
    t0 = time.monotonic()
    try:
        if record:
            call(Services.RECORDER_START)
        call(Services.POLICY_START)
        sleep(run_for)
    finally:  # whatever happens (Ctrl-C, a refused start among it), the policy and the belt stop
        _call_each(call, (Services.POLICY_STOP, Services.CONVEYOR_STOP))
    if record:
        call(Services.RECORDER_SAVE)
    placed = [_yes(ask, f"was the {w} placed in its slot? [y/n] ") for w in s.arriving_words]
    valid = _count(ask, f"how many of the {s.num_workpieces} slots hold a valid workpiece? ", s.num_workpieces)
    outcome = {"placed": placed, "PCR_S": valid / s.num_workpieces, "pcr_s_init": 0.0, "labels": "operator"}
    return {"trial": trial.as_dict(), "outcome": outcome, "horizon_s": run_for, "wall_s": time.monotonic() - t0}


def _call_each(call: Callable[[str], str], services: Sequence[str]) -> None:
    """Call every one of ``services``, even when one fails; then raise the first failure."""
    failed: list[BaseException] = []
    for service in services:
        try:
            call(service)
        except TRIAL_ERRORS as exc:
            failed.append(exc)
    if failed:
        raise failed[0]


class _TrialError(Exception):
    def __init__(self, trial: Trial, error: BaseException) -> None:
        super().__init__(f"trial {trial.index} failed: {error}")


def run_real_trials(
    trials: Sequence[Trial],
    out_dir: Path,
    settings: EvalSettings,
    call: Callable[[str], str],
    set_param: Callable[[str, str, Any], None] | None = None,
    record: bool = False,
    horizon: float | None = None,
    **io: Any,
) -> tuple[list[dict[str, Any]], str | None]:
    """The trials not yet in ``out_dir``'s results, one after another on the physical cell (:func:`run_real_trial`;
    ``io``: its ``ask``, ``say``, ``sleep``). Returns (every result, old and new; None, or why the run stopped):
    a trial that fails with an error stops the run there, unrecorded, so the same command run again starts with
    it once a person has seen to the cell."""

    def one(trial: Trial, _out: Path, _domain: int) -> dict[str, Any]:
        try:
            row = run_real_trial(trial, call, record=record, set_param=set_param, horizon=horizon, **io)
        except TRIAL_ERRORS as exc:
            raise _TrialError(trial, exc) from exc
        return {**row, "settings": asdict(settings)}

    try:
        return run_trials(trials, out_dir, one, workers=1, domains=[0], progress=False, stop_on_failure=True), None
    except _TrialError as failed:
        return latest_results(out_dir), str(failed)


def _yes(ask: Callable[[str], str], prompt: str) -> bool:
    while True:
        a = ask(prompt).strip().lower()
        if a in ("y", "yes", "n", "no"):
            return a.startswith("y")


def _count(ask: Callable[[str], str], prompt: str, most: int) -> int:
    while True:
        a = ask(prompt).strip()
        if a.isdigit() and 0 <= int(a) <= most:
            return int(a)
