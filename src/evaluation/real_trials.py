"""Trials on the physical workcell: the runner does by command what a command can do, the operator the rest.

The operator sets up each trial as told and labels each placement; the runner sets the trial's task and belt
speed, homes the arm, and starts the belt and the policy only once the arm reports it is home (the policy's first
action would otherwise reach an arm still homing, and be refused), then stops both after the trial's horizon (or a
shorter dry-run horizon).
A trial that fails with an error (a command refused, a node not answering) stops the run there: the cell needs
a person, and going on would run the next trial on a cell in an unknown state.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from evaluation.protocol import Trial
from evaluation.results import latest_results
from evaluation.scheduler import InProcess, function_host, run_trials
from evaluation.settings import EvalSettings, recorded

# ---------------------------------------------------------------------- the physical workcell
# What a trial on the physical cell fails with when the cell needs a person: a command refused (RuntimeError,
# OperatorError), a node or service that does not answer (TimeoutError), a lost connection (OSError).
TRIAL_ERRORS = (RuntimeError, TimeoutError, OSError)


def run_real_trial(
    trial: Trial,
    call: Callable[[str], str],
    wait_home: Callable[[float], None],
    ask: Callable[[str], str] = input,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], None] = time.sleep,
    record: bool = False,
    set_param: Callable[[str, str, Any], None] | None = None,
    horizon: float | None = None,
) -> dict[str, Any]:
    """One trial on the physical workcell. The runner does what a command can do: it sets the trial's task on
    the policy node (the prompt names this trial's slot order) and its belt speed, homes the arm, and once the
    arm reports it is home starts the belt, runs the policy for the trial's horizon (``horizon`` s instead, for a
    dry run; the row's ``horizon_s`` says which) and stops both (``call`` calls a Trigger service by name,
    ``wait_home(since)`` returns once the arm says it is home since ``time.monotonic()`` was ``since``, raising
    when it cannot get there, ``set_param(node, parameter, value)`` sets a parameter). The operator does what a
    person must: empties the tray and feeds the workpieces in the order said, then labels each placement. With
    ``record`` (the graph runs the rollout_recorder: ``record_rollouts:=true``) the rollout is recorded from the
    policy's start to its stop."""
    from libero_workcell.contract import Params, Services
    from policy_node.config import TASK_PARAM

    s = trial.spec
    run_for = s.horizon if horizon is None else float(horizon)
    if set_param is not None:
        set_param("policy_node", TASK_PARAM, s.language_instruction)
        set_param("conveyor_driver", Params.BELT_SPEED, float(trial.belt_speed))
    asked = time.monotonic()
    call(Services.ARM_HOME)
    say(
        f"trial {trial.index}: the arm is homing and the belt is set to {trial.belt_speed:g} m/s; feed "
        f"{', '.join(s.arriving_words)} (in that order), every {s.arrival_interval:g} s from the start; tray left "
        f"to right: {', '.join(s.tray_words)}"
    )
    ask("empty the tray, have the workpieces ready and the arm at rest at home, then press Enter to start ")
    wait_home(asked)  # the arm's own word: homing over (/aubo/mode), its joints at home; not the operator's eye
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
    wait_home: Callable[[float], None],
    set_param: Callable[[str, str, Any], None] | None = None,
    record: bool = False,
    horizon: float | None = None,
    **io: Any,
) -> tuple[list[dict[str, Any]], str | None]:
    """The trials not yet in ``out_dir``'s results, one after another on the physical cell (:func:`run_real_trial`;
    ``io``: its ``ask``, ``say``, ``sleep``; each row records ``settings`` as settings.recorded does). Returns
    (every result, old and new; None, or why the run stopped): a trial that fails with an error stops the run
    there, unrecorded, so the same command run again starts with it once a person has seen to the cell."""

    def one(trial: Trial, _out: Path, _domain: int) -> dict[str, Any]:
        try:
            row = run_real_trial(trial, call, wait_home, record=record, set_param=set_param, horizon=horizon, **io)
        except TRIAL_ERRORS as exc:
            raise _TrialError(trial, exc) from exc
        return {**row, "settings": recorded(settings)}

    pool = InProcess(function_host(one), out_dir, 0)  # the graph is the operator's, on the shell's domain
    try:
        return run_trials(trials, out_dir, pool, progress=False, stop_on_failure=True, max_attempts=1), None
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
