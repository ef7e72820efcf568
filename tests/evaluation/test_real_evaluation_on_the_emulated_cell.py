"""`python -m evaluation real` on the deploy graph of the physical profile against the emulated cell (issue 35,
item 11): each trial starts the belt and the policy only once the arm reports it is home, and the results record
the policy server the graph runs.

The devices are the protocol emulators (the ARCS controller through the real pyaubo_sdk, the CTAG gripper and the
Delta VFD on pty pairs, a RealSense recording and a video file); the policy server is `python -m policy_node.serve`
(its reach policy); the graph is `workcell bringup --job deploy_real` with the lab's cell file. The operator
answers every prompt at once: Enter as soon as asked, before the arm has reached home (tests/graph/
test_physical_workflow.py runs the whole workflow, with an operator who waits).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from camera_fixtures import make_realsense_recording, make_video
from conftest import wait_for
from emulated_cell import cell_text
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator, DeltaVfdEmulator
from emulators.serial_link import FaultyLink

from aubo_bridge.model.kinematics import HOME_Q
from evaluation.probe import HOME_TOLERANCE
from libero_workcell.loopback import free_port
from libero_workcell.rate import CONTROL_PRIORITY

pytestmark = [pytest.mark.ros, pytest.mark.slow]
TIMEOUT = 120.0  # s for a command, or the graph, on a loaded machine
AWAY = np.array([0.5, -0.15, 0.2, 0.0, 0.0, 0.0])  # rad from home where the arm starts: about a second of homing
REACH_TARGET = ("0.45", "0.0", "0.35")  # m, base frame: where the server's reach policy takes the TCP


class WatchedVfd(DeltaVfdEmulator):
    """The belt's drive, noting where the arm was each time it was told to run after a stop (the arm's emulator is
    the truth). A RUN written again with no stop between is the bus retrying a write whose reply came late (beside
    a busy CPU, ci55): the same start, not another."""

    def __init__(self, port: str, arm: ArcsEmulator, **kw: Any) -> None:
        self.arm, self.arm_at_run, self._running = arm, [], False
        super().__init__(port, **kw)

    def on_write(self, address: int, values: list[int]) -> None:
        if address == self.COMMAND and values:
            run = values[0] & 0x03 == 0x02
            if run and not self._running:
                self.arm_at_run.append(self.arm.q())
            self._running = run
        super().on_write(address, values)


def test_each_trial_starts_the_belt_and_the_policy_on_an_arm_at_home_and_records_the_server(
        tmp_path, ros_env) -> None:  # fmt: skip
    lab = tmp_path / "lab"
    lab.mkdir()
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {**ros_env, "XDG_RUNTIME_DIR": str(runtime)}  # one shell on the graph's domain, as `workcell env` gives
    logs, out, port = tmp_path / "logs", tmp_path / "deploy.out", free_port()

    def shows(path, *texts: str) -> None:
        assert wait_for(lambda: path.exists() and all(t in path.read_text() for t in texts), TIMEOUT, 0.2), (
            texts, path.read_text()[-4000:] if path.exists() else "")  # fmt: skip

    rt = CONTROL_PRIORITY + 1  # each device answers on hardware of its own: its emulator at real-time priority
    with contextlib.ExitStack() as stack:
        gripper_link, belt_link = (stack.enter_context(contextlib.closing(FaultyLink(rt))) for _ in range(2))
        stack.enter_context(contextlib.closing(CtagEmulator(gripper_link.device_port, realtime=rt)))
        arm = stack.enter_context(ArcsEmulator(q0=[float(v) for v in HOME_Q + AWAY], realtime=rt))
        vfd = stack.enter_context(contextlib.closing(WatchedVfd(belt_link.device_port, arm, realtime=rt)))
        cell = lab / "lab_cell.yaml"  # docs/bringup.md's cell file, naming the emulated devices (emulated_cell.py)
        cell.write_text(cell_text(arm, gripper_link.client_port, belt_link.client_port,
                                  make_realsense_recording(lab / "wrist.db3", n_frames=45),
                                  make_video(lab / "external.avi", n_frames=200)))  # fmt: skip
        procs: list[subprocess.Popen] = []

        def start(argv: list[str], path) -> subprocess.Popen:
            with open(path, "w") as f:
                proc = subprocess.Popen([sys.executable, *argv], env=env, cwd=lab, stdout=f, stderr=subprocess.STDOUT,
                                        start_new_session=True)  # fmt: skip
            procs.append(proc)
            return proc

        @stack.callback
        def stop() -> None:
            for proc in reversed(procs):
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGINT)
                    proc.wait(timeout=60)

        # the server and the graph start side by side: the policy node connects when its policy is started
        start(["-m", "policy_node.serve", "--port", str(port), "--target", *REACH_TARGET], tmp_path / "server.out")
        start(["-m", "workcell.cli", "bringup", "--job", "deploy_real", f"cell:={cell}",
               f"policy_url:=ws://127.0.0.1:{port}", "--log-dir", str(logs)], out)  # fmt: skip
        shows(tmp_path / "server.out", f"serving reach on ws://127.0.0.1:{port}")
        shows(out, "aubo_bridge up", "node up: policy_node")
        enable = subprocess.run([sys.executable, "-m", "workcell.cli", "call", "enable"], env=env, cwd=lab,
                                capture_output=True, text=True, timeout=TIMEOUT)  # fmt: skip
        assert enable.returncode == 0 and "/aubo/enable: ok" in enable.stdout, enable.stdout + enable.stderr
        # two dry-run trials; every answer typed ahead: Enter before the arm is home, then the labels
        answers = "\ny\nn\ny\n2\n" * 2
        evaluation = subprocess.run([sys.executable, "-m", "evaluation", "real", "--out", "eval-real", "--checkpoint",
                                     "reach", "--speeds", "0.05", "--trials-per-speed", "2", "--horizon", "1"],
                                    env=env, cwd=lab, input=answers, capture_output=True, text=True,
                                    timeout=4 * TIMEOUT)  # fmt: skip
        print(evaluation.stdout[-3000:], evaluation.stderr[-3000:])
        assert evaluation.returncode == 0, evaluation.stdout[-3000:] + evaluation.stderr[-3000:]
    results: dict[str, Any] = json.loads((lab / "eval-real" / "results.json").read_text())
    assert len(results["trials"]) == 2 and len(vfd.arm_at_run) == 2  # the belt ran once per trial
    for q in vfd.arm_at_run:  # each time the belt was told to run, the arm was home
        assert np.max(np.abs(q - HOME_Q)) <= HOME_TOLERANCE, q - HOME_Q
    arm_log = (logs / "aubo_bridge.log").read_text()
    homing = [ln for ln in arm_log.splitlines() if "action from 'policy' rejected" in ln and "homing" in ln]
    assert not homing, homing  # the policy's actions never met an arm still homing
    assert "policy episode started" in (logs / "policy_node.log").read_text()
    settings = results["settings"]  # what the graph ran (policy_url was "")
    assert (settings["policy_url"], settings["mode"], settings["replan_steps"]) == (f"ws://127.0.0.1:{port}",
                                                                                    "async", 5)  # fmt: skip
    assert all(t["settings"]["policy_url"] == f"ws://127.0.0.1:{port}" for t in results["trials"])
