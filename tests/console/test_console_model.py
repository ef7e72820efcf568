"""The console's model and frame store: faults raised, classified and cleared into the session's history, the
deployment panel's figures, hostile status messages counted and never shown, frames encoded once and refused when
malformed."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from console.frames import POLICY, RAW, FrameStore
from console.model import ConsoleModel

scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=12)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_an_arm_fault_is_raised_with_its_code_and_recovery_and_cleared_into_the_history() -> None:
    clock = Clock()
    m = ConsoleModel(clock)
    m.update_arm_mode({"mode": "enabled", "fault": ""})
    assert m.snapshot()["faults"] == [] and m.snapshot()["fault_history"] == []
    clock.t = 1001.0
    m.update_arm_mode({"mode": "fault", "fault": "gripper: gripper alarm code 3"})
    snap = m.snapshot()
    assert [(f["source"], f["code"], f["since"]) for f in snap["faults"]] == [("arm", "GRIP-ALARM", 1001.0)]
    assert "reset" in snap["faults"][0]["recovery"]
    m.update_arm_mode({"mode": "fault", "fault": "gripper: gripper alarm code 3"})  # the same fault again: no event
    clock.t = 1005.0
    m.update_arm_mode({"mode": "disabled", "fault": ""})
    snap = m.snapshot()
    assert snap["faults"] == []
    assert [(e["state"], e["t"], e["code"]) for e in snap["fault_history"]] == [("raised", 1001.0, "GRIP-ALARM"),
                                                                                ("cleared", 1005.0, "GRIP-ALARM")]


def test_a_changed_fault_text_is_a_new_fault_and_other_devices_fault_through_diagnostics() -> None:
    m = ConsoleModel(Clock())
    m.update_arm_mode({"mode": "fault", "fault": "first"})
    m.update_arm_mode({"mode": "fault", "fault": "second"})
    m.update_diagnostic("conveyor_driver: belt", 2, "drive fault code 7")
    m.update_diagnostic("aubo_bridge: arm", 2, "the arm's own: through /aubo/mode, not twice")
    m.update_diagnostic("external_camera", 1, "a warning is not a fault")
    snap = m.snapshot()
    assert sorted(f["source"] for f in snap["faults"]) == ["arm", "diag:conveyor_driver: belt"]
    assert [e["text"] for e in snap["fault_history"]] == ["first", "second", "drive fault code 7"]
    assert snap["conveyor"]["diagnostic"]["message"] == "drive fault code 7"
    m.update_diagnostic("conveyor_driver: belt", 0, "ok")
    assert [f["source"] for f in m.snapshot()["faults"]] == ["arm"]


def test_the_deployment_panel_counts_chunks_round_trips_holds_and_the_server_error() -> None:
    m = ConsoleModel(Clock())
    steps = [{"kind": "chunk", "chunk": c, "index": i, "round_trip_ms": 10.0 * (c + 1), "action": [0.0] * 7,
              "reason": ""} for c in range(4) for i in range(5)]  # fmt: skip
    steps += [{"kind": "server_lost", "chunk": 3, "index": 5, "round_trip_ms": None, "action": None,
               "reason": "no policy server: connection refused"}] * 3  # fmt: skip
    for step in steps:
        m.update_json("policy", {"running": True, "connected": False, "step": step})
    d = m.snapshot()["deployment"]
    assert (d["steps"], d["chunks"], d["round_trip_p50_ms"], d["round_trip_p99_ms"]) == (23, 4, 20.0, 40.0)
    assert d["holds"] == {"server_lost": 3} and d["last_server_error"] == "no policy server: connection refused"
    assert [f["source"] for f in m.snapshot()["faults"]] == ["policy"]
    assert not d["server_answered_since"]
    m.update_json("policy", {"running": True, "connected": True, "step": steps[0],
                             "last_error": "no policy server: connection refused"})  # the status repeats it
    assert m.snapshot()["faults"] == []  # acting again: the fault clears, the figures stay
    d = m.snapshot()["deployment"]
    assert d["last_server_error"] == "no policy server: connection refused" and d["server_answered_since"]
    m.update_json("policy", {"running": True, "connected": False, "last_error": "the server failed: boom"})
    d = m.snapshot()["deployment"]
    assert d["last_server_error"] == "the server failed: boom" and not d["server_answered_since"]  # news


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(["recorder", "teleop", "policy", "replay", "episode", "nonsense"]), data=json_values,
       mode=json_values, tcp=st.lists(st.floats(), min_size=7, max_size=7))  # fmt: skip
def test_hostile_status_messages_never_break_the_model_and_the_snapshot_stays_strict_json(key, data, mode, tcp):
    from console.app import _clean

    m = ConsoleModel(Clock())
    m.update_json(key, data)
    m.update_arm_mode(mode)
    m.update_tcp(tuple(tcp[:3]), tuple(tcp[3:]))
    m.update_gripper(tcp[0])
    m.update_conveyor(tcp[1], tcp[2])
    snap = _clean(m.snapshot())
    json.dumps(snap, allow_nan=False)  # a browser's JSON.parse takes it
    if not isinstance(data, dict):
        assert snap["bad_messages"].get(key, 0) == 1
    if snap["arm"]["tcp"] is not None:
        assert all(math.isfinite(v) for v in snap["arm"]["tcp"]["position"])


def test_a_nan_pose_is_counted_and_the_last_good_one_stays() -> None:
    m = ConsoleModel(Clock())
    m.update_tcp((0.1, 0.2, 0.3), (0.0, 0.0, 0.0, 1.0))
    m.update_tcp((float("nan"), 0.2, 0.3), (0.0, 0.0, 0.0, 1.0))
    m.update_tcp((0.1, 0.2, 0.3), (0.0, 0.0, 0.0, 0.0))  # no rotation at all: not a quaternion
    snap = m.snapshot()
    assert snap["arm"]["tcp"]["position"] == [0.1, 0.2, 0.3] and snap["bad_messages"] == {"tcp_pose": 2}
    assert snap["arm"]["tcp"]["rpy_deg"] == pytest.approx([0.0, 0.0, 0.0])


def test_frames_are_encoded_once_per_frame_and_malformed_ones_refused() -> None:
    rows, cols = np.mgrid[0:256, 0:192]
    image = np.stack([rows, cols, np.full_like(rows, 40)], axis=-1).astype(np.uint8)  # red down, green across
    calls = []

    def policy(rgb: np.ndarray) -> np.ndarray:
        calls.append(rgb.shape)
        return np.ascontiguousarray(rgb[::-1, ::-1])

    store = FrameStore(("external", "wrist"), policy)
    assert store.jpeg("external") is None and store.seq("external") == 0
    assert not store.put("external", 256, 192, "bgr8", image.tobytes())
    assert not store.put("external", 256, 256, "rgb8", image.tobytes())  # its size is not what it says
    assert not store.put("nowhere", 256, 192, "rgb8", image.tobytes())
    assert store.rejected == {"external": 2, "wrist": 0}
    assert store.put("external", 256, 192, "rgb8", image.tobytes())
    seq, jpeg = store.jpeg("external", RAW)
    assert seq == 1 and store.jpeg("external", RAW)[1] is jpeg  # cached
    decoded = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    assert decoded.shape == image.shape and np.abs(decoded.astype(int) - image).mean() < 3  # in RGB order
    store.jpeg("external", POLICY)
    store.jpeg("external", POLICY)
    assert calls == [(256, 192, 3)]
    store.put("external", 256, 192, "rgb8", image.tobytes())
    assert store.jpeg("external", POLICY)[0] == 2 and len(calls) == 2
    assert FrameStore(("external",)).jpeg("external", POLICY) is None  # no policy view without a transform


def test_the_policy_view_is_what_the_policy_node_sends() -> None:
    from console.node import policy_transform
    from policy_node.clients.openpi_ws.adapter import camera_input

    image = np.random.default_rng(1).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    np.testing.assert_array_equal(policy_transform("libero")(image), camera_input(image, "libero"))
    with pytest.raises(ValueError, match="policy_view"):
        policy_transform("sideways")


def test_a_camera_is_wanted_only_while_a_page_asks_for_it() -> None:
    clock = Clock()
    store = FrameStore(("external", "wrist"), clock=clock)
    assert not store.wanted("external", 5.0)  # no page: the node takes no frames
    store.jpeg("external")  # a page asks (before any frame: nothing to send, but now it is watched)
    assert store.wanted("external", 5.0) and not store.wanted("wrist", 5.0)
    clock.t += 6.0
    assert not store.wanted("external", 5.0)  # the page went away
