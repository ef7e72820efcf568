"""The image conventions end to end, with asymmetric images: camera (upright) -> file -> policy, and
camera -> ROS message -> policy give the same picture, the LIBERO policy convention (HARDWARE.md).

A synthetic asymmetric glyph pins each function; then the simulated workcell's own external camera
(where the blue tray sits is known from the camera model, and its mirror image is not tray) goes
through a demo file in both conventions and through the contract's image message.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest

from libero_workcell import ros_msgs
from libero_workcell.image_convention import (
    ENV_ARGS_TEXT,
    ROBOSUITE_RAW,
    UPRIGHT,
    check_convention,
    convention_of,
    policy_view,
    stored,
    to_upright,
)
from libero_workcell.libero_format import read_demos, write_demo_file
from libero_workcell.task import TaskSpec
from sim_bridge.demo_recorder import DemoRecorder
from sim_cell.world import SimWorld


def glyph() -> np.ndarray:
    """An 'F' on black, red in the top-left corner: no flip or rotation leaves it unchanged."""
    img = np.zeros((8, 6, 3), np.uint8)
    img[1:7, 1] = 255  # the stem
    img[1, 1:5] = 255  # the top bar
    img[3, 1:4] = 255  # the middle bar
    img[0, 0] = (255, 0, 0)
    return img


def test_each_convention_on_an_asymmetric_glyph() -> None:
    up = glyph()
    raw = stored(up, ROBOSUITE_RAW)
    np.testing.assert_array_equal(raw, up[::-1])  # robosuite's raw: rows reversed, not rotated
    assert raw[7, 0, 0] == 255 and raw[7, 0, 1] == 0  # the red corner went to the bottom-left
    np.testing.assert_array_equal(stored(up, UPRIGHT), up)
    for c in (UPRIGHT, ROBOSUITE_RAW):
        np.testing.assert_array_equal(to_upright(stored(up, c), c), up)
    view = policy_view(up)
    np.testing.assert_array_equal(view, up[:, ::-1])  # LIBERO's policy: upright, mirrored left to right
    np.testing.assert_array_equal(policy_view(raw, ROBOSUITE_RAW), raw[::-1, ::-1])  # openpi's own rot180
    np.testing.assert_array_equal(policy_view(raw, ROBOSUITE_RAW), view)
    assert view[0, 5, 0] == 255 and view[0, 5, 1] == 0  # red now top-right: mirrored, not rotated
    for wrong in (up, up[::-1], up[::-1, ::-1]):
        assert not np.array_equal(view, wrong)
    with pytest.raises(ValueError, match="image convention must be one of"):
        check_convention("flipped")


def test_a_files_convention_is_read_from_its_env_args() -> None:
    assert convention_of({"images": ENV_ARGS_TEXT[ROBOSUITE_RAW]}) == ROBOSUITE_RAW
    assert convention_of({"images": "upright"}) == UPRIGHT
    assert convention_of({}) == ROBOSUITE_RAW  # LIBERO's own files do not say: they are robosuite's
    with pytest.raises(ValueError, match="unknown image convention"):
        convention_of({"images": "sideways"})


def _pixel(world: SimWorld, camera: str, point: np.ndarray) -> tuple[int, int]:
    """(row, column) of a world point in the upright image, from MuJoCo's camera model (pinhole, fovy)."""
    m, d = world.model, world.data
    cam = m.camera(world.CAMERAS[camera]).id
    R = d.cam_xmat[cam].reshape(3, 3)  # columns: camera x (right), y (up), z (backward)
    pc = R.T @ (point - d.cam_xpos[cam])
    size = world.render_camera(camera).shape[0]
    f = (size / 2) / np.tan(np.radians(m.cam_fovy[cam]) / 2)
    return round(float(size / 2 - f * pc[1] / -pc[2])), round(float(size / 2 + f * pc[0] / -pc[2]))


def _is_tray(rgb: np.ndarray) -> bool:
    r, g, b = (int(x) for x in rgb)
    return b > r + 40 and b > g + 10  # the tray is blue; nothing else in the scene is


@pytest.mark.parametrize("convention", [ROBOSUITE_RAW, UPRIGHT])
def test_the_sim_cameras_through_a_file_and_through_a_message_reach_the_policy_alike(tmp_path, convention) -> None:
    world = SimWorld(TaskSpec.from_seed(0), render=True, camera_hz=0.0)
    try:
        # the tray slot furthest from the image's middle column: its mirror image is not tray
        slots = [_pixel(world, "external", world.data.site(f"slot_{k}").xpos.copy()) for k in range(3)]
        row, col = max(slots, key=lambda rc: abs(rc[1] - 127.5))
        recorder = DemoRecorder(world, True, convention)
        recorder.observe(np.zeros(3), np.zeros(3), [0.0], np.zeros(6), np.zeros(8))
        recorder.act(np.zeros(7))
        recorder.observe(np.zeros(3), np.zeros(3), [0.0], np.zeros(6), np.zeros(8))
        recorder.act(np.zeros(7))
        live = world.render_camera("external")  # what the camera driver publishes: upright
    finally:
        world.close()
    assert _is_tray(live[row, col]) and not _is_tray(live[row, live.shape[1] - 1 - col])  # upright, asymmetric
    demo = recorder.demo("demo_0", {"task_spec": TaskSpec.from_seed(0).to_json()})
    env_args = {"images": ENV_ARGS_TEXT[convention]}
    path = write_demo_file(tmp_path / "d.hdf5", [demo], {}, env_args)
    f = read_demos(path, images=True)
    with h5py.File(path, "r") as h:
        assert json.loads(h["data"].attrs["env_args"])["images"] == ENV_ARGS_TEXT[convention]
    from_file = policy_view(f.demos[0].images["agentview_rgb"][1], convention_of(f.env_args))
    message = ros_msgs.image_msg(live, 0.0, "external_camera")
    from_camera = policy_view(ros_msgs.image_from_msg(message))
    np.testing.assert_array_equal(from_file, from_camera)
    assert _is_tray(from_camera[row, live.shape[1] - 1 - col])  # the policy sees the tray mirrored
    stored_frame = f.demos[0].images["agentview_rgb"][1]
    srow = row if convention == UPRIGHT else live.shape[0] - 1 - row
    assert _is_tray(stored_frame[srow, col])  # and the file holds it where its convention says
