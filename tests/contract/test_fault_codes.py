"""The fault codes (libero_workcell/faults.py): one table, the operator page's copy of it, the messages the code
really reports finding their codes, and `workcell status` showing code and recovery."""

from __future__ import annotations

import re

import pytest
from conftest import REPO

from libero_workcell import faults
from libero_workcell.faults import FAULTS, classify

OPERATOR_DOC = REPO / "docs" / "operator.md"


def test_the_operator_page_holds_the_table_as_faults_py_writes_it() -> None:
    text = OPERATOR_DOC.read_text(encoding="utf-8")
    match = re.search(r"<!-- faults: generated from src/libero_workcell/faults.py -->\n(.*?)\n<!-- end of faults -->",
                      text, re.S)  # fmt: skip
    assert match, "docs/operator.md has no Faults table between its markers"
    assert match.group(1).strip() == faults.markdown_table(), (
        "docs/operator.md's Faults table differs from faults.py: replace it with `python -m libero_workcell.faults`")


def test_codes_are_short_stable_unique_and_each_example_finds_its_own_code() -> None:
    codes = [f.code for f in FAULTS]
    assert len(codes) == len(set(codes))
    for f in FAULTS:
        assert re.fullmatch(r"[A-Z]+(-[A-Z]+){1,2}", f.code) and len(f.code) <= 24, f.code
        assert f.device in faults.DEVICES and f.meaning.endswith(".") and f.recovery.endswith("."), f.code
        assert f.code.split("-")[0] == {"gripper": "GRIP", "conveyor": "BELT", "recorder": "REC", "camera": "CAM"}.get(
            f.device, f.device.upper()), f.code  # fmt: skip
        assert classify(f.example) is f, f"{f.code}'s example finds {classify(f.example)}: an earlier pattern shadows"
    assert classify("disabled") is None and classify("ok") is None  # states, not faults


def test_every_arm_stop_the_controller_reports_has_its_code() -> None:
    from aubo_bridge.backends import arcs as arcs_backend

    SAFETY_FAULTS, arm_state = arcs_backend.SAFETY_FAULTS, arcs_backend.classify

    expected = {4: "ARM-VIOLATION", 5: "ARM-PSTOP", 6: "ARM-SAFEGUARD", 7: "ARM-ESTOP", 8: "ARM-ESTOP",
                9: "ARM-CONTROLLER"}  # fmt: skip
    assert set(expected) == set(SAFETY_FAULTS)
    for safety, code in expected.items():
        _ready, fault = arm_state(8, safety, False)
        assert classify(fault, [faults.ARM]).code == code, fault
    others = {(8, 1, True): "ARM-COLLISION", (10, 1, False): "ARM-CONTROLLER", (-1, 1, False): "ARM-NO-ARM",
              (0, 1, False): "ARM-NO-ARM"}  # fmt: skip
    for (mode, safety, collided), code in others.items():
        _ready, fault = arm_state(mode, safety, collided)
        assert classify(fault).code == code, fault
    assert arm_state(8, 1, False) == (True, None)


def test_every_state_in_which_teleop_holds_the_arm_has_its_code() -> None:
    from teleop_pico.core import Status

    for status in Status:
        fault = classify(status.value, [faults.TELEOP])
        assert (fault is None) == (not status.holds or status is Status.IDLE), status  # idle: the clutch released


def test_the_policy_and_recorder_and_camera_messages_find_their_codes(tmp_path) -> None:
    from camera_driver.driver import CameraDriver
    from libero_workcell.loopback import free_port
    from policy_node.clients.openpi_ws.client import TimedPolicyClient, parse_reply
    from policy_node.protocol import MalformedReply, PolicyServerError
    from recorder.session_file import RecorderError, SessionFile

    with pytest.raises(PolicyServerError) as lost:
        TimedPolicyClient(f"ws://127.0.0.1:{free_port()}", timeout=1.0)
    assert classify(f"no policy server: {lost.value}").code == "POLICY-NO-SERVER"  # policy_node's diagnostics
    with pytest.raises(MalformedReply) as malformed:
        parse_reply({"error": 1}, 1.0)
    assert classify(str(malformed.value)).code == "POLICY-MALFORMED"
    with pytest.raises(RecorderError) as full:
        SessionFile(tmp_path / "s.hdf5", {}, {}, min_free_bytes=1 << 62).check_space()
    assert classify(str(full.value)).code == "REC-DISK"

    class NoCamera:
        name = "wrist"

        def latest(self):
            return None

    assert classify(CameraDriver(NoCamera(), 0.2).read_latest()[1]).code == "CAM-STALE"


def test_status_shows_each_fault_with_its_code_and_what_to_do() -> None:
    from workcell.operator_cli import format_status

    seen = {
        "nodes": ["aubo_bridge", "conveyor_driver", "recorder", "teleop_pico", "wrist_camera"],
        "diagnostics": {
            "aubo_bridge": (2, "safety mode RobotEmergencyStop", {"mode": "fault"}),
            "conveyor": (2, "delta_vfd fault code 7 (0x0007)", {}),
            "camera/wrist": (1, "no frame yet", {"last_error": "RealSense 123 is not connected (connected: [])"}),
            "policy_node": (0, "connected", {}),
        },
        "arm": {"mode": "fault", "fault": "safety mode RobotEmergencyStop"},
        "source": "teleop",
        "recorder": {"recording": False, "error": "/d/x_episodes: only 3 MiB free, at least 512 MiB are needed"},
        "teleop": {"status": "no_tracking", "engaged": False},
    }
    text = format_status(seen, 42)
    assert "ERROR aubo_bridge: safety mode RobotEmergencyStop [ARM-ESTOP]" in text
    assert "arm: fault, fault safety mode RobotEmergencyStop [ARM-ESTOP], source teleop" in text
    assert "delta_vfd fault code 7 (0x0007) [BELT-DRIVE]" in text and "no frame yet [CAM-LOST]" in text
    assert "[REC-DISK]" in text and "teleop holds the arm: no_tracking [TELEOP-NO-TRACKING]" in text
    todo = text.split("what to do:\n")[1].splitlines()
    assert [line.split(":")[0].strip() for line in todo] == ["ARM-ESTOP", "BELT-DRIVE", "CAM-LOST", "REC-DISK",
                                                             "TELEOP-NO-TRACKING"]  # fmt: skip
    assert todo[0].strip() == f"ARM-ESTOP: {faults.BY_CODE['ARM-ESTOP'].recovery}"  # once, though shown twice
    assert "what to do" not in format_status({"diagnostics": {"aubo_bridge": (1, "disabled", {})}}, 42)
