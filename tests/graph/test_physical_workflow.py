"""The physical cell's workflow end to end, as a lab runs it from docs/, against the emulated cell.

The emulators stand in for the hardware: the ARCS controller with RTDE through the real pyaubo_sdk, the CTAG
gripper and the Delta VFD on pty pairs, a RealSense recording and a video file, the XRoboToolkit PC service
through the real xrobotoolkit-sdk. Everything else is the documented commands, each in a process of its own,
from a shell that knows nothing of the running graph (no ROS_DOMAIN_ID, no DDS profile), as an operator's:

1. the lab's cell file (docs/bringup.md's example, pointing at the emulators): ``workcell check`` passes;
2. ``workcell bringup --job teleop_collect cell:=... recorder.plan_per_config:=1``; a demo recorded before the
   arm was enabled (every action refused: saved, not counted, and ``workcell plan status`` says why; issue 35,
   item 12), then ``workcell call enable`` and two demos following the plan by a scripted headset (one started
   and saved with the headset's A button, one with ``workcell call episode start | save``), ``workcell plan
   next | status`` (docs/teleop.md);
3. ``python -m recorder.export_lerobot`` of those demos (docs/training.md: the refused one skipped) and
   ``workcell replay`` of one on the simulated workcell (docs/simulation.md);
4. ``--job deploy_real`` against ``python -m policy_node.serve`` (docs/policy.md): the enabled arm does not
   move, a start without a task is refused, ``workcell call policy task`` then ``policy start`` moves it,
   ``policy stop`` holds it;
5. ``python -m evaluation real --horizon S`` on that graph (docs/evaluation.md), two trials whose prompts
   differ, the operator's answers on its stdin, from a shell that joined the graph with ``workcell env``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pytest
from camera_fixtures import make_realsense_recording, make_video
from conftest import OPERATOR_SHELL_UNSET, ros_probe, wait_for
from emulated_cell import cell_text
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator, DeltaVfdEmulator
from emulators.serial_link import FaultyLink

from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import Qos, Topics
from libero_workcell.loopback import free_port
from libero_workcell.rate import CONTROL_PRIORITY
from libero_workcell.ros_qos import qos
from workcell import cli, run_registry

pytest.importorskip("xrobotoolkit_sdk")
pytest.importorskip("lerobot")
pytest.importorskip("grpc")
from emulators.xr_pc_service import XrPcService, holding_the_port

pytestmark = [pytest.mark.ros, pytest.mark.slow]

COMMAND_TIMEOUT = 120.0  # s for one command to finish on a loaded machine
UP_TIMEOUT = 120.0  # s for a graph to come up
Q_ID = (0.0, 0.0, 0.0, 1.0)  # the controller's orientation: the script holds it
HAND = (0.1, 1.0, -0.3)  # m, headset frame: where the operator's right hand starts each demo
REACH_TARGET = (0.45, 0.0, 0.35)  # m, base frame: where the local server's reach policy takes the TCP
XR_PORT_WAIT = 300.0  # s to wait for the PC service's fixed port, which another test may hold


@dataclass
class Cell:
    """The emulated physical cell, the lab's folder with its cell file, and the terminals opened on it."""

    lab: Path
    cell_file: Path
    arm: ArcsEmulator
    vfd: DeltaVfdEmulator
    headset: XrPcService
    env: dict[str, str]  # a terminal of the run's: its loopback DDS domain, the runtime dir where graphs announce
    shell: dict[str, str]  # an operator's other shell: no domain, no DDS profile
    teleop: dict = field(default_factory=dict)  # /teleop/status as teleop_pico last said it (the test's probe)
    terminals: list[subprocess.Popen] = field(default_factory=list)

    def tcp(self) -> np.ndarray:
        return fk(self.arm.q())[0]

    def clutch(self, engaged: bool) -> None:
        """Wait until teleop says its clutch is ``engaged`` (or released): the hand's next motion is the arm's."""
        assert wait_for(lambda: self.teleop.get("engaged") is engaged, 60.0), self.teleop


