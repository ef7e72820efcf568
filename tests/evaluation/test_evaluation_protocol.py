"""The evaluation protocol, its metrics, the report, and resuming an interrupted run."""

from __future__ import annotations

import io
import json
import math
import time
from pathlib import Path

import cv2
import pytest
from evaluation_fakes import trial_dying_once_at_1, trial_failing_at_2, trial_killing_its_process_at_1

from evaluation.metrics import by_speed, summarize
from evaluation.protocol import configurations, protocol_trials
from evaluation.real_trials import run_real_trial
from evaluation.report import plot, table, write_results
from evaluation.results import RESULTS_FILE, load_results
from evaluation.scheduler import MAX_ATTEMPTS, InProcess, LocalWorkers, function_host, run_trials
from libero_workcell.contract import Services
from libero_workcell.task import held_out
from recorder.collection_plan import CollectionPlan


def test_the_protocol_is_8_held_out_configurations_24_trials_and_72_placements_per_speed() -> None:
    configs = configurations()
    assert len(configs) == 8 and len(set(configs)) == 8
    trained = {(c.combination, c.slot_permutation) for c in CollectionPlan().configurations}
    assert not set(configs) & trained  # held out: never collected for training
    trials = protocol_trials()
    assert len(trials) == 48 and [t.index for t in trials] == list(range(48))
    for speed in (0.03, 0.05):
        at = [t for t in trials if t.belt_speed == speed]
        assert len(at) == 24 and sum(t.spec.num_workpieces for t in at) == 72
        assert all(sum(t.configuration == c for t in at) == 3 for c in configs)  # 3 trials each
    assert len({t.seed for t in trials}) == 48
    t = trials[0]
    assert t.slot_permutation in held_out(t.combination)
    # the horizon follows the belt schedule from availability: the first workpiece in reach + 2 intervals +
    # completion + buffer, the same allowances for every policy
    s = t.spec
    assert s.horizon == pytest.approx(s.availability_times[0] + 2 * s.arrival_interval + s.t_complete + s.t_buffer)
    assert s.availability_times[0] > s.first_arrival
    assert t.as_dict()["horizon"] == s.horizon and t.as_dict()["language_instruction"] == s.language_instruction
    with pytest.raises(ValueError, match="trials_per_speed"):
        protocol_trials(trials_per_speed=0)


def test_metrics_follow_the_paper_definitions() -> None:
    outcomes = [
        {"placed": [True, True, True], "PCR_S": 1.0, "pcr_s_init": 0.0},
        {"placed": [True, False, True], "PCR_S": 2 / 3, "pcr_s_init": 0.0},
        {"placed": [True, False, False], "PCR_S": 1 / 3, "pcr_s_init": 0.0},
        {"placed": [False, False, False], "PCR_S": 1 / 3, "pcr_s_init": 1 / 3},  # a pre-filled slot: baseline
    ]
    m = summarize(outcomes)
    assert m["trials"] == 4 and m["planned_placements"] == 12 and m["placements"] == 6
    assert m["SR"] == 0.25 and m["PCR_T"] == 0.5
    assert m["PCR_S"] == pytest.approx((1 + 2 / 3 + 1 / 3 + 1 / 3) / 4) and m["PCR_S_init"] == pytest.approx(1 / 12)
    assert m["reach"] == {1: 0.75, 2: 0.5, 3: 0.25}
    rows = [{"trial": {"belt_speed": s}, "outcome": o} for s, o in zip((0.03, 0.03, 0.05, 0.05), outcomes, strict=True)]
    per = by_speed(rows)
    assert per["0.03"]["SR"] == 0.5 and per["0.05"]["SR"] == 0.0 and per["all"] == m
    assert summarize([]) == {"trials": 0}


