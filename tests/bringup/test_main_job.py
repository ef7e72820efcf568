"""The README's main job, as a new user runs it: ``./run.sh`` is the set-up (scripts/bootstrap.sh) and then
``workcell demo``, run here as ``workcell demo --fast --speeds 0.05`` (one episode on sim time as fast as the
machine goes; the set-up is the suite's own): the whole graph comes up, the expert places every workpiece, the
table and ``metrics.json`` say so, the cameras' last frames are real renders, and the operator's console was served
(on by default)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import cv2
import pytest
from conftest import REPO

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_run_sh_runs_the_full_stack_on_the_simulated_workcell(tmp_path, ros_env) -> None:
    env = {k: v for k, v in ros_env.items() if k != "ROS_DOMAIN_ID"}  # the demo picks its own, as for a user
    assert (REPO / "run.sh").read_text().splitlines()[-1] == 'exec .venv/bin/workcell demo "$@"'
    workcell = str(Path(sys.executable).parent / "workcell")
    run = subprocess.run([workcell, "demo", "--fast", "--speeds", "0.05", "--out", str(tmp_path)], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "(loopback)" in run.stdout and "placed 3/3" in run.stdout
    # the progress, on stderr only: the graph's nodes up, then the episode's sim seconds (done before its horizon)
    assert re.search(r"^nodes up: 100%.* (\d+)/\1 ", run.stderr, re.M), run.stderr[-3000:]
    assert re.search(r"^episode 1/1 sim s: .* \d+/\d+ ", run.stderr, re.M), run.stderr[-3000:]
    assert "nodes up" not in run.stdout and "sim s:" not in run.stdout
    table = [line.split() for line in run.stdout.splitlines() if line.strip().startswith("0.05")]
    assert len(table) == 1 and table[0][-4:] == ["1", "1.00", "1.00", "0.00"], run.stdout  # SR PCR_T PCR_S init
    (episode,) = json.loads((tmp_path / "metrics.json").read_text())
    assert episode["belt_speed"] == 0.05 and episode["metrics"]["placed"] == [True, True, True]
    assert episode["metrics"]["SR"] == 1.0 and 30 < episode["metrics"]["sim_time"] < 120
    logs = tmp_path / "v0.05_seed0"
    snapshots = sorted(logs.glob("*_last.png"))
    assert len(snapshots) == 2, sorted(p.name for p in logs.iterdir())  # both cameras
    for png in snapshots:
        img = cv2.imread(str(png))
        assert img is not None and img.shape[:2] == (256, 256) and img.std() > 10, png  # a scene, not a blank
    # the operator's console is on by default: its address printed, and the graph's console served there
    url = re.search(r"^console: (http://127\.0\.0\.1:\d+) ", run.stdout, re.M)
    assert url is not None, run.stdout[:2000]
    assert f"console at {url.group(1)}" in (logs / "console.log").read_text()
