"""The collection plan on the physical profile against the emulated cell (issue 35, item 12): a demo recorded
while the arm refused every action is saved and not counted, and `workcell plan status` says why; one the arm
performed counts.

The devices are the protocol emulators (the ARCS controller through the real pyaubo_sdk, the CTAG gripper and
the Delta VFD on pty pairs, a RealSense recording and a video file, the XRoboToolkit PC service through the real
xrobotoolkit-sdk); the graph is `workcell bringup --job teleop_collect` with the lab's cell file, and every
command an operator's, in a shell of its own (tests/graph/test_physical_workflow.py runs the whole workflow).
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import sys
import time

import h5py
import pytest
from camera_fixtures import make_realsense_recording, make_video
from conftest import OPERATOR_SHELL_UNSET, wait_for
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator, DeltaVfdEmulator
from emulators.serial_link import FaultyLink

from aubo_bridge.model.description import TOOL_OFFSET
from libero_workcell.rate import CONTROL_PRIORITY
from workcell import cli

pytest.importorskip("xrobotoolkit_sdk")
pytest.importorskip("grpc")
from emulators.xr_pc_service import HOST as XR_HOST
from emulators.xr_pc_service import PORT as XR_PORT
from emulators.xr_pc_service import XrPcService

pytestmark = [pytest.mark.ros, pytest.mark.slow]
TIMEOUT = 120.0  # s for a command, or the graph, on a loaded machine
HAND = (0.1, 1.0, -0.3, 0.0, 0.0, 0.0, 1.0)  # the operator's right hand at rest, headset frame (x y z, qx qy qz qw)


def plan(*args: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["plan", *args]) == 0
    return out.getvalue()


def test_a_demo_the_arm_refused_is_saved_and_plan_status_says_why_it_does_not_count(tmp_path, ros_env,
                                                                                    monkeypatch) -> None:  # fmt: skip
    with socket.socket() as s:
        if s.connect_ex((XR_HOST, XR_PORT)) == 0:
            pytest.skip("something already serves the XRoboToolkit PC service's port (a real service?)")
    lab = tmp_path / "lab"
    lab.mkdir()
    runtime = tmp_path / "runtime"  # where the graph announces itself to `workcell call`
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    env = {**ros_env, "XDG_RUNTIME_DIR": str(runtime)}
    shell = {k: v for k, v in env.items() if k not in OPERATOR_SHELL_UNSET}
    session, log = lab / "demos" / "d2s.hdf5", tmp_path / "teleop.out"

    def workcell(*args: str) -> subprocess.CompletedProcess:
        out = subprocess.run([sys.executable, "-m", "workcell.cli", *args], env=shell, cwd=lab, capture_output=True,
                             text=True, timeout=TIMEOUT)  # fmt: skip
        print(f"$ workcell {' '.join(args)} -> {out.returncode}\n{out.stdout}{out.stderr}", flush=True)
        return out

    def shows(*texts: str) -> None:
        assert wait_for(lambda: all(t in log.read_text() for t in texts), TIMEOUT, 0.2), (texts,
                                                                                          log.read_text()[-4000:])

    rt = CONTROL_PRIORITY + 1  # each device answers on hardware of its own: its emulator at real-time priority
    with contextlib.ExitStack() as stack:
        gripper_link, belt_link = (stack.enter_context(contextlib.closing(FaultyLink(rt))) for _ in range(2))
        stack.enter_context(contextlib.closing(CtagEmulator(gripper_link.device_port, realtime=rt)))
        stack.enter_context(contextlib.closing(DeltaVfdEmulator(belt_link.device_port, realtime=rt)))
        arm = stack.enter_context(ArcsEmulator(realtime=rt))
        headset = XrPcService().start()
        stack.callback(headset.stop)
        headset.set_right(HAND)
        cell = lab / "lab_cell.yaml"  # docs/bringup.md's cell file, naming the emulated devices
        cell.write_text(f"""use_sim: false
aubo_bridge:
  arcs: {{ip: 127.0.0.1, rpc_port: {arm.port}, rtde_port: {arm.rtde_port}, user: aubo, password: "123456",
          state_source: rtde}}
  tool_offset: {[float(v) for v in TOOL_OFFSET]}
  gripper: {{port: {gripper_link.client_port}, slave_id: 1, baudrate: 115200, timeout: 0.2, max_age: 1.0}}
conveyor_driver:
  modbus: {{preset: delta_vfd, port: {belt_link.client_port}, slave_id: 1, timeout: 0.2, max_age: 2.0,
           command_timeout: 4.0}}
wrist_camera:
  realsense: {{playback_file: {make_realsense_recording(lab / "wrist.db3", n_frames=45)}, playback_loop: true}}
external_camera:
  uvc: {{device: {make_video(lab / "external.avi", n_frames=200)}}}
""")
        first = plan("next", "--session", str(session), "--per-config", "1").splitlines()[0]
        with open(log, "w") as f:
            graph = subprocess.Popen([sys.executable, "-m", "workcell.cli", "bringup", "--job", "teleop_collect",
                                      f"cell:={cell}", f"record_path:={session}", "recorder.plan_per_config:=1",
                                      "--log-dir", str(tmp_path / "logs")], env=env, cwd=lab, stdout=f,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip

        @stack.callback
        def stop() -> None:
            if graph.poll() is None:
                os.killpg(graph.pid, signal.SIGINT)
                graph.wait(timeout=60)

        shows("aubo_bridge up", "teleop from the headset source", f"plan: next, {first}")
        # The arm was never enabled (or it faulted: the same to the recorder): teleop's actions are all refused.
        start = workcell("call", "episode", "start")
        assert start.returncode == 0 and "recording demo_0" in start.stdout, start.stdout
        shows("episode demo_0 |")  # the recorder's line once a second: it records
        time.sleep(1.0)  # (a demo's worth of refused steps)
        save = workcell("call", "episode", "save")
        assert save.returncode == 0 and "saving demo_0" in save.stdout, save.stdout
        shows("saved demo_0", "demo_0 does not count toward the collection plan: the arm refused every action it "
              "answered")  # fmt: skip
        status = plan("status", "--session", str(session), "--per-config", "1")
        assert "0 of 16 plan demos (1 demos in the file)" in status, status
        assert "  not counted: demo_0 (combination 0 slots " in status and "none accepted)" in status, status
        assert plan("next", "--session", str(session), "--per-config", "1").splitlines()[0] == first  # again

        enable = workcell("call", "enable")  # the operator sees to the arm; the same configuration again
        assert enable.returncode == 0 and "/aubo/enable: ok" in enable.stdout, enable.stdout
        assert workcell("call", "episode", "start").returncode == 0
        headset.set_right(HAND, grip=1.0)  # the clutch: the arm follows the hand
        for k in range(1, 41):
            headset.set_right((HAND[0], HAND[1], HAND[2] - 0.001 * k, *HAND[3:]), grip=1.0)
            time.sleep(0.025)
        headset.set_right(HAND)
        time.sleep(0.3)
        assert workcell("call", "episode", "save").returncode == 0
        shows("saved demo_1")
        status = plan("status", "--session", str(session), "--per-config", "1")
        assert "1 of 16 plan demos (2 demos in the file)" in status and "not counted: demo_1" not in status, status
    with h5py.File(session) as f:
        refused, performed = (dict(f[f"data/demo_{i}"].attrs) for i in (0, 1))
        assert refused["arm_accepted_steps"] == 0 and refused["arm_refused_steps"] > 5  # (a late report: no verdict)
        assert performed["arm_accepted_steps"] > 0
    print(status)