def test_the_report_writes_json_a_table_and_a_plot(tmp_path: Path) -> None:
    rows = [
        {"trial": {"index": i, "belt_speed": s}, "outcome": {"placed": p, "PCR_S": sum(p) / 3, "pcr_s_init": 0.0}}
        for i, (s, p) in enumerate([(0.03, [True] * 3), (0.03, [True, False, False]), (0.05, [False] * 3)])
    ]
    failed = [{"trial": {"index": 3, "belt_speed": 0.05}, "failed": "TimeoutError: no graph"}]
    doc = write_results(tmp_path, rows, {"checkpoint": "pi05_industry", "policy_url": "ws://gpu:8000"}, failed=failed)
    back = json.loads((tmp_path / "results.json").read_text())
    assert back["failed_trials"] == [{"index": 3, "reason": "TimeoutError: no graph"}]
    assert back["metrics"]["0.05"]["trials"] == 1  # a failed trial is not in the metrics
    assert back["settings"]["checkpoint"] == "pi05_industry" and len(back["trials"]) == 3
    assert back["metrics"]["0.03"]["SR"] == 0.5 and back["metrics"]["all"]["reach"]["1"] == pytest.approx(2 / 3)
    text = table(back["metrics"])
    assert "0.03 m/s" in text and "0.05 m/s" in text and "0.50" in text.splitlines()[1]
    png = plot(doc["metrics"], tmp_path / "results.png", "test")
    img = cv2.imread(str(png))
    assert img is not None and img.shape[0] > 300 and img.shape[1] > 800 and img.std() > 10


def test_an_interrupted_run_resumes_with_the_trials_it_has_not_finished(tmp_path: Path) -> None:
    trials = protocol_trials((0.05,), trials_per_speed=6)
    ran: list[int] = []

    def fake(trial, out_dir, domain):  # the runner's bookkeeping, not a trial: each result as it comes
        ran.append(trial.index)
        if trial.index == 3 and len(ran) == 4:
            raise KeyboardInterrupt  # the operator stops the first run here
        return {"trial": trial.as_dict(), "outcome": {"placed": [True, True, False]}, "domain": domain}

    with pytest.raises(KeyboardInterrupt):
        run_trials(trials, tmp_path, InProcess(function_host(fake), tmp_path, 7), progress=False)
    assert [r["trial"]["index"] for r in load_results(tmp_path)] == [0, 1, 2]
    with open(tmp_path / RESULTS_FILE, "a") as f:
        f.write('{"trial": {"index": 3')  # a line torn by a kill mid-write is not a result
    rows = run_trials(trials, tmp_path, InProcess(function_host(fake), tmp_path, 7), progress=False)
    assert ran == [0, 1, 2, 3, 3, 4, 5] and [r["trial"]["index"] for r in rows] == list(range(6))
    assert {r["domain"] for r in rows} == {7}
    again = run_trials(trials, tmp_path, InProcess(function_host(fake), tmp_path, 7), progress=False)
    assert again == rows and len(ran) == 7  # all done


def ran(out_dir: Path) -> list[int]:
    return sorted(int(p.name.split("_")[1]) for p in out_dir.glob("ran_*"))


def in_process(fn, out: Path, domain: int = 7) -> InProcess:
    return InProcess(function_host(fn), out, domain)


