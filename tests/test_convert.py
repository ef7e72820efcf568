"""Conversion of a demonstration into an AUBO demonstration: retargeted through the driver, re-rendered.

The source here is a real Panda path (robosuite's, from the reference data) placed in the AUBO world's
workspace, stored as an AUBO-convention LIBERO demo; the Panda source's own demos go the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from aubo_bridge.kinematics import HOME_Q, fk
from libero_workcell.libero_format import Demo, LiberoFormatError
from sim_bridge.convert import convert_demo, task_of
from sim_bridge.response_reference import load_reference
from sim_bridge.task import TaskSpec

SPEC = TaskSpec.from_seed(0)


def source_demo(name: str = "combined_translation_part") -> Demo:
    seq = next(s for s in load_reference() if s.name == name)
    p0, R0 = fk(HOME_Q)
    pos = p0 + (seq.pos - seq.pos[0])
    R = np.einsum("nij,kj,kl->nil", seq.R, seq.R[0], R0)
    t = len(seq.actions)
    return Demo(
        "demo_0",
        seq.actions,
        pos[:t],
        Rotation.from_matrix(R[:t]).as_rotvec(),
        np.zeros((t, 1)),
        np.tile(HOME_Q, (t, 1)),  # the path starts at the home pose
        np.zeros((t, 8)),
        attrs={"task_spec": SPEC.to_json(), "robot": "AUBO-i5H", "placed": [False, False, False]},
    )


def test_a_converted_demo_tracks_its_source_and_keeps_its_outcome() -> None:
    src = source_demo()
    out = convert_demo(src, render=True)
    assert out.tracking.pos_rms <= 2e-3 and np.degrees(out.tracking.rot_rms) <= 1.0, out.tracking.pos_rms
    assert out.same_outcome is True
    d = out.demo
    t = src.num_samples - 1  # the last observation has no next reference to aim at
    assert d.actions.shape == (t, 7) and d.ee_pos.shape == (t, 3) and d.joint_states.shape == (t, 6)
    assert d.images["agentview_rgb"].shape == (t, 256, 256, 3)
    np.testing.assert_array_equal(d.actions[:, 6], src.actions[:-1, 6])  # the source's gripper schedule
    assert d.attrs["robot"] == "AUBO-i5H" and d.attrs["source_demo"] == "demo_0"
    assert d.attrs["tracking_pos_rms_m"] == pytest.approx(out.tracking.pos_rms)


def test_conversion_is_deterministic() -> None:
    a = convert_demo(source_demo("rot_rz_pos_0.1"), render=False)
    b = convert_demo(source_demo("rot_rz_pos_0.1"), render=False)
    np.testing.assert_array_equal(a.demo.actions, b.demo.actions)
    np.testing.assert_array_equal(a.tracking.pos, b.tracking.pos)


def test_a_demo_without_its_task_is_a_clear_error() -> None:
    src = source_demo()
    bare = Demo(src.name, src.actions, src.ee_pos, src.ee_ori, src.gripper_states, src.joint_states, src.robot_states)
    with pytest.raises(LiberoFormatError, match="no 'task_spec' attribute"):
        task_of(bare)