@pytest.fixture
def cell(tmp_path, ros_env, monkeypatch) -> Iterator[Cell]:
    lab = tmp_path / "lab"
    lab.mkdir()
    runtime = tmp_path / "runtime"  # where graphs announce themselves to `workcell call` (run_registry)
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    # Each device answers on its own hardware: its emulator's threads at real-time priority where allowed, as
    # the graph's control threads are (emulators.serial_link.device_priority)
    rt = CONTROL_PRIORITY + 1
    with contextlib.ExitStack() as stack:
        # the RS-485 adapters: pty pairs that outlive a client's close, as a USB adapter does (the preflight
        # closes the port before the graph opens it; a socat pair would end with the first close)
        gripper_link, belt_link = (stack.enter_context(contextlib.closing(FaultyLink(rt))) for _ in range(2))
        stack.enter_context(contextlib.closing(CtagEmulator(gripper_link.device_port, realtime=rt)))
        vfd = stack.enter_context(contextlib.closing(DeltaVfdEmulator(belt_link.device_port, realtime=rt)))
        arm = stack.enter_context(ArcsEmulator(realtime=rt))  # the controller's real-time kernel
        stack.enter_context(holding_the_port(XR_PORT_WAIT))  # the SDK's fixed port: a test beside may hold it
        headset = XrPcService().start()
        stack.callback(headset.stop)
        wrist = make_realsense_recording(lab / "wrist.db3", n_frames=45)
        external = make_video(lab / "external.avi", n_frames=200)
        # The lab's cell file (docs/bringup.md, "Enter your workcell's settings"), naming the emulated devices
        # (tests/fixtures/emulated_cell.py: the emulators' bus timeouts and RTDE rate).
        cell_file = lab / "lab_cell.yaml"
        cell_file.write_text(cell_text(arm, gripper_link.client_port, belt_link.client_port, wrist, external))
        env = {**ros_env, "XDG_RUNTIME_DIR": str(runtime)}
        shell = {k: v for k, v in env.items() if k not in OPERATOR_SHELL_UNSET}
        c = Cell(lab, cell_file, arm, vfd, headset, env, shell)
        stack.callback(close_terminals, c)
        from std_msgs.msg import String

        probe = stack.enter_context(ros_probe("workflow_probe"))  # the run's domain, the graphs' (cell.env)
        probe.create_subscription(String, Topics.TELEOP_STATUS, lambda m: c.teleop.update(json.loads(m.data)),
                                  qos(Qos.STATE))  # fmt: skip
        yield c


def close_terminals(cell: Cell) -> None:
    """Ctrl-C to whatever still runs (a failed test's graph), then SIGKILL to what does not stop."""
    for proc in cell.terminals:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


# ------------------------------------------------------------------------------------------ the lab's shells
def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def workcell(cell: Cell, *args: str) -> subprocess.CompletedProcess:
    """``workcell ARGS`` in the operator's other shell, in the lab's folder."""
    t0 = time.monotonic()
    out = subprocess.run(python("-m", "workcell.cli", *args), env=cell.shell, cwd=cell.lab,
                         capture_output=True, text=True, timeout=COMMAND_TIMEOUT)  # fmt: skip
    print(f"$ workcell {shlex.join(args)}  -> {out.returncode} in {time.monotonic() - t0:.1f} s\n{out.stdout}"
          f"{out.stderr}", flush=True)  # fmt: skip
    return out


def plan(*args: str) -> str:
    """``workcell plan ...`` (it reads the session file only: run here)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["plan", *args]) == 0
    return out.getvalue()


def terminal(cell: Cell, argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A long-running command in a terminal of its own; what it prints goes to ``log``."""
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, env=env or cell.env, cwd=cell.lab, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    cell.terminals.append(proc)
    return proc


def ctrl_c(proc: subprocess.Popen, timeout: float = 60.0) -> int:
    os.killpg(proc.pid, signal.SIGINT)
    return proc.wait(timeout=timeout)


def shows(log: Path, *texts: str, timeout: float = UP_TIMEOUT) -> str:
    """Wait until the terminal's ``log`` shows every one of ``texts``; its text."""
    assert wait_for(lambda: all(t in log.read_text() for t in texts), timeout=timeout, interval=0.2), (
        texts, log.read_text()[-4000:])  # fmt: skip
    return log.read_text()


def steps_recorded(text: str, demo: str) -> int:
    """The recorder's latest once-a-second count of ``demo``'s steps while it records (0 before)."""
    counts = re.findall(rf"episode {demo} \|\s+[\d.]+ s \| (\d+) steps", text)
    return int(counts[-1]) if counts else 0