def test_a_failed_trial_is_tried_again_up_to_the_bound_then_recorded_with_its_reasons_and_a_rerun_retries_only_it(
    tmp_path: Path,
) -> None:
    trials = protocol_trials((0.05,), trials_per_speed=5)
    said: list[str] = []
    rows = run_trials(trials, tmp_path, in_process(trial_failing_at_2, tmp_path), progress=False, say=said.append)
    assert ran(tmp_path) == [0, 1, 3, 4]  # the run went on past the failure
    assert len(load_results(tmp_path)) == 5  # one line per trial: the attempts before the last are not results
    failed = [r for r in rows if r.get("failed")]
    reason = "TimeoutError: timed out after 60 s waiting for the world and the recorder"
    assert [r["trial"]["index"] for r in failed] == [2] and "outcome" not in failed[0]
    assert failed[0]["failed"] == reason and failed[0]["attempts"] == [reason] * MAX_ATTEMPTS
    assert "trial_failing_at_2" in failed[0]["traceback"]
    assert said == [f"trial 2: attempt {k} of {MAX_ATTEMPTS} failed ({reason}); again on a fresh worker"
                    for k in range(1, MAX_ATTEMPTS)]  # fmt: skip
    assert {r["domain"] for r in rows if not r.get("failed")} == {7}
    (tmp_path / "fixed").touch()
    for p in tmp_path.glob("ran_*"):
        p.unlink()
    rows = run_trials(trials, tmp_path, in_process(trial_failing_at_2, tmp_path), progress=False)
    assert ran(tmp_path) == [2]  # only the failed trial again
    assert [r["trial"]["index"] for r in rows] == list(range(5)) and not any(r.get("failed") for r in rows)
    assert len(load_results(tmp_path)) == 6  # the failure stays on record, superseded by the retry
    with pytest.raises(ValueError, match="max_attempts"):
        run_trials(trials, tmp_path, in_process(trial_failing_at_2, tmp_path), progress=False, max_attempts=0)


def test_with_workers_a_dead_worker_fails_its_trial_only_and_is_replaced_for_the_retry(tmp_path: Path) -> None:
    trials = protocol_trials((0.05,), trials_per_speed=3)
    pool = LocalWorkers(function_host(trial_killing_its_process_at_1), tmp_path, 2, domains=[7, 8])
    rows = run_trials(trials, tmp_path, pool, progress=False, max_attempts=2)
    failed = {r["trial"]["index"]: r["attempts"] for r in rows if r.get("failed")}
    assert failed == {1: ["ChildProcessError: the trial's worker process died (exit code 3)"] * 2,
                      2: ["TimeoutError: timed out after 60 s waiting for the world and the recorder"] * 2}  # fmt: skip
    assert ran(tmp_path) == [0] and [r["trial"]["index"] for r in rows] == [0, 1, 2]
    assert len(load_results(tmp_path)) == 3 and {r["domain"] for r in rows if not r.get("failed")} <= {7, 8}
    (tmp_path / "fixed").touch()
    rows = run_trials(trials, tmp_path, LocalWorkers(function_host(trial_failing_at_2), tmp_path, 2, domains=[7, 8]),
                      progress=False)  # fmt: skip
    assert ran(tmp_path) == [0, 1, 2] and not any(r.get("failed") for r in rows)  # only 1 and 2 ran again
    assert len(list(tmp_path.glob("ran_*"))) == 3


def test_a_worker_that_dies_once_is_replaced_and_its_trial_is_recorded_from_the_retry(tmp_path: Path) -> None:
    """What a node crashing under load does to a trial (a simulator's SIGSEGV): one failed attempt, then the trial
    runs on a fresh worker; its row says what failed before it. Workers claim their own DDS domains."""
    trials = protocol_trials((0.05,), trials_per_speed=3)
    rows = run_trials(trials, tmp_path, LocalWorkers(function_host(trial_dying_once_at_1), tmp_path, 2),
                      progress=False)  # fmt: skip
    assert [r["trial"]["index"] for r in rows] == [0, 1, 2] and not any(r.get("failed") for r in rows)
    assert rows[1]["retried"] == ["ChildProcessError: the trial's worker process died (exit code 3)"]
    assert "retried" not in rows[0] and "retried" not in rows[2]
    assert all(1 <= r["domain"] <= 100 for r in rows)  # each worker's own, claimed on this machine


def test_stop_on_failure_ends_the_run_at_a_failed_trial_unrecorded(tmp_path: Path) -> None:
    trials = protocol_trials((0.05,), trials_per_speed=4)
    with pytest.raises(TimeoutError, match="waiting for the world"):
        run_trials(trials, tmp_path, in_process(trial_failing_at_2, tmp_path, 0), progress=False, stop_on_failure=True)
    assert ran(tmp_path) == [0, 1] and [r["trial"]["index"] for r in load_results(tmp_path)] == [0, 1]


