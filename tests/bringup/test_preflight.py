"""`workcell check` (libero_workcell/preflight.py and each package's preflight module) against the emulators:
the ARCS controller (RPC and RTDE) through the real pyaubo_sdk, the CTAG gripper and the Delta VFD on pty pairs,
a RealSense recording and a video file through the camera sources, the XRoboToolkit PC service through the real
xrobotoolkit-sdk, an openpi server; a lab's cell file and the same arguments as `workcell bringup`."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from camera_fixtures import make_realsense_recording, make_video
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator, DeltaVfdEmulator
from emulators.serial_link import SocatPair

from libero_workcell import preflight
from libero_workcell.preflight import FAIL, OK, SKIP, WARN, Context, ProbeError
from policy_node.builtin_policies import ReachPolicy
from policy_node.serve import LocalPolicyServer
from workcell import cli, run_registry

TASK = "pick up the pipe fitting, the bracket block and the motor cap"


@pytest.fixture(scope="module")
def cell(tmp_path_factory) -> Iterator[dict[str, Any]]:
    """The emulated physical cell and a lab's cell file naming it."""
    folder = tmp_path_factory.mktemp("cell")
    gripper_pair, belt_pair = SocatPair(), SocatPair()
    gripper, vfd = CtagEmulator(gripper_pair.a), DeltaVfdEmulator(belt_pair.a)
    arm = ArcsEmulator().start()
    server = LocalPolicyServer(ReachPolicy([0.45, 0.0, 0.35]), metadata={"policy": "reach"}).start()
    recording = make_realsense_recording(folder / "wrist.db3", n_frames=8)
    video = make_video(folder / "external.avi", n_frames=8)
    cell_file = folder / "lab_cell.yaml"
    cell_file.write_text(f"""use_sim: false
aubo_bridge:
  arcs: {{ip: 127.0.0.1, rpc_port: {arm.port}, rtde_port: {arm.rtde_port}, password: "123456"}}
  gripper: {{port: {gripper_pair.b}, slave_id: 1}}
conveyor_driver:
  modbus: {{preset: delta_vfd, port: {belt_pair.b}, slave_id: 1}}
wrist_camera:
  realsense: {{playback_file: {recording}}}
external_camera:
  uvc: {{device: {video}}}
""")
    try:
        yield {"arm": arm, "vfd": vfd, "server": server, "cell_file": cell_file, "folder": folder}
    finally:
        server.stop()
        arm.stop()
        gripper.close()
        vfd.close()
        gripper_pair.close()
        belt_pair.close()


