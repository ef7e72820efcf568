"""The README's main job, as a new user runs it: ``./run.sh`` is the set-up (scripts/bootstrap.sh) and then
``workcell demo``, run here as ``workcell demo --fast --speeds 0.05`` (one episode on sim time as fast as the
machine goes; the set-up is the suite's own): the whole graph comes up, the expert places every workpiece, the
table and ``metrics.json`` say so, the cameras' last frames are real renders, and the operator's console was served
(on by default). The run is the suite's reference expert episode (tests/fixtures/expert_reference.py: made once,
with the rollout recorder on through ``--set``, which test_sim_time_graph compares its loaded run with)."""

from __future__ import annotations

import json
import re

import cv2
import pytest
from conftest import REPO
from expert_reference import EXPERT_LOGS, EXPERT_SPEC, expert_run

from libero_workcell.libero_format import read_demos
from libero_workcell.task import TaskSpec
from workcell import demo


@pytest.fixture(scope="module")
def reference(tmp_path_factory, ros_env):
    return expert_run(tmp_path_factory, ros_env)


@pytest.mark.ros
@pytest.mark.slow
def test_run_sh_runs_the_full_stack_on_the_simulated_workcell(reference) -> None:
    out, run = reference
    assert (REPO / "run.sh").read_text().splitlines()[-1] == 'exec .venv/bin/workcell demo "$@"'
    assert run["returncode"] == 0, run["stdout"][-3000:] + run["stderr"][-3000:]
    stdout, stderr = run["stdout"], run["stderr"]
    assert "(loopback)" in stdout and "placed 3/3" in stdout
    # the progress, on stderr only: the graph's nodes up, then the episode's sim seconds (done before its horizon)
    assert re.search(r"^nodes up: 100%.* (\d+)/\1 ", stderr, re.M), stderr[-3000:]
    assert re.search(r"^episode 1/1 sim s: .* \d+/\d+ ", stderr, re.M), stderr[-3000:]
    assert "nodes up" not in stdout and "sim s:" not in stdout
    table = [line.split() for line in stdout.splitlines() if line.strip().startswith("0.05")]
    assert len(table) == 1 and table[0][-4:] == ["1", "1.00", "1.00", "0.00"], stdout  # SR PCR_T PCR_S init
    (episode,) = json.loads((out / "metrics.json").read_text())
    assert episode["belt_speed"] == 0.05 and episode["metrics"]["placed"] == [True, True, True]
    assert episode["metrics"]["SR"] == 1.0 and 30 < episode["metrics"]["sim_time"] < 120
    logs = out / EXPERT_LOGS
    snapshots = sorted(logs.glob("*_last.png"))
    assert len(snapshots) == 2, sorted(p.name for p in logs.iterdir())  # both cameras
    for png in snapshots:
        img = cv2.imread(str(png))
        assert img is not None and img.shape[:2] == (256, 256) and img.std() > 10, png  # a scene, not a blank
    # the operator's console is on by default: its address printed, and the graph's console served there
    url = re.search(r"^console: (http://127\.0\.0\.1:\d+) ", stdout, re.M)
    assert url is not None, stdout[:2000]
    assert f"console at {url.group(1)}" in (logs / "console.log").read_text()


@pytest.mark.ros
@pytest.mark.slow
def test_through_the_graph_the_expert_never_asks_for_an_unsafe_action_and_its_episode_is_recorded(reference) -> None:
    """The main job's graph is the expert's episode of tests/sim/test_expert_episodes.py's ``EXPERT_SPEC`` (which
    it leaves to this run): the arm bridge rejected none of its actions, and ``--set`` reached the graph: the
    recorder recorded the episode whole, in the demo's task."""
    out, run = reference
    assert run["returncode"] == 0, run["stdout"][-3000:]
    assert "seed 0" in run["stdout"] and EXPERT_SPEC.belt_speed == 0.05
    assert "remap rule" not in run["stderr"], run["stderr"][:2000]  # the --set words are the graph's, not ROS's
    bridge = (out / EXPERT_LOGS / "aubo_bridge.log").read_text()
    assert "node up: aubo_bridge" in bridge and "rejected" not in bridge, bridge[-3000:]
    assert run["recording"] is not None, sorted(p.name for p in out.iterdir())
    (demo,) = read_demos(run["recording"]).demos
    assert TaskSpec.from_json(demo.attrs["task_spec"]) == EXPERT_SPEC
    assert demo.num_samples >= 20 * 30 and (demo.actions[:, :6] != 0).any()  # whole: 30 s and more of sim, moving


def test_a_bad_graph_override_is_refused_naming_it_before_anything_starts(tmp_path, monkeypatch, capsys) -> None:
    started: list[object] = []
    monkeypatch.setattr(demo, "run_episode_graph", lambda *a, **k: started.append(a))
    for bad, said in [("sim_world.nonsense:=1", "sim_world has no parameter 'nonsense'"),
                      ("belt_speed", "is not of the form key:=value"), ("no_such_argument:=1", "no_such_argument")]:
        assert demo.run_demo(["--set", bad, "--out", str(tmp_path), "--no-console"]) == 2, bad
        assert said in capsys.readouterr().out, bad
    assert not started