def test_a_real_trial_sets_itself_up_by_command_and_asks_the_operator_only_what_a_person_must_do() -> None:
    trials = protocol_trials((0.03,), 8)
    trial = trials[0]
    calls, said, slept, params, prompts = [], [], [], [], []

    def ask(prompt: str) -> str:
        prompts.append(prompt)
        return next(answers)

    answers = iter(["", "y", "maybe", "n", "yes", "4", "2"])
    homed = lambda since: calls.append("home reached")  # noqa: E731
    row = run_real_trial(trial, calls.append, homed, ask=ask, say=said.append, sleep=slept.append,
                         set_param=lambda *p: params.append(p))  # fmt: skip
    # the task (the prompt names this trial's slot order) and the belt speed by command, before anything moves
    assert params == [("policy_node", "policy.task", trial.spec.language_instruction),
                      ("conveyor_driver", "belt_speed", 0.03)]  # fmt: skip
    assert calls == [Services.ARM_HOME, "home reached", Services.CONVEYOR_START, Services.POLICY_START,
                     Services.POLICY_STOP, Services.CONVEYOR_STOP] and slept == [trial.spec.horizon]  # fmt: skip
    assert row["outcome"]["placed"] == [True, False, True] and row["outcome"]["PCR_S"] == pytest.approx(2 / 3)
    assert "tray left to right" in said[0] and "0.03 m/s" in said[0]
    assert "empty the tray" in prompts[0] and not any("belt running" in p or "reset the workcell" in p for p in prompts)
    other = next(t for t in trials if t.spec.language_instruction != trial.spec.language_instruction)
    calls.clear()
    params.clear()
    answers = iter(["", "y", "y", "y", "3"])
    row = run_real_trial(other, calls.append, homed, ask=ask, say=said.append, sleep=slept.append, record=True,
                         set_param=lambda *p: params.append(p))  # fmt: skip
    assert params[0] == ("policy_node", "policy.task", other.spec.language_instruction)  # a new prompt per trial
    assert calls == [Services.ARM_HOME, "home reached", Services.CONVEYOR_START, Services.RECORDER_START,
                     Services.POLICY_START, Services.POLICY_STOP, Services.CONVEYOR_STOP,
                     Services.RECORDER_SAVE]  # fmt: skip
    assert row["outcome"]["placed"] == [True] * 3 and row["outcome"]["PCR_S"] == 1.0


def test_a_real_trial_stops_the_policy_and_the_belt_when_interrupted() -> None:
    trial = protocol_trials((0.03,), 1)[0]
    calls = []

    def interrupted(_s: float) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_real_trial(trial, calls.append, lambda since: None, ask=lambda p: "", say=lambda m: None,
                       sleep=interrupted)  # fmt: skip
    assert calls[-2:] == [Services.POLICY_STOP, Services.CONVEYOR_STOP]


