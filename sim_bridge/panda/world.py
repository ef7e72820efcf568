"""The workcell with robosuite's Panda in the AUBO's place, driven by the 7-D action through the OSC.

Everything but the arm is the AUBO world's (:class:`sim_cell.world.SimWorld`): the same task
definition, belt, arrivals, tray, workpieces, external camera and metrics, built from the same
scene with the AUBO left out. The Panda's base sits where the AUBO's does (the cell's base frame);
its wrist camera is robosuite's ``eye_in_hand``. The world has no link: the Panda source runs in
one process, in sim time (``step_action``: the OSC goal from the action, then one control period
of physics with fresh OSC torques every step, as robosuite steps).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Final

import mujoco
import numpy as np

from libero_workcell.contract import CAMERA_HZ_DEFAULT, CONTROL_HZ_DEFAULT
from libero_workcell.osc_law import OscConfig
from libero_workcell.task import TaskSpec
from sim_bridge.panda.model import (
    ARM_JOINTS,
    GRIP_SITE,
    GRIPPER_JOINTS,
    GRIPPER_PREFIX,
    HAND_BODY,
    INIT_QPOS,
    ROBOT_PREFIX,
    attach_panda,
)
from sim_bridge.panda.osc import PandaOsc
from sim_bridge.panda.standalone import GRIPPER_INIT_QPOS
from sim_cell import scene
from sim_cell.world import SimWorld, _xyzw

# The Panda stands where the AUBO does, turned 45 deg toward the belt: its joint 1 turns +-166 deg (the
# AUBO's +-360), so facing +x it could not reach the belt's start behind it and the tray on its right. It
# stands on a mount, as robosuite's Panda does (LIBERO's table top is 0.11 m below its base): working at its
# own base's height within 0.45 m of it, its elbow (joint 4) folds onto its limit.
PANDA_MOUNT_HEIGHT: Final = 0.15  # m
PANDA_MOUNT_RADIUS: Final = 0.10
PANDA_BASE_POS: Final = np.array([0.0, 0.0, PANDA_MOUNT_HEIGHT])
PANDA_BASE_YAW: Final = np.pi / 4
FINGER_OPENING: Final = 0.08  # m between the Panda's fingers fully open (2 x 0.04)
_G: Final = ROBOT_PREFIX + GRIPPER_PREFIX
# The expert's TCP orientation for the Panda: pointing down, fingers along the belt like the AUBO's
# grasp, turned half a turn about z from the AUBO's (45 deg from the Panda's start, not 135).
PANDA_TCP_ROTMAT: Final = np.diag([-1.0, 1.0, -1.0])
HAND: Final = ROBOT_PREFIX + HAND_BODY  # LIBERO's ee_ori / eef_quat is this body's orientation


class PandaWorld(SimWorld):
    CAMERAS = MappingProxyType({"external": "external", "wrist": f"{ROBOT_PREFIX}eye_in_hand"})

    def __init__(
        self,
        spec: TaskSpec,
        render: bool = True,
        camera_hz: float = CAMERA_HZ_DEFAULT,
        control_hz: float = CONTROL_HZ_DEFAULT,
        osc: OscConfig | None = None,
        base_yaw: float = PANDA_BASE_YAW,
    ) -> None:
        self._osc_config = osc or OscConfig()
        self._base_yaw = float(base_yaw)
        self._control_hz = control_hz
        self._grip_action = -1.0
        super().__init__(spec, link=None, render=render, camera_hz=camera_hz)
        self.substeps = round(1.0 / control_hz / scene.TIMESTEP)

    def _build(self, spec: TaskSpec) -> None:
        super()._build(spec)
        if self.render_enabled:  # robosuite's marker sites (grip site sphere, its 10 m guide cylinder) stay unseen
            self._scene_option.sitegroup[:] = 0

    def _compile_model(self, workpieces: list[tuple[str, Any]]) -> mujoco.MjModel:
        spec = mujoco.MjSpec.from_string(scene.build_mjcf(workpieces, with_aubo=False))
        spec.worldbody.add_geom(  # the mount: seen, never touched (nothing the task moves comes near it)
            name="panda_mount", type=mujoco.mjtGeom.mjGEOM_CYLINDER, contype=0, conaffinity=0,
            size=[PANDA_MOUNT_RADIUS, PANDA_MOUNT_HEIGHT / 2, 0.0], pos=[0.0, 0.0, PANDA_MOUNT_HEIGHT / 2],
            rgba=[0.15, 0.15, 0.17, 1.0],
        )  # fmt: skip
        attach_panda(spec, PANDA_BASE_POS, np.array([np.cos(self._base_yaw / 2), 0.0, 0.0, np.sin(self._base_yaw / 2)]))
        return spec.compile()

    def _bind_arm(self, m: mujoco.MjModel) -> None:
        self._arm_qadr = np.array([m.joint(n).qposadr[0] for n in ARM_JOINTS])
        self._arm_dadr = np.array([m.joint(n).dofadr[0] for n in ARM_JOINTS])
        self._finger_qadr = np.array([m.joint(n).qposadr[0] for n in GRIPPER_JOINTS])
        self._site = m.site(GRIP_SITE).id
        self._hand = m.body(HAND).id
        self._left_geoms = {m.geom(f"{_G}finger1_collision").id, m.geom(f"{_G}finger1_pad_collision").id}
        self._right_geoms = {m.geom(f"{_G}finger2_collision").id, m.geom(f"{_G}finger2_pad_collision").id}
        self._home_q = INIT_QPOS.copy()

    def _reset_arm(self) -> None:
        d = self.data
        assert self.model is not None and d is not None
        d.qpos[self._arm_qadr] = self._home_q
        d.qpos[self._finger_qadr] = GRIPPER_INIT_QPOS
        self._arm_target = self._home_q.copy()
        self._grip_action = -1.0
        self.osc = PandaOsc(self.model, d, self._osc_config)  # goals at the start pose

    def step_action(self, action: np.ndarray) -> None:
        """One control step of a 7-D action: the OSC goal from it, then one control period of physics."""
        a = np.asarray(action, float)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ValueError(f"a 7-D finite action is required, got {a!r}")
        self.osc.set_goal(a)
        self._grip_action = float(a[6])
        self.step(self.substeps)

    def _servo(self) -> None:
        assert self.model is not None and self.data is not None
        mujoco.mj_forward(self.model, self.data)  # robosuite computes the torques on fresh kinematics
        self.osc.apply(self._grip_action)

    @property
    def gripper_coord(self) -> float:
        """0 open .. 1 closed, from the finger opening (the contract's coordinate)."""
        assert self.data is not None
        q = self.data.qpos[self._finger_qadr]
        return min(1.0, max(0.0, 1.0 - float(q[0] - q[1]) / FINGER_OPENING))

    @property
    def finger_qpos(self) -> np.ndarray:
        assert self.data is not None
        return self.data.qpos[self._finger_qadr].copy()

    @property
    def hand_rotmat(self) -> np.ndarray:
        assert self.data is not None
        return self.data.xmat[self._hand].reshape(3, 3).copy()

    @property
    def hand_quat(self) -> np.ndarray:
        """(x, y, z, w) of the hand body: robosuite's robot0_eef_quat."""
        assert self.data is not None
        return _xyzw(self.data.xquat[self._hand])