@pytest.fixture
def registry(tmp_path, monkeypatch) -> Path:
    """No graph runs (the run registry is empty), unless a test announces one."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def headset() -> Iterator[Any]:
    pytest.importorskip("xrobotoolkit_sdk")
    from emulators.xr_pc_service import XrPcService, holding_the_port

    with holding_the_port():  # the SDK's fixed port: this test's turn on it
        service = XrPcService().start()
        yield service
        service.stop()


def check(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(["check", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def lines(out: str) -> dict[str, str]:
    """`what: detail` -> status, for each check line."""
    found = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] in (OK, WARN, FAIL, SKIP):
            found[parts[2]] = parts[0]
    return found


def test_the_whole_emulated_cell_passes_with_the_lab_cell_file_and_bringups_arguments(cell, headset, registry,
                                                                                      capsys, tmp_path):  # fmt: skip
    t0 = time.monotonic()
    code, out = check(capsys, "--job", "teleop_collect", f"cell:={cell['cell_file']}", "policy:=true",
                      f"policy_url:={cell['server'].url}", f"task:={TASK}",
                      f"record_path:={tmp_path / 'demos' / 'd2s.hdf5'}")  # fmt: skip
    assert code == 0, out
    found = lines(out)
    assert set(found.values()) == {OK}, out
    expected = ["ARCS RPC 127.0.0.1", "arm state: robot mode PowerOff, safety mode Normal", "ARCS RTDE 127.0.0.1",
                "gripper at Modbus ID 1", "delta_vfd at Modbus ID 1", "external camera (UVC", "wrist camera (RealSense",
                "XRoboToolkit PC service", "policy server ws://127.0.0.1", "session "]  # fmt: skip
    for what in expected:
        assert sum(k.startswith(what) for k in found) == 1, (what, out)
    assert "metadata: policy 'reach'" in out and "streams" in out and "gives frames" in out
    assert not (tmp_path / "demos").exists()  # read only: nothing created, nothing enabled or started
    state = cell["arm"].state()
    assert state["mode"] == "PowerOff" and state["servo_mode"] == 0 and "poweron" not in str(state["counts"])
    assert not cell["vfd"].writes and not cell["vfd"].running
    print(f"whole cell checked in {time.monotonic() - t0:.1f} s")


def test_every_failure_says_what_to_do_and_the_exit_status_is_1(cell, registry, capsys) -> None:
    arm, vfd = cell["arm"], cell["vfd"]
    arm.protective_stop()
    vfd.inject_fault(7)
    try:
        dead = preflight_free_port()
        code, out = check(capsys, "--job", "deploy_real", f"cell:={cell['cell_file']}", f"policy_url:=ws://127.0.0.1:{dead}",
                          "aubo_bridge.gripper.slave_id:=7", "wrist_camera.realsense.playback_file:=",
                          "wrist_camera.realsense.serial:=000000000000")  # fmt: skip
    finally:
        arm._cmd("set", safety=1, cause_active=False)  # the cause gone and the stop unlocked (the emulator's own op)
        vfd.call(vfd.set_reg, vfd.FAULT, 0)
    assert code == 1, out
    found = lines(out)
    failed = [k for k, v in found.items() if v == FAIL]
    assert len(failed) == 5, out
    for expected in ("arm state: robot mode PowerOff, safety mode ProtectiveStop", "gripper at Modbus ID 7",
                     "delta_vfd at Modbus ID 1", "wrist camera (RealSense 000000000000)", "policy server"):  # fmt: skip
        assert any(k.startswith(expected) for k in failed), (expected, out)
    assert "[ARM-PSTOP] Remove the cause" in out and "fault code 7" in out and "is not connected" in out
    assert found[next(k for k in found if k.startswith("task:"))] == WARN  # deploy_real with no task: refused later
    rows = out.splitlines()
    for i, row in enumerate(rows):  # every failure is followed by what to do
        if row.split()[:1] == [FAIL]:
            assert rows[i + 1].strip().startswith("->") and len(rows[i + 1]) > 40, row
    assert found[next(k for k in found if k.startswith("ARCS RPC"))] == OK  # the rest still checked
    assert found[next(k for k in found if k.startswith("external camera"))] == OK


def preflight_free_port() -> int:
    from libero_workcell.loopback import free_port

    return free_port()


def test_serial_ports_and_cameras_are_left_alone_while_a_real_graph_runs(cell, registry, capsys) -> None:
    run_registry.announce(run_registry.GraphRecord(17, os.getpid(), time.time(), False, "real_workcell"))
    try:
        code, out = check(capsys, "--job", "real_workcell", f"cell:={cell['cell_file']}")
    finally:
        run_registry.withdraw()
    assert code == 0, out
    found = lines(out)
    skipped = [k for k, v in found.items() if v == SKIP]
    assert len(skipped) == 4 and all("a real-profile graph runs (pid" in k and "ROS_DOMAIN_ID 17" in k
                                     for k in skipped), out  # fmt: skip
    assert {k.split(" (")[0].split(" at ")[0] for k in skipped} == {"gripper", "delta_vfd", "external camera",
                                                                    "wrist camera"}  # fmt: skip
    assert [v for k, v in found.items() if k.startswith("ARCS RPC")] == [OK]  # the network ones are still checked


def test_the_sim_profile_has_nothing_to_check_and_bad_arguments_exit_2(registry, capsys, tmp_path) -> None:
    code, out = check(capsys)
    assert code == 0 and "nothing to check" in out
    code, out = check(capsys, "--job", "teleop_collect_sim", f"record_path:={tmp_path / 'd.hdf5'}")
    assert code == 0 and lines(out) == {
        "scripted session config/teleop/d2s_scripted_session.json: 1090 keyframes, 54.5 s": OK,
        f"session {tmp_path / 'd.hdf5'}: writable, " + out.split("writable, ")[1].split("\n")[0]: OK}
    code, out = check(capsys, "--job", "teleop_collect_sim", "recorder.min_free_mb:=1000000000")
    assert code == 1 and "MiB needed (min_free_mb)" in out and "record elsewhere" in out
    code, out = check(capsys, "aubo_bridge.no_such:=1")
    assert code == 2 and "aubo_bridge has no parameter 'no_such'" in out
    code, out = check(capsys, "--job", "nope")
    assert code == 2 and "jobs are" in out


def test_the_nodes_checked_show_on_stderr_and_the_report_stays_on_stdout(registry, capsys, tmp_path) -> None:
    assert cli.main(["check", "--job", "teleop_collect_sim", f"record_path:={tmp_path / 'd.hdf5'}"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"^checking: 100%.* (\d+)/\1 ", captured.err, re.M), captured.err
    assert "checking" not in captured.out and "2 passed, 0 failed" in captured.out


def test_a_relay_belt_is_read_through_the_controller_and_a_tool_gripper_is_left_to_the_bridge(cell) -> None:
    from aubo_bridge import preflight as arm_checks
    from conveyor_driver import preflight as belt_checks

    arm = cell["arm"]
    relay = {"use_sim": False, "backend": "io", "io.ip": "127.0.0.1", "io.port": arm.port}
    (ok,) = belt_checks.check("conveyor_driver", {**relay, "io.do_index": 3}, Context())
    (missing,) = belt_checks.check("conveyor_driver", {**relay, "io.do_index": 40}, Context())
    assert ok.status == OK and "reads off" in ok.detail
    assert missing.status == FAIL and "16 standard digital outputs" in missing.detail and "0..15" in missing.todo
    assert not any(arm.state()["digital_outputs"])  # read, never switched
    tool = arm_checks._gripper("aubo_bridge", {"use_sim": False, "gripper_path": "tool"}, Context())
    assert tool.status == SKIP and "checked by the bridge at start" in tool.detail


def test_an_unknown_gripper_model_fails_the_check_with_the_known_ones() -> None:
    from aubo_bridge import preflight as arm_checks

    bad = arm_checks._gripper("aubo_bridge", {"use_sim": False, "gripper_model": "robotiq2f85"}, Context())
    assert bad.status == FAIL and "known: ctag2f90d" in bad.detail and "gripper_model" in bad.todo


def test_without_its_service_the_headset_check_fails_with_what_to_do() -> None:
    pytest.importorskip("xrobotoolkit_sdk")
    from emulators.xr_pc_service import holding_the_port

    from teleop_pico import preflight as teleop_checks

    # the probe's own wait is 3 s; its child may take longer than the rest to start the SDK on a loaded machine,
    # which is not what this checks (a probe that hangs: the test below)
    with holding_the_port():  # nobody serves the port meanwhile (another test's emulator would answer)
        (c,) = teleop_checks.check("teleop_pico", {"source": "headset"}, Context(timeout=10.0))
    assert c.status == FAIL and c.detail == "no data within 3 s" and "Start the XRoboToolkit PC service" in c.todo


def test_a_child_probe_that_crashes_or_hangs_is_a_failure_not_a_crash() -> None:
    assert preflight.in_child("preflight_probes:echo", {"x": [1]}) == {"got": {"x": [1]}}  # through its own noise
    with pytest.raises(ProbeError, match=r"ended without an answer \(exit code -6\)"):
        preflight.in_child("preflight_probes:crash", {})
    t0 = time.monotonic()
    with pytest.raises(ProbeError, match=r"no answer within 0\.5 s"):  # a 60 s hang: any timeout shows it
        preflight.in_child("preflight_probes:hang", {"seconds": 60}, timeout=0.5)
    assert time.monotonic() - t0 < 30  # killed, not waited for
    assert preflight.in_child("preflight_probes:no_such", {})["error"].startswith("AttributeError")
