"""The workcell MJCF: compiles, matches the URDF table and the layout."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from transforms3d.euler import euler2mat

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_ORIGINS, TOOL_OFFSET
from libero_workcell import layout
from libero_workcell.contract import ARM_JOINT_NAMES, CAMERA_NAMES
from libero_workcell.task import WORKPIECE_CATALOG, TaskSpec
from sim_cell import scene


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    spec = TaskSpec.from_seed(0)
    wps = [(f"wp_{i}", t) for i, t in enumerate(spec.workpiece_types)]
    return mujoco.MjModel.from_xml_string(scene.build_mjcf(wps))


def urdf_tcp(q: np.ndarray) -> np.ndarray:
    """Product of the URDF joint transforms (origin, then rotation about z) and the tool offset."""
    T = np.eye(4)
    for jo, angle in zip(JOINT_ORIGINS, q, strict=True):
        origin = np.eye(4)
        origin[:3, :3] = euler2mat(*jo.rpy, axes="sxyz")
        origin[:3, 3] = jo.xyz
        rz = np.eye(4)
        c, s = np.cos(angle), np.sin(angle)
        rz[:2, :2] = [[c, -s], [s, c]]
        T = T @ origin @ rz
    tool = np.eye(4)
    tool[:3, 3] = TOOL_OFFSET
    return T @ tool


def test_scene_compiles_with_the_required_options(model: mujoco.MjModel) -> None:
    assert model.opt.timestep == pytest.approx(0.002)
    assert model.opt.integrator == mujoco.mjtIntegrator.mjINT_IMPLICITFAST
    # Empty scene (no workpieces) and every catalog part compile too.
    mujoco.MjModel.from_xml_string(scene.build_mjcf())
    everything = [(f"wp_{i}", t) for i, t in enumerate(WORKPIECE_CATALOG.values())]
    m = mujoco.MjModel.from_xml_string(scene.build_mjcf(everything))
    assert all(m.body(f"wp_{i}").id > 0 for i in range(len(everything)))


def test_arm_joints_match_the_description(model: mujoco.MjModel) -> None:
    for i, name in enumerate(ARM_JOINT_NAMES):
        j = model.joint(name)
        assert j.type[0] == mujoco.mjtJoint.mjJNT_HINGE
        np.testing.assert_allclose(j.axis, [0, 0, 1])
        np.testing.assert_allclose(j.range, JOINT_LIMITS[i], atol=1e-9)
        assert bool(model.jnt_limited[j.id])
        body = model.body(j.bodyid[0])
        np.testing.assert_allclose(body.pos, JOINT_ORIGINS[i].xyz, atol=1e-9)
        assert model.body_gravcomp[body.id] == 1.0
        assert model.dof_armature[j.dofadr[0]] > 0
        act = model.actuator(name)
        assert act.trntype[0] == mujoco.mjtTrn.mjTRN_JOINT and act.trnid[0] == j.id
        assert act.gainprm[0] >= 1000  # stiff position servo


def test_arm_links_never_collide(model: mujoco.MjModel) -> None:
    for body in scene.ARM_BODIES + ("base_link",):
        bid = model.body(body).id
        for g in np.flatnonzero(model.geom_bodyid == bid):
            assert model.geom_contype[g] == 0 and model.geom_conaffinity[g] == 0


@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4])
def test_grip_site_matches_the_urdf_chain(model: mujoco.MjModel, seed: int | None) -> None:
    q = np.zeros(6) if seed is None else np.random.default_rng(seed).uniform(-np.pi, np.pi, 6)
    data = mujoco.MjData(model)
    for name, angle in zip(ARM_JOINT_NAMES, q, strict=True):
        data.qpos[model.joint(name).qposadr[0]] = angle
    mujoco.mj_kinematics(model, data)
    T = urdf_tcp(q)
    site = model.site(scene.GRIP_SITE).id
    np.testing.assert_allclose(data.site_xpos[site], T[:3, 3], atol=1e-9)
    np.testing.assert_allclose(data.site_xmat[site].reshape(3, 3), T[:3, :3], atol=1e-9)


def test_gripper_fingers_stroke_and_force(model: mujoco.MjModel) -> None:
    for name in scene.FINGER_JOINTS:
        j = model.joint(name)
        assert j.type[0] == mujoco.mjtJoint.mjJNT_SLIDE
        np.testing.assert_allclose(j.range, [0.0, 0.045])
        act = model.actuator(name)
        assert bool(model.actuator_forcelimited[act.id])
        assert 5.0 <= model.actuator_forcerange[act.id][1] <= 60.0
    for pad in scene.PAD_GEOMS:
        g = model.geom(pad)
        assert g.friction[0] >= 1.5 and g.condim[0] in (4, 6)
    # The gripper body is a child of the flange (wrist3) body.
    assert model.body(scene.GRIPPER_BODY).parentid[0] == model.body(scene.ARM_BODIES[-1]).id


def test_pads_close_symmetrically_about_the_grip_site(model: mujoco.MjModel) -> None:
    data = mujoco.MjData(model)
    for opening in (0.0, 0.02, 0.045):
        for name in scene.FINGER_JOINTS:
            data.qpos[model.joint(name).qposadr[0]] = opening
        mujoco.mj_kinematics(model, data)
        site = data.site_xpos[model.site(scene.GRIP_SITE).id]
        R = data.site_xmat[model.site(scene.GRIP_SITE).id].reshape(3, 3)
        left = R.T @ (data.geom_xpos[model.geom("pad_left").id] - site)
        right = R.T @ (data.geom_xpos[model.geom("pad_right").id] - site)
        half_thickness = model.geom("pad_left").size[0]
        assert left[0] - half_thickness == pytest.approx(opening, abs=1e-9)  # inner face at +opening
        assert right[0] + half_thickness == pytest.approx(-opening, abs=1e-9)
        assert abs(left[2]) < 1e-9 and abs(right[2]) < 1e-9  # pads centred on the TCP along z


def test_conveyor_tray_and_sites_follow_the_layout(model: mujoco.MjModel) -> None:
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    belt = model.geom(scene.BELT_GEOM).id
    top = data.geom_xpos[belt][2] + model.geom_size[belt][2]
    assert top == pytest.approx(layout.BELT_TOP_Z, abs=1e-6)
    assert data.geom_xpos[belt][1] == pytest.approx(layout.BELT_Y)
    assert model.geom_size[belt][1] * 2 == pytest.approx(layout.BELT_WIDTH)
    assert data.geom_xpos[belt][0] - model.geom_size[belt][0] == pytest.approx(layout.BELT_X_MIN, abs=1e-6)
    assert data.geom_xpos[belt][0] + model.geom_size[belt][0] == pytest.approx(layout.BELT_X_MAX, abs=1e-6)
    for k, c in enumerate(layout.slot_centers()):
        np.testing.assert_allclose(data.site_xpos[model.site(f"slot_{k}").id], c, atol=1e-9)
    floor = model.geom("tray_floor").id
    assert data.geom_xpos[floor][2] + model.geom_size[floor][2] == pytest.approx(layout.TRAY_FLOOR_Z)
    wall = model.geom("tray_wall_front").id
    assert data.geom_xpos[wall][2] + model.geom_size[wall][2] == pytest.approx(layout.TRAY_WALL_HEIGHT)


def test_cameras_and_light(model: mujoco.MjModel) -> None:
    for name in CAMERA_NAMES:
        assert model.camera(name).id >= 0
    assert model.cam_bodyid[model.camera("wrist").id] == model.body(scene.GRIPPER_BODY).id
    assert model.nlight == 1 and not model.light_castshadow[0]
    # The wrist camera looks along the tool z axis (cameras look along their -z).
    data = mujoco.MjData(model)
    mujoco.mj_forward(model, data)
    cam_fwd = -data.cam_xmat[model.camera("wrist").id].reshape(3, 3)[:, 2]
    tool_z = data.site_xmat[model.site(scene.GRIP_SITE).id].reshape(3, 3)[:, 2]
    assert float(cam_fwd @ tool_z) > 0.9