def test_a_real_evaluation_runs_a_dry_run_horizon_and_stops_at_a_trial_that_fails_for_a_person(
        tmp_path, monkeypatch, capsys) -> None:  # fmt: skip
    """`python -m evaluation real --horizon S`: each trial runs S seconds (recorded as horizon_s); a trial whose
    start is refused stops the run there with the belt and policy stopped, unrecorded, so a rerun goes on from it."""
    import evaluation.__main__ as cli
    import evaluation.probe as probe

    calls: list[str] = []
    refuse = {"index": 1}  # the trial whose policy start the node refuses

    class Probe:  # the runner's rclpy node, standing in: services by name, parameters, the arm's word on homing
        def __init__(self, _name: str) -> None:
            self.task = ""

        def watch_arm(self) -> None:
            calls.append("watch arm")

        def get_params(self, node: str, names):
            graph = {"policy_node": {"policy.url": "ws://lab:s3cret@gpu-host:8000", "policy.mode": "sync",
                                     "policy.replan_steps": 8},
                     "aubo_bridge": {"home_q": [0.0, 0.1, 1.2, 0.3, 1.5, 0.0]}}
            return {n: graph[node][n] for n in names}  # (the order asked)

        def wait_home(self, home_q, since: float, _check) -> None:
            assert home_q == [0.0, 0.1, 1.2, 0.3, 1.5, 0.0] and since <= time.monotonic()
            calls.append("home reached")

        def __enter__(self):
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def call(self, service: str, _check) -> str:
            calls.append(service)
            if service == Services.POLICY_START and len([c for c in calls if c == Services.ARM_HOME]) == \
                    refuse["index"] + 1:  # fmt: skip
                raise RuntimeError(f"{service} refused: no task: ...")
            return "ok"

        def set_param(self, node: str, name: str, value) -> None:
            pass

    monkeypatch.setattr(probe, "GraphProbe", Probe)
    monkeypatch.setattr("sys.stdin", io.StringIO("\ny\ny\ny\n3\n\n"))  # the operator's answers
    argv = ["real", "--out", str(tmp_path), "--speeds", "0.03", "--trials-per-speed", "3", "--horizon", "0.01"]
    assert cli.main(argv) == 1
    err = capsys.readouterr().err
    assert "trial 1 failed: /policy/start refused: no task" in err and "the cell needs a person" in err
    (row,) = load_results(tmp_path)  # trial 1 is not recorded: a rerun starts with it; trial 2 never ran
    assert row["trial"]["index"] == 0 and row["horizon_s"] == 0.01 and row["outcome"]["placed"] == [True] * 3
    assert calls[-3:] == [Services.POLICY_START, Services.POLICY_STOP, Services.CONVEYOR_STOP]  # nothing left running
    settings = json.loads((tmp_path / "results.json").read_text())["settings"]
    assert settings["horizon"] == 0.01
    # what the graph's policy node runs (issue 35, item 11: policy_url was ""), its URL's credentials redacted
    assert (settings["policy_url"], settings["mode"], settings["replan_steps"]) == ("ws://<redacted>@gpu-host:8000",
                                                                                    "sync", 8)  # fmt: skip
    assert row["settings"]["policy_url"] == "ws://<redacted>@gpu-host:8000"
    assert "s3cret" not in (tmp_path / "results.json").read_text() + (tmp_path / "results.jsonl").read_text()

    refuse["index"] = -1  # the person saw to the cell: the same command goes on from trial 1
    monkeypatch.setattr("sys.stdin", io.StringIO("\nn\nn\nn\n0\n" * 2))
    calls.clear()
    assert cli.main(argv) == 0
    assert [r["trial"]["index"] for r in load_results(tmp_path)] == [0, 1, 2] and calls.count(Services.ARM_HOME) == 2
    assert [c for c in calls if c in (Services.ARM_HOME, "home reached", Services.CONVEYOR_START)] == \
        [Services.ARM_HOME, "home reached", Services.CONVEYOR_START] * 2  # fmt: skip
    capsys.readouterr()

    def unreadable(self, node: str, names):
        raise RuntimeError(f"{node} does not have every parameter of {list(names)}")

    monkeypatch.setattr(Probe, "get_params", unreadable)  # a graph without the deploy job's policy node
    assert cli.main(argv) == 2 and "evaluation: policy_node does not have every parameter" in capsys.readouterr().err
    assert cli.main(["sim", "--out", str(tmp_path), "--horizon", "5"]) == 2  # a simulated trial runs its own
    assert cli.main(["sim", "--out", str(tmp_path), "--max-attempts", "0"]) == 2  # a run that could never run
    assert cli.main(["sim", "--out", str(tmp_path), "--workers", "0"]) == 2


