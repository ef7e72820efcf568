"""Where a worker's graphs keep their logs and records: after a graph failed a trial, the retry's graph (a new host
in the same worker process) starts in a folder of its own, so the failed graph's logs stay as it left them and its
policy timing records never mix into the retry's. The graph and the evaluation's probe are stand-ins here (the
real graph: tests/evaluation/test_evaluation_sim.py); what is tested is the host's bookkeeping."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from evaluation import warm_graph
from evaluation.protocol import protocol_trials
from evaluation.settings import EvalSettings
from evaluation.warm_graph import WarmWorkcell, new_session


class StandInGraph:
    """What a host asks of its running graph; its log is a file in the folder the launch gave it."""

    def __init__(self, log_dir: Path, said: str) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        (log_dir / "sim_world.log").write_text(said)

    def check(self) -> None:
        pass

    def exited(self) -> bool:
        return False

    def stop(self, timeout: float) -> dict:
        return {}


class StandInProbe:
    """The probe of a graph whose world and recorder are up."""

    def __init__(self, name: str) -> None:
        self.episode, self.recorder = {"episode": 1}, {}

    def __enter__(self) -> StandInProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def spin(self, until, timeout, what, check) -> None:
        assert until(), what


def test_a_graph_started_after_a_failed_one_in_the_same_process_keeps_a_folder_of_its_own(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "environ", dict(os.environ))  # a host joins its DDS domain: this test's copy
    folders: list[Path] = []

    def launch(nodes, env, log_dir):
        folders.append(Path(log_dir).parent)
        return StandInGraph(Path(log_dir), f"graph {len(folders)}")

    monkeypatch.setattr("workcell.launcher.launch", launch)
    monkeypatch.setattr(warm_graph, "GraphProbe", StandInProbe)
    trial = protocol_trials((0.05,), 1)[0]
    for _ in range(2):  # the first graph failed its trial: the worker closes its host, a new one runs the retry
        host = WarmWorkcell(EvalSettings(), tmp_path, 7)
        host._start(trial, "")
        host.close()
    assert len(set(folders)) == 2, folders
    assert [(f / "logs" / "sim_world.log").read_text() for f in folders] == ["graph 1", "graph 2"]


def test_a_new_graphs_folder_is_never_one_that_exists(tmp_path: Path) -> None:
    """Nor one an earlier run of the same output folder left, from a process that had this pid."""
    earlier = tmp_path / "workers" / f"{socket.gethostname()}-{os.getpid()}-0"
    earlier.mkdir(parents=True)
    (earlier / "timing.jsonl").write_text("an earlier run's\n")
    first, second = new_session(tmp_path), new_session(tmp_path)
    assert len({earlier, first, second}) == 3 and first.is_dir() and second.is_dir()
    assert (earlier / "timing.jsonl").read_text() == "an earlier run's\n"


def test_a_trials_timing_is_taken_once_the_policy_node_wrote_every_step_of_its_episode(tmp_path: Path) -> None:
    """The policy node writes a step's timing line once its action's result joined it, the last ones up to a second
    after the episode ended, possibly after the rollout was saved (CI: a trial of 360 steps collected with 355):
    the evaluation waits for all of them, and takes only the trial's episode."""
    import json
    import threading
    import time

    source = tmp_path / "timing.jsonl"
    earlier = [json.dumps({"episode": 2, "kind": "chunk", "step": k}) for k in range(3)]
    ours = [json.dumps({"episode": 3, "kind": "chunk", "step": k}) for k in range(6)]
    source.write_text("".join(line + "\n" for line in earlier + ours[:4]) + ours[4][:9])  # one half written

    def the_last_lines_join_their_results() -> None:
        time.sleep(0.3)
        with source.open("a") as f:
            f.write(ours[4][9:] + "\n")
            f.flush()
            time.sleep(0.2)
            f.write(ours[5] + "\n")

    writer = threading.Thread(target=the_last_lines_join_their_results)
    writer.start()
    try:
        assert warm_graph.episode_timing(source, 3, steps=6, timeout=10.0) == ours
    finally:
        writer.join()
    # a node that never writes them all: what is there, after the timeout
    t0 = time.monotonic()
    assert warm_graph.episode_timing(source, 3, steps=7, timeout=0.3) == ours
    assert time.monotonic() - t0 >= 0.3
    assert warm_graph.episode_timing(source, 2, steps=3, timeout=0.0) == earlier
