"""Conversion of a demonstration into an AUBO demonstration: retargeted through the driver, re-rendered.

The source here is a real Panda path (robosuite's, from the reference data) placed in the AUBO world's
workspace, stored as an AUBO-convention LIBERO demo; the Panda source's own demos go the same way.
"""

from __future__ import annotations

import numpy as np
import pytest
from source_demos import source_demo

from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.demo_reading import task_of
from libero_workcell.libero_format import Demo, LiberoFormatError
from sim_bridge.convert import KinematicLimitError, convert_demo, convert_kinematic


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
        task_of(bare.attrs, bare.name)


# ---------------------------------------------------------------- the kinematic fast path
@pytest.mark.parametrize(
    "name, rms, most, act",  # TCP gap RMS and max (m), largest action difference
    [
        ("combined_translation_part", 5e-4, 1e-3, 0.05),
        ("rot_rz_pos_0.1", 5e-4, 1e-3, 0.05),
        ("lissajous_yz_0.3", 2e-3, 4e-3, 0.2),
    ],
)
def test_the_kinematic_path_agrees_with_the_physics_path(name, rms, most, act) -> None:
    """Same law, same response, same limits: the TCP where MuJoCo's AUBO puts it, less its servo lag (most on
    the 2 Hz Lissajous), and no task outcome."""
    src = source_demo(name)
    fast, full = convert_kinematic(src), convert_demo(src, render=False)
    assert fast.demo.attrs["conversion"] == "kinematic" and full.demo.attrs["conversion"] == "physics"
    gap = np.linalg.norm(fast.demo.ee_pos - full.demo.ee_pos, axis=1)
    assert np.sqrt(np.mean(gap**2)) < rms and gap.max() < most, (np.sqrt(np.mean(gap**2)), gap.max())
    np.testing.assert_allclose(fast.demo.actions, full.demo.actions, atol=act)
    np.testing.assert_array_equal(fast.demo.actions[:, 6], full.demo.actions[:, 6])
    assert fast.tracking.pos_rms <= 3e-3 and fast.metrics == {} and fast.same_outcome is None  # 2 Hz Lissajous: 2.8 mm
    again = convert_kinematic(src)
    np.testing.assert_array_equal(again.demo.actions, fast.demo.actions)  # deterministic
    np.testing.assert_array_equal(again.demo.joint_states, fast.demo.joint_states)
    pos = np.array([fk(q)[0] for q in fast.demo.joint_states])
    np.testing.assert_allclose(pos, fast.demo.ee_pos, atol=2e-5)  # the joints recorded are the TCP's


@pytest.mark.parametrize(("sequence", "limit", "value"), [
    ("combined_translation_part", "max_tcp_speed", 0.03),  # the path moves faster than this: the driver would clip it
    ("rot_rz_pos_0.1", "max_tcp_rot_speed", 0.1),  # and turns faster than this
])  # fmt: skip
def test_where_a_driver_limit_would_act_the_fast_path_refuses_and_conversion_falls_back(sequence, limit, value) -> None:
    src = source_demo(sequence)
    slow = ArmConfig(**{limit: value})
    with pytest.raises(KinematicLimitError, match=f"would exceed {limit}$"):
        convert_kinematic(src, slow)
    out = convert_demo(src, render=False, arm=slow, kinematic=True)
    assert out.demo.attrs["conversion"] == "physics" and out.same_outcome is True


def test_the_fast_path_stops_the_reference_on_a_workspace_face_as_the_driver_does() -> None:
    src = source_demo("const_z_neg_0.3")  # 60 mm down from home
    low = np.array(ArmConfig().workspace_min)
    low[2] = fk(HOME_Q)[0][2] - 0.03  # the floor of the box 30 mm below: the path runs into it
    cfg = ArmConfig(workspace_min=low)
    fast, full = convert_kinematic(src, cfg), convert_demo(src, render=False, arm=cfg)
    assert fast.demo.ee_pos[:, 2].min() >= low[2] - 1e-9 and full.demo.ee_pos[:, 2].min() >= low[2] - 2e-4
    assert fast.demo.ee_pos[:, 2].min() == pytest.approx(low[2], abs=1e-9)  # it did run onto the face
    assert np.max(np.linalg.norm(fast.demo.ee_pos - full.demo.ee_pos, axis=1)) < 1e-3