def status_shows(cell: Cell, *texts: str, timeout: float = UP_TIMEOUT) -> str:
    """``workcell status`` until it shows each of ``texts`` (DDS discovery, the arm's start-up)."""
    seen: list[str] = []

    def ok() -> bool:
        out = workcell(cell, "status")
        seen.append(out.stdout + out.stderr)
        return out.returncode == 0 and all(t in out.stdout for t in texts)

    assert wait_for(ok, timeout=timeout, interval=1.0), seen[-1] if seen else "no status"
    return seen[-1]


def settled(cell: Cell, still_for: float = 0.5, timeout: float = 30.0, tol: float = 1e-6) -> np.ndarray:
    """The emulated arm's joints once they stopped changing (by more than ``tol`` rad over ``still_for`` s)."""
    last, since = cell.arm.q(), time.monotonic()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        time.sleep(0.05)
        q = cell.arm.q()
        if np.max(np.abs(q - last)) > tol:
            last, since = q, time.monotonic()
        elif time.monotonic() - since > still_for:
            return q
    raise AssertionError("the emulated arm did not come to rest")


class Operator:
    """A shell command the operator answers at its prompts (input()'s prompts end without a newline)."""

    def __init__(self, cell: Cell, command: str) -> None:
        self.proc = subprocess.Popen(["bash", "-c", command], env=cell.shell, cwd=cell.lab, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        cell.terminals.append(self.proc)
        self._out = bytearray()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := os.read(self.proc.stdout.fileno(), 4096):
            self._out += chunk

    @property
    def text(self) -> str:
        return self._out.decode(errors="replace")

    def wait_for(self, prompt: str, count: int = 1) -> None:
        assert wait_for(lambda: self.text.count(prompt) >= count or self.proc.poll() is not None,
                        COMMAND_TIMEOUT, 0.05), self.text  # fmt: skip
        assert self.text.count(prompt) >= count, self.text

    def answer(self, *lines: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("".join(f"{ln}\n" for ln in lines).encode())
        self.proc.stdin.flush()

    def finish(self) -> str:
        """Its output, once it ended with exit status 0."""
        code = self.proc.wait(timeout=COMMAND_TIMEOUT)
        self._reader.join(timeout=10)
        print(self.text)
        assert code == 0, self.text
        return self.text


# ------------------------------------------------------------------------------------------ the operator's hand
def press(cell: Cell, button: str, log: Path, said: str) -> None:
    """Press A or B, the hand at rest, the grip released, until the graph's terminal shows ``said``; release it."""
    cell.headset.set_right((*HAND, *Q_ID), a=button == "A", b=button == "B")
    shows(log, said, timeout=60.0)
    cell.headset.set_right((*HAND, *Q_ID))


def demonstrate(cell: Cell, reach: float = 0.04, seconds: float = 1.5) -> None:
    """Squeeze the grip (the clutch), move the hand ``reach`` m forward (the headset's -z, the base's +x) over
    ``seconds``, pulling the trigger halfway (the gripper closes), then let go and bring the hand back."""
    x, y, z = HAND
    cell.headset.set_right((x, y, z, *Q_ID), grip=1.0)
    cell.clutch(True)  # the clutch latched the TCP here
    steps = int(seconds * 50)
    for k in range(1, steps + 1):  # the hand's own pace
        cell.headset.set_right((x, y, z - reach * k / steps, *Q_ID), grip=1.0,
                               trigger=1.0 if k > steps // 2 else 0.0)  # fmt: skip
        time.sleep(seconds / steps)
    settled(cell, tol=1e-4)  # the arm caught up with the hand (what remains: the response's last tenths of a mm)
    cell.headset.set_right((*HAND, *Q_ID), trigger=1.0)  # the clutch released: the arm holds, the gripper stays closed
    cell.clutch(False)


# ------------------------------------------------------------------------------------------ the workflow
def test_the_physical_workflow_as_documented_runs_on_the_emulated_cell(cell: Cell, tmp_path) -> None:
    t0 = time.monotonic()
    times: dict[str, float] = {}
    session = cell.lab / "demos" / "d2s.hdf5"
    port = free_port()  # the GPU machine's server, started now (docs/policy.md: the local one, 127.0.0.1 only)
    server = terminal(cell, python("-m", "policy_node.serve", "--port", str(port), "--target",
                                   *map(str, REACH_TARGET)), tmp_path / "server.out")  # fmt: skip

    instructions = collect(cell, session, tmp_path)
    times["1, 2: checked and collected"] = time.monotonic() - t0
    # 3. in terminals of their own, while the deployment runs
    export = terminal(cell, python("-m", "recorder.export_lerobot", "demos/", "--out", "lerobot/d2s"),
                      tmp_path / "export.out")  # fmt: skip
    # closed loop: through the graph each action holds one control step, not as long as it held the arm. From the
    # operator's shell (no ROS_DOMAIN_ID): the simulated workcell claims a free domain of its own, never the cell's
    # nor another test run's
    replay = terminal(cell, python("-m", "workcell.cli", "replay", "demos/d2s.hdf5", "--demo", "demo_1",
                                   "--mode", "closed_loop", "--out", "replay-output"),
                      tmp_path / "replay.out", env=cell.shell)  # fmt: skip
    deploy = deploy_and_evaluate(cell, port, instructions[0], tmp_path)
    times["4, 5: deployed and evaluated"] = time.monotonic() - t0
    assert ctrl_c(deploy) == 0 and ctrl_c(server) == 0  # the graph and the server stop cleanly
    assert not run_registry.running()  # the graph withdrew its record: `workcell call` finds none now

    assert export.wait(timeout=COMMAND_TIMEOUT) == 0, (tmp_path / "export.out").read_text()[-3000:]
    tasks = [json.loads(ln)["task"] for ln in (cell.lab / "lerobot/d2s/meta/tasks.jsonl").read_text().splitlines()]
    assert sorted(tasks) == sorted(instructions)  # each demo's instruction, as openpi's training reads it
    info = json.loads((cell.lab / "lerobot/d2s/meta/info.json").read_text())
    # training data never holds an action the arm refused (docs/training.md): the refused demo's steps are dropped,
    # all of them but those whose report never came (a step the arm may have executed); none of the others'
    exported = (tmp_path / "export.out").read_text()
    with h5py.File(session) as f:
        verdicts = {n: f["data"][n]["action_accepted"][()] for n in ("demo_0", "demo_1", "demo_2")}
    kept = {n: int((v != 0).sum()) for n, v in verdicts.items()}
    refused_steps = len(verdicts["demo_0"]) - kept["demo_0"]
    assert refused_steps > 5 and kept["demo_1"] > 20 and kept["demo_2"] > 20, kept
    if kept["demo_0"]:  # a report that came late: that step is kept (the arm may have executed it), the rest dropped
        assert f"dropped d2s.hdf5:demo_0: {refused_steps} of {len(verdicts['demo_0'])} steps dropped" in exported
    else:
        assert "skipped d2s.hdf5:demo_0: the arm refused every action" in exported, exported
    assert info["total_episodes"] == sum(1 for k in kept.values() if k), (info, kept)
    assert info["total_frames"] == sum(kept.values()), (info, kept)
    assert info["features"]["state"]["shape"] == [7]
    assert replay.wait(timeout=COMMAND_TIMEOUT) == 0, (tmp_path / "replay.out").read_text()[-3000:]
    report = json.loads((cell.lab / "replay-output" / "replay_report.json").read_text())
    assert report["steps"] == report["demo_steps"] > 20, report  # the whole real-profile demo, in its task
    assert report["tracking"]["pos_rms_m"] < 0.01, report["tracking"]  # the sim arm went where the emulated one did
    times["3: exported and replayed"] = time.monotonic() - t0
    print("times:", {k: round(v, 1) for k, v in times.items()}, flush=True)


def collect(cell: Cell, session: Path, tmp_path: Path) -> list[str]:
    """Steps 1 and 2: the preflight, a demo the disabled arm refused, then two demos following the plan; the two's
    instructions."""
    # 1. docs/bringup.md, "Check the cell before bringing it up": read only
    check = workcell(cell, "check", "--job", "teleop_collect", f"cell:={cell.cell_file}", f"record_path:={session}",
                     "--timeout", "60")  # (per probe: a loaded machine answers late; a device answers at once)
    assert check.returncode == 0, check.stdout + check.stderr
    for what in ("ARCS RPC 127.0.0.1", "ARCS RTDE 127.0.0.1", "gripper at Modbus ID 1", "delta_vfd at Modbus ID 1",
                 "external camera (UVC", "wrist camera (RealSense", "XRoboToolkit PC service", "session "):  # fmt: skip
        assert any(ln.split()[:1] == ["ok"] and what in ln for ln in check.stdout.splitlines()), (what, check.stdout)
    assert not cell.vfd.writes and cell.arm.state()["mode"] == "PowerOff" and not session.parent.exists()

    # 2. docs/teleop.md: the physical workcell, following the collection plan
    first = plan("next", "--session", str(session), "--per-config", "1").splitlines()[0]
    assert first.startswith("set up combination 0: feed "), first
    log = tmp_path / "teleop.out"
    teleop = terminal(cell, python("-m", "workcell.cli", "bringup", "--job", "teleop_collect",
                                   f"cell:={cell.cell_file}", f"record_path:={session}", "recorder.plan_per_config:=1",
                                   "--log-dir", str(tmp_path / "teleop_logs")), log)  # fmt: skip
    shows(log, "aubo_bridge up", "teleop from the headset source", f"plan: next, {first}")
    status_shows(cell, "arm: disabled, fault none, source teleop", '"num_demos": 0')
    (record,) = run_registry.running()  # how the operator's shell found the graph
    assert record.job == "teleop_collect" and not record.use_sim and record.cell == str(cell.cell_file)

    # docs/teleop.md, "The collection plan": the arm not enabled yet (or faulted: the same to the recorder), teleop's
    # actions are all refused; the demo is saved and not counted, and the plan says why (issue 35, item 12)
    cell.headset.set_right((*HAND, *Q_ID))
    start = workcell(cell, "call", "episode", "start")
    assert start.returncode == 0 and "/recorder/start: ok: recording demo_0" in start.stdout, start.stdout
    assert wait_for(lambda: steps_recorded(log.read_text(), "demo_0") >= 20, UP_TIMEOUT, 0.2), \
        log.read_text()[-3000:]  # the recorder's line once a second: a demo's worth of refused steps  # fmt: skip
    save = workcell(cell, "call", "episode", "save")
    assert save.returncode == 0 and "/recorder/save: ok: saving demo_0" in save.stdout, save.stdout
    shows(log, "saved demo_0", "demo_0 does not count toward the collection plan: the arm refused every action it "
          "answered", timeout=60.0)  # fmt: skip
    refused = plan("status", "--session", str(session), "--per-config", "1")
    assert "0 of 16 plan demos (1 demos in the file)" in refused, refused
    assert "  not counted: demo_0 (combination 0 slots " in refused and "none accepted)" in refused, refused
    assert plan("next", "--session", str(session), "--per-config", "1").splitlines()[0] == first  # again

    enable = workcell(cell, "call", "enable")  # the operator sees to the arm; the same configuration again
    assert enable.returncode == 0 and "/aubo/enable: ok" in enable.stdout, enable.stdout

    p0 = cell.tcp()  # demo_1: the headset's A starts the episode and saves it
    press(cell, "A", log, "[teleop_pico]: start: recording demo_1")
    demonstrate(cell)
    press(cell, "A", log, "[teleop_pico]: save: saving demo_1")
    moved = cell.tcp() - p0
    assert moved[0] > 0.02 and abs(moved[1]) < 0.01 and abs(moved[2]) < 0.01, moved  # forward, as the hand went
    shows(log, "saved demo_1", timeout=60.0)  # saving runs in a thread of its own
    second = plan("next", "--session", str(session), "--per-config", "1").splitlines()[0]
    assert second.startswith("set up combination 0: feed ") and second != first, second
    shows(log, f"plan: next, {second}")  # the same in the recorder's log

    p1 = cell.tcp()  # demo_2: from the operator's shell
    start = workcell(cell, "call", "episode", "start")
    assert start.returncode == 0 and "/recorder/start: ok: recording demo_2" in start.stdout, start.stdout
    demonstrate(cell)
    save = workcell(cell, "call", "episode", "save")
    assert save.returncode == 0 and "/recorder/save: ok: saving demo_2" in save.stdout, save.stdout
    assert cell.tcp()[0] - p1[0] > 0.02
    shows(log, "saved demo_2", timeout=60.0)
    progress = plan("status", "--session", str(session), "--per-config", "1")
    assert "2 of 16 plan demos (3 demos in the file)" in progress, progress
    assert sum(ln.split()[:1] == ["done"] for ln in progress.splitlines()) == 2, progress
    assert "  not counted: demo_0 (" in progress and "not counted: demo_1" not in progress and \
        "not counted: demo_2" not in progress, progress  # fmt: skip
    assert ctrl_c(teleop) == 0, log.read_text()[-3000:]

    with h5py.File(session) as f:
        not_done, *demos = (f["data"][n] for n in ("demo_0", "demo_1", "demo_2"))
        # every verdict a refusal (a step whose report came late has none)
        assert not_done.attrs["arm_accepted_steps"] == 0 and not_done.attrs["arm_refused_steps"] > 5
        instructions = [str(d.attrs["language_instruction"]) for d in demos]
        assert all(instructions) and instructions[0] != instructions[1]  # each its configuration's
        for d in demos:
            assert json.loads(d.attrs["task_spec"])["language_instruction"] == d.attrs["language_instruction"]
            assert d["actions"].shape[0] >= 20 and d["obs/agentview_rgb"].shape[1:] == (256, 256, 3)
            ee = d["obs/ee_pos"][()]
            assert ee[-1, 0] - ee[0, 0] > 0.02  # the recorded TCP went forward as the emulated arm did
            assert d["actions"][:, 6].max() == 1.0  # the trigger closed the gripper
            assert d.attrs["arm_accepted_steps"] > 0  # performed: it counts
        recorded = json.loads(f["data"].attrs["env_args"])["cell"]  # the lab's settings, kept with the session
        assert recorded["path"] == str(cell.cell_file) and recorded["settings"]["aubo_bridge.arcs.password"] == \
            "<redacted>"  # fmt: skip
    return instructions


def deploy_and_evaluate(cell: Cell, port: int, instruction: str, tmp_path: Path) -> subprocess.Popen:
    """Steps 4 and 5: the deployment (started only by command, with a task) and a dry-run evaluation on it; the
    deployment's terminal, still running."""
    # 4. docs/policy.md, "On the physical cell"
    shows(tmp_path / "server.out", f"serving reach on ws://127.0.0.1:{port}", timeout=60.0)
    log = tmp_path / "deploy.out"
    deploy = terminal(cell, python("-m", "workcell.cli", "bringup", "--job", "deploy_real",
                                   f"cell:={cell.cell_file}", f"policy_url:=ws://127.0.0.1:{port}", "--log-dir",
                                   str(tmp_path / "deploy_logs")), log)  # fmt: skip
    shows(log, "aubo_bridge up", "task none (`workcell call policy task`)")  # policy_node's start-up line
    status_shows(cell, "arm: disabled, fault none, source policy", "policy_node: connected")
    enable = workcell(cell, "call", "enable")
    assert enable.returncode == 0 and "/aubo/enable: ok" in enable.stdout, enable.stdout
    q_enabled = settled(cell)
    refused = workcell(cell, "call", "policy", "start")  # no task: refused, saying what to do
    assert refused.returncode == 1 and "/policy/start: REFUSED: no task" in refused.stdout, refused.stdout
    assert "workcell call policy task" in refused.stdout
    np.testing.assert_allclose(settled(cell), q_enabled, atol=1e-9)  # enabled, connected, refused: it never moved
    task = workcell(cell, "call", "policy", "task", instruction)
    assert task.returncode == 0 and f"policy_node.policy.task := {instruction!r}: ok" in task.stdout, task.stdout
    p_start = cell.tcp()
    toward = (np.asarray(REACH_TARGET) - p_start) / np.linalg.norm(np.asarray(REACH_TARGET) - p_start)
    with ThreadPoolExecutor(1) as shell:  # the command returns once it said so; the arm moves from its call on
        started = shell.submit(workcell, cell, "call", "policy", "start")
        assert wait_for(lambda: np.dot(cell.tcp() - p_start, toward) > 0.002, 60.0), cell.tcp()  # the policy drives
        # docs/operator.md, "The arm and its sources": a protective stop mid-episode ends the policy's turn; reset
        # and enable leave the arm where it stopped, and only `policy start` drives it again (issue 35, item 1)
        cell.arm.protective_stop()
        go = started.result()
    assert go.returncode == 0 and "/policy/start: ok: policy episode started" in go.stdout, go.stdout
    status_shows(cell, "arm: fault", '"running": false, "ended_by": "the arm is fault')
    q_stopped = settled(cell)
    left = np.linalg.norm(np.asarray(REACH_TARGET) - fk(q_stopped)[0])  # how far from the target it stopped
    assert left > 0.01, left  # (the reach policy is quick: stopped a few centimetres short of its target)
    refused = workcell(cell, "call", "policy", "start")
    assert refused.returncode == 1 and "the arm is fault" in refused.stdout, refused.stdout
    cell.arm.clear_cause()
    for step in ("reset", "enable"):
        done = workcell(cell, "call", step)
        assert done.returncode == 0, done.stdout
    # enabled again, the arm would follow what the policy still sent: its episode ended with the fault, it sends
    # nothing, and the arm stays where it stopped
    status_shows(cell, "fault none, source policy", '"running": false, "ended_by": "the arm is fault')
    np.testing.assert_allclose(settled(cell, still_for=1.0), q_stopped, atol=1e-6)
    again = workcell(cell, "call", "policy", "start")
    assert again.returncode == 0, again.stdout
    closer = lambda: np.linalg.norm(np.asarray(REACH_TARGET) - cell.tcp()) < left - 0.005  # noqa: E731
    assert wait_for(closer, 60.0), cell.tcp()  # started again: it drives on toward its target
    stop = workcell(cell, "call", "policy", "stop")
    assert stop.returncode == 0 and "/policy/stop: ok" in stop.stdout, stop.stdout
    q_held = settled(cell)
    time.sleep(0.5)
    np.testing.assert_allclose(cell.arm.q(), q_held, atol=1e-9)  # stopped: nothing more is sent, the arm holds
    assert "/policy/start refused: no task" in log.read_text()

    # 5. docs/evaluation.md, "Physical workcell": a shell joins the graph's domain as bringup printed it; the
    # operator presses Enter once the arm rests at home, then labels the trial
    domain = log.read_text().split("ROS_DOMAIN_ID=")[1].split()[0]
    evaluation = Operator(cell, f'eval "$({shlex.join(python("-m", "workcell.cli"))} env --domain-id {domain})"'
                                f" && {shlex.join(python('-m', 'evaluation'))} real --out eval-real/ --checkpoint "
                                "reach --speeds 0.05 --trials-per-speed 2 --horizon 1")  # fmt: skip
    for trial in range(2):
        evaluation.wait_for("press Enter to start", count=trial + 1)
        assert wait_for(lambda: np.allclose(cell.arm.q(), HOME_Q, atol=1e-4), 60.0), cell.arm.q()  # homed
        evaluation.answer("")
        evaluation.wait_for("placed in its slot? [y/n]", count=3 * trial + 1)
        evaluation.answer("y", "n", "y", "2")
    out = evaluation.finish()
    trials = json.loads((cell.lab / "eval-real" / "results.json").read_text())["trials"]
    assert [t["horizon_s"] for t in trials] == [1.0, 1.0]
    assert all(t["outcome"]["placed"] == [True, False, True] and t["outcome"]["labels"] == "operator" for t in trials)
    prompts = [t["trial"]["language_instruction"] for t in trials]
    assert prompts[0] != prompts[1]  # the two held-out slot orders of combination 0
    events = ["start" if "/policy/start: policy episode started" in ln else
              ln.split("]: task: ", 1)[1].removesuffix(" (from the next /policy/start)")
              for ln in log.read_text().splitlines()
              if ln.startswith("[policy_node]") and ("]: task: " in ln or "policy episode started" in ln)]  # fmt: skip
    assert events[-4:] == [repr(prompts[0]), "start", repr(prompts[1]), "start"], events  # each trial's prompt first
    assert out.count("the arm is homing and the belt is set to 0.05 m/s") == 2, out
    starts = [v for a, v in cell.vfd.writes if a == DeltaVfdEmulator.COMMAND and v[0] & 0x03 == 0x02]
    assert len(starts) == 2 and not cell.vfd.running  # the belt ran for each trial and was stopped after it

    stop_all = workcell(cell, "call", "stop-all")
    assert stop_all.returncode == 0 and stop_all.stdout.count(": ok") == 3, stop_all.stdout
    return deploy