def test_a_real_trial_starts_the_belt_and_the_policy_only_once_the_arm_says_it_is_home() -> None:
    """Issue 35, item 11: in trial 0 the belt started 0.13 s and the policy 0.24 s after /aubo/home, while the arm
    was still homing (the policy's first action refused: "arm is homing"). The runner waits for the arm's own
    word, asked since just before the home call; an arm that faults or is stopped instead fails the trial before
    anything starts (the run stops there for a person)."""
    trial = protocol_trials((0.05,), 1)[0]
    calls: list = []

    def wait_home(since: float) -> None:
        calls.append(("wait home", since))

    def call(service: str) -> str:
        calls.append((service, time.monotonic()))
        return "ok"

    run_real_trial(trial, call, wait_home, ask=lambda p: "" if "Enter" in p else "y" if "[y/n]" in p else "3",
                   say=lambda m: None, sleep=lambda s: None)  # fmt: skip
    names = [c[0] for c in calls]
    assert names[:4] == [Services.ARM_HOME, "wait home", Services.CONVEYOR_START, Services.POLICY_START]
    assert calls[1][1] <= calls[0][1]  # asked since before the home call: no earlier report counts

    def faulted(since: float) -> None:
        raise RuntimeError("the arm is fault (ARM-PSTOP protective stop), not homing")

    calls.clear()
    with pytest.raises(RuntimeError, match="protective stop"):
        run_real_trial(trial, call, faulted, ask=lambda p: "", say=lambda m: None, sleep=lambda s: None)
    assert [c[0] for c in calls] == [Services.ARM_HOME]  # neither the belt nor the policy was started


def test_the_probe_says_the_arm_is_home_only_on_its_own_word_since_it_was_told_to_home() -> None:
    """GraphProbe.home_reached: a mode sources may drive (homing over) and joints received after the home call
    within HOME_TOLERANCE of home_q; a fault or stop reported since then raises; reports from before do not count."""
    from types import SimpleNamespace

    import numpy as np

    from evaluation.probe import HOME_TOLERANCE, GraphProbe

    home = [0.0, -0.2, 1.5, 0.3, 1.57, 0.0]
    p = GraphProbe("test")
    p.arm_mode, p.arm_mode_at, p.joints, p.joints_at = None, -math.inf, None, -math.inf
    since = 100.0

    def report(mode: str, at: float, fault: str = "") -> None:
        p.arm_mode, p.arm_mode_at = SimpleNamespace(mode=mode, fault=fault, driven=mode in ("enabled", "holding")), at

    def joints(q, at: float) -> None:
        p.joints, p.joints_at = np.asarray(q, float), at

    assert not p.home_reached(home, since)  # nothing heard yet
    report("enabled", 50.0)
    joints(home, 99.0)
    assert not p.home_reached(home, since)  # at home before the call: its joints since then are not known
    report("homing", 100.5)
    joints(np.add(home, 0.3), 100.6)
    assert not p.home_reached(home, since)
    joints(home, 101.0)
    assert not p.home_reached(home, since)  # joints at home, homing not over: sources would be refused
    report("enabled", 101.1)
    assert p.home_reached(home, since)
    joints(np.add(home, [0, 0, 1.5 * HOME_TOLERANCE, 0, 0, 0]), 101.2)
    assert not p.home_reached(home, since)  # one joint off by more than the tolerance
    joints(np.add(home, 0.5 * HOME_TOLERANCE), 101.3)
    assert p.home_reached(home, since)
    report("fault", 90.0, "ARM-PSTOP")  # a fault reported before the call (and cleared since: the call succeeded)
    assert not p.home_reached(home, since)
    for mode in ("fault", "disabled"):
        report(mode, 102.0, "ARM-PSTOP protective stop" if mode == "fault" else "")
        with pytest.raises(RuntimeError, match=f"the arm is {mode}"):
            p.home_reached(home, since)


def test_without_ray_the_evaluation_imports_no_ray() -> None:
    import subprocess
    import sys

    code = ("import sys, evaluation.__main__, evaluation.scheduler, evaluation.warm_graph, evaluation.ray_pool; "
            "print('ray' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "False", out.stderr
