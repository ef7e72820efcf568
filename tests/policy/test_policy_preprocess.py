"""Camera frames are made ready for the policy when they arrive, not at the control tick (issue 26, item 1).

The transform has one home (adapter.camera_input: image_convention.policy_image, then openpi's
resize-with-pad); it is made in the image callback and stored with its frame's own stamp, so a snapshot
never pairs a preprocessed frame with another frame's stamp, even with frames arriving mid-step.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from openpi_client import image_tools

from libero_workcell import ros_msgs
from libero_workcell.contract import CAMERA_NAMES
from libero_workcell.loopback import free_port
from policy_node.clients import kind_for
from policy_node.clients.openpi_ws.adapter import IMAGE_KEY, WRIST_IMAGE_KEY, camera_input, openpi_observation
from policy_node.observation import LatestInputs

STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])


def openpi_libero(upright: np.ndarray) -> np.ndarray:
    """openpi's examples/libero/main.py on the frame robosuite would give (its raw view: upright flipped
    vertically): the 180-degree rotation, then image_tools.resize_with_pad to 224 and uint8."""
    raw = np.ascontiguousarray(upright[::-1])
    return image_tools.convert_to_uint8(image_tools.resize_with_pad(np.ascontiguousarray(raw[::-1, ::-1]), 224, 224))


@pytest.mark.parametrize("shape", [(192, 256, 3), (256, 192, 3), (256, 256, 3)])
def test_the_preprocessed_frame_is_openpis_libero_image_byte_for_byte(shape) -> None:
    frame = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    inputs = LatestInputs(CAMERA_NAMES, kind_for("ws://127.0.0.1:1").frame_input, "libero")
    made = inputs.frame(1.0, frame)
    assert made.policy.dtype == np.uint8 and made.policy.shape == (224, 224, 3)
    assert made.policy.tobytes() == openpi_libero(frame).tobytes()


def test_the_request_sends_the_frames_made_on_arrival() -> None:
    ext, wri = (np.random.default_rng(k).integers(0, 256, (192, 256, 3), dtype=np.uint8) for k in (1, 2))
    inputs = LatestInputs(CAMERA_NAMES, camera_input, "libero")
    inputs.put_state(1.0, STATE)
    inputs.put_frame("external", inputs.frame(1.0, ext))
    inputs.put_frame("wrist", inputs.frame(1.0, wri))
    snap = inputs.snapshot()
    obs = openpi_observation(snap, "libero", "contract", "pick")
    assert obs[IMAGE_KEY] is snap.external_input and obs[WRIST_IMAGE_KEY] is snap.wrist_input
    # another view than the one they were made for: the raw frames are transformed, never the wrong picture sent
    upright = openpi_observation(snap, "upright", "contract", "pick")
    assert upright[IMAGE_KEY].tobytes() == camera_input(ext, "upright").tobytes()
    # without preprocessing (no transform) the request is the same bytes
    bare = LatestInputs(CAMERA_NAMES)
    bare.put_state(1.0, STATE)
    bare.put_frame("external", bare.frame(1.0, ext))
    bare.put_frame("wrist", bare.frame(1.0, wri))
    assert openpi_observation(bare.snapshot(), "libero", "contract", "pick")[IMAGE_KEY].tobytes() == \
        obs[IMAGE_KEY].tobytes()  # fmt: skip


def test_a_snapshot_pairs_each_preprocessed_frame_with_its_own_stamp_while_frames_arrive() -> None:
    """Frames of value k stamped k arrive on two threads as fast as they can while the tick takes snapshots:
    every snapshot's preprocessed frame and raw frame are those of its stamp."""
    inputs = LatestInputs(CAMERA_NAMES, camera_input, "libero")
    inputs.put_state(0.0, STATE)
    stop = threading.Event()

    def camera(name: str) -> None:
        k = 0
        while not stop.is_set():
            k = k % 250 + 1
            inputs.put_frame(name, inputs.frame(float(k), np.full((64, 64, 3), k, np.uint8)))

    threads = [threading.Thread(target=camera, args=(c,), daemon=True) for c in CAMERA_NAMES]
    for t in threads:
        t.start()
    seen, deadline = 0, time.monotonic() + 1.0
    try:
        while time.monotonic() < deadline:
            snap = inputs.snapshot()
            if snap is None:
                continue
            first = snap  # and a new frame arriving now changes nothing of it
            for raw, made, stamp in ((first.external, first.external_input, first.external_stamp),
                                     (first.wrist, first.wrist_input, first.wrist_stamp)):  # fmt: skip
                assert int(raw[0, 0, 0]) == stamp and int(made[112, 112, 0]) == stamp
            seen += 1
            time.sleep(0.0005)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert seen > 50


def test_the_node_preprocesses_in_its_image_callback_while_it_drives_and_not_while_idle() -> None:
    """Driving, the frames are made ready as they arrive; stopped (an idle node: every frame of both cameras), they
    are kept raw, and the request made from them is the same bytes."""
    import rclpy

    from policy_node.node import PolicyNode

    rclpy.init(args=["--ros-args", "-p", f"policy.url:=ws://127.0.0.1:{free_port()}", "-p", "autostart:=false"])
    node = PolicyNode()
    try:
        t = time.time()
        frames = {c: np.random.default_rng(k).integers(0, 256, (192, 256, 3), dtype=np.uint8)
                  for k, c in enumerate(CAMERA_NAMES)}  # fmt: skip
        node._on_state(ros_msgs.state_msg(STATE, t))
        view = node.config.image_view
        assert not node.running  # stopped: the frames are kept as they came
        for k, (c, f) in enumerate(frames.items()):
            node._on_image(c, ros_msgs.image_msg(f, t - 0.01 * (k + 1), c))
        idle = node.snapshot()
        assert idle.external_input is None and idle.wrist_input is None and idle.input_view == ""
        node.running = True  # driving (as /policy/start or the episode's start sets it)
        for k, (c, f) in enumerate(frames.items()):
            node._on_image(c, ros_msgs.image_msg(f, t - 0.01 * (k + 1), c))
        snap = node.snapshot()
        assert snap.input_view == view
        for key in (IMAGE_KEY, WRIST_IMAGE_KEY):  # either way, the request is the same bytes
            assert openpi_observation(idle, view, "contract", "pick")[key].tobytes() == \
                openpi_observation(snap, view, "contract", "pick")[key].tobytes()  # fmt: skip
        assert snap.external_input.tobytes() == camera_input(frames["external"], view).tobytes()
        assert snap.wrist_input.tobytes() == camera_input(frames["wrist"], view).tobytes()
        assert snap.external_stamp == pytest.approx(t - 0.01) and snap.wrist_stamp == pytest.approx(t - 0.02)
    finally:
        node.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
