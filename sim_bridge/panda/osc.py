"""robosuite's ``OSC_POSE`` law for the Panda, written for this project (the 7-D action's source meaning).

Per control step (:meth:`PandaOsc.set_goal`): the position goal is the TCP position + 0.05 m x the
action, the orientation goal is Exp(0.5 rad x the action's rotation) applied on the left to the TCP
rotation, and is only moved when that rotation is non-zero. Per physics step (:meth:`apply`): the law
(:mod:`libero_workcell.osc_law`, robosuite's defaults kp = 150, damping ratio 1, null-space kp 10) plus
the bias forces, clipped to the actuators' range. The gripper: each physics step the finger command
moves 0.01 toward closed (+1 action) or open (-1), mapped onto the finger actuators' ranges.
"""

from __future__ import annotations

import mujoco
import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.contract import ACTION_POS_SCALE, ACTION_ROT_SCALE
from libero_workcell.osc_law import OscConfig, osc_control
from sim_bridge.panda.model import ARM_ACTUATORS, ARM_JOINTS, GRIP_SITE, GRIPPER_ACTUATORS

GRIPPER_SPEED = 0.01  # finger command change per physics step (robosuite's PandaGripper.speed)


class PandaOsc:
    """The Panda's OSC_POSE controller on a MuJoCo model holding the Panda (any world)."""

    def __init__(self, model: mujoco.MjModel, data: mujoco.MjData, config: OscConfig | None = None) -> None:
        self.model, self.data = model, data
        self.config = config or OscConfig()
        self._dofs = np.array([model.joint(n).dofadr[0] for n in ARM_JOINTS])
        self._qpos = np.array([model.joint(n).qposadr[0] for n in ARM_JOINTS])
        self._arm_act = np.array([model.actuator(n).id for n in ARM_ACTUATORS])
        self._grip_act = np.array([model.actuator(n).id for n in GRIPPER_ACTUATORS])
        self._site = model.site(GRIP_SITE).id
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))
        self._M = np.zeros((model.nv, model.nv))
        self._arm_low, self._arm_high = (np.ascontiguousarray(r) for r in model.actuator_ctrlrange[self._arm_act].T)
        self.reset()

    def reset(self) -> None:
        """Goals at the current TCP pose, posture target at the current joints, gripper command open."""
        mujoco.mj_forward(self.model, self.data)
        self.initial_q = self.data.qpos[self._qpos].copy()
        self.goal_pos = self.tcp_pos.copy()
        self.goal_R = self.tcp_rot.copy()
        self.finger_command = np.zeros(2)

    @property
    def tcp_pos(self) -> np.ndarray:
        return self.data.site_xpos[self._site].copy()

    @property
    def tcp_rot(self) -> np.ndarray:
        return self.data.site_xmat[self._site].reshape(3, 3).copy()

    def set_goal(self, action: np.ndarray) -> None:
        """robosuite's goal update from one validated 7-D action (its first six values)."""
        a = np.clip(np.asarray(action, float)[:6], -1.0, 1.0)
        mujoco.mj_forward(self.model, self.data)
        if np.any(a[3:6] != 0.0):
            self.goal_R = Rotation.from_rotvec(a[3:6] * ACTION_ROT_SCALE).as_matrix() @ self.tcp_rot
        self.goal_pos = self.tcp_pos + a[:3] * ACTION_POS_SCALE

    def apply(self, gripper_action: float) -> None:
        """Write this physics step's arm torques and finger commands into ``data.ctrl`` (after mj_forward)."""
        m, d, cfg = self.model, self.data, self.config
        mujoco.mj_jacSite(m, d, self._jacp, self._jacr, self._site)
        mujoco.mj_fullM(m, d, self._M)
        J = np.vstack([self._jacp[:, self._dofs], self._jacr[:, self._dofs]])
        M = self._M[np.ix_(self._dofs, self._dofs)]
        site_R = d.site_xmat[self._site].reshape(3, 3)
        d.ctrl[self._arm_act] = osc_control(cfg.kp, cfg.damping_ratio, cfg.nullspace_kp, M, J, d.qvel[self._dofs],
                                            self.goal_pos - d.site_xpos[self._site], self.goal_R, site_R,
                                            self.initial_q - d.qpos[self._qpos], d.qfrc_bias[self._dofs],
                                            self._arm_low, self._arm_high)  # fmt: skip
        # Gripper: the command creeps toward closed (finger 1 down, finger 2 up) or open at GRIPPER_SPEED.
        step = np.array([-1.0, 1.0]) * GRIPPER_SPEED * np.sign(gripper_action)
        self.finger_command = np.clip(self.finger_command + step, -1.0, 1.0)
        lo, hi = m.actuator_ctrlrange[self._grip_act].T
        d.ctrl[self._grip_act] = 0.5 * (hi + lo) + 0.5 * (hi - lo) * self.finger_command
