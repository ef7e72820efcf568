"""LIBERO's action response: robosuite's OSC_POSE as a task-space reference the driver streams.

In robosuite 1.4 (LIBERO's simulator) an ``OSC_POSE`` action sets, once per control step,
a goal = the current TCP pose + the scaled delta (position: always; orientation: only when
the rotation delta is non-zero, else the previous orientation goal is kept), and a
task-space spring-damper tracks that goal at the simulation rate until the next action.
The arm therefore covers about a quarter of each step's goal offset per step and coasts a
few millimetres after the last action. Demonstrations and checkpoints assume exactly that.

The response's shape is robosuite's law acting through the Panda's pose-dependent inertia: the
translation that follows a pure rotation (tens of millimetres), the non-superposition of combined
actions. :class:`PandaResponse` is therefore that law (:mod:`libero_workcell.osc_law`) run on the
Panda's rigid body (``resources/panda_inertia.xml``, written by ``tools/make_panda_response_model.py``),
its TCP motion carried onto the AUBO's pose; the driver turns each reference pose into joints by IK
and streams it under its limits. :class:`OscResponse`, a unit-mass second-order reference per axis
fitted to robosuite's measured response (``tools/fit_osc_response.py``), is the planners' cheap
approximation of it: they close the loop on the arm's state, so it costs them only prediction accuracy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib.resources import files
from typing import Final

import mujoco
import numpy as np
from scipy.linalg import expm

from libero_workcell.kernels import compile_kernels
from libero_workcell.osc_law import OscConfig, orientation_error, osc_control
from libero_workcell.rotations import rotation_error, rotvec_matrix

# Fitted to robosuite 1.4.0's Panda (tools/fit_osc_response.py): minimax of the per-sequence
# RMS error over the travel. Position from the translation-only sequences, rotation from the
# rotation sequences. robosuite's own kp = 150, damping ratio 1 act on the Panda's real
# dynamics (gravity compensation, joint damping): the effective spring is softer.
FITTED_KP_POS: Final = 92.4  # 1/s^2
FITTED_DAMPING_POS: Final = 0.846
FITTED_KP_ROT: Final = 97.9  # 1/s^2
FITTED_DAMPING_ROT: Final = 0.836


@dataclass(frozen=True)
class OscGains:
    kp_pos: float = FITTED_KP_POS
    damping_pos: float = FITTED_DAMPING_POS
    kp_rot: float = FITTED_KP_ROT
    damping_rot: float = FITTED_DAMPING_ROT


@dataclass(frozen=True)
class RefState:
    """The reference TCP: pose and velocity (base frame; angular velocity as a world-frame vector)."""

    pos: np.ndarray
    vel: np.ndarray
    R: np.ndarray
    omega: np.ndarray

    @classmethod
    def at_rest(cls, pos: np.ndarray, R: np.ndarray) -> RefState:
        return cls(np.array(pos, float), np.zeros(3), np.array(R, float), np.zeros(3))


@dataclass(frozen=True)
class Goal:
    pos: np.ndarray
    R: np.ndarray


def transition(kp: float, zeta: float, dt: float) -> np.ndarray:
    """The exact 2x2 map of (offset from the goal, velocity) over ``dt`` for x'' = -kp x - 2 zeta sqrt(kp) x'."""
    a = np.array([[0.0, 1.0], [-kp, -2.0 * zeta * np.sqrt(kp)]])
    return expm(a * dt)


def next_goal(ref: RefState, goal: Goal, dpos: np.ndarray, drot: np.ndarray) -> Goal:
    """robosuite's goal update: relative to the reference pose; the orientation goal only moves on a
    non-zero rotation delta (world-frame axis-angle, left-multiplied)."""
    R = rotvec_matrix(drot) @ ref.R if np.any(drot != 0.0) else goal.R
    return Goal(ref.pos + dpos, R)


class OscResponse:
    """Advances a :class:`RefState` toward a :class:`Goal` by one period ``dt``."""

    def __init__(self, gains: OscGains, dt: float) -> None:
        self.gains = gains
        self.dt = dt
        self._phi_pos = transition(gains.kp_pos, gains.damping_pos, dt)
        self._phi_rot = transition(gains.kp_rot, gains.damping_rot, dt)

    def step(self, ref: RefState, goal: Goal) -> RefState:
        offset, vel = self._phi_pos @ np.stack([ref.pos - goal.pos, ref.vel])
        # Orientation offset as the rotation vector taking the goal to the reference (world frame).
        rot_offset = rotation_error(ref.R, goal.R)
        rot_offset, omega = self._phi_rot @ np.stack([rot_offset, ref.omega])
        R = rotvec_matrix(rot_offset) @ goal.R
        return RefState(goal.pos + offset, vel, R, omega)


def steady_step_ratio(gains: OscGains, control_period: float) -> float:
    """How far the reference moves per control step, per metre of a goal offset held every step.

    A held action of ``a`` moves the TCP ``ratio * a * ACTION_POS_SCALE`` per step once the
    response has settled (robosuite: 2.55 mm per step for a held +0.2, about 0.25): what a
    source that wants a speed (a feed-forward, a speed cap) must divide by.
    """
    model = OscResponse(gains, control_period)
    ref = RefState.at_rest(np.zeros(3), np.eye(3))
    previous = 0.0
    for _ in range(200):  # settles in a few dozen steps
        ref = model.step(ref, Goal(ref.pos + np.array([1.0, 0.0, 0.0]), ref.R))
        step, previous = ref.pos[0] - previous, ref.pos[0]
    return float(step)


# ---------------------------------------------------------------- the response itself: the law on the Panda
PANDA_INIT_QPOS: Final = np.array([0.0, np.pi / 16.0, 0.0, -np.pi / 2.0 - np.pi / 3.0, 0.0, np.pi - 0.2, np.pi / 4])
"""robosuite's Panda.init_qpos: the pose LIBERO's episodes start from (its data's coupling is this pose's)."""
PANDA_MODEL: Final = "resources/panda_inertia.xml"
PANDA_GRIP_SITE: Final = "robot0_gripper0_grip_site"
MAX_PHYSICS_STEP: Final = 0.002  # s: robosuite's simulation step; the response's divides the servo period
# The AUBO's workspace is bigger than the Panda's reach from its start pose: past these the Panda starts over
# from that pose (pose and twist carried over), before it stretches toward a singularity.
RECENTRE_DISTANCE: Final = 0.2  # m of TCP travel from the start pose
RECENTRE_ANGLE: Final = 0.8  # rad of TCP rotation from the start pose
# At rest on its goal the reference is its pose alone: the Panda starts over from its start pose there, so the
# response after a pause is what a LIBERO episode's start gives, whatever came before.
REST_DISTANCE: Final = 1e-4  # m from the goal
REST_ANGLE: Final = 1e-3  # rad from the goal
REST_SPEED: Final = 1e-3  # m/s
REST_ROT_SPEED: Final = 1e-2  # rad/s
RESTART_JOINTS: Final = 1e-3  # rad: a Panda closer than this to its start pose (per joint) is left as it is
_BAD_STATE_WARNINGS: Final = (mujoco.mjtWarning.mjWARN_BADQACC, mujoco.mjtWarning.mjWARN_BADQVEL,
                              mujoco.mjtWarning.mjWARN_BADQPOS)  # fmt: skip


class PandaResponse:
    """robosuite's OSC_POSE response, the Panda's, carried onto another arm's TCP pose.

    The Panda starts at :data:`PANDA_INIT_QPOS` at rest whenever the reference starts over (:meth:`reset`);
    its TCP motion since then is applied to the arm's pose there: translation added, rotation
    left-multiplied (world frame), as the action's deltas are. It starts over from that pose, the
    reference's pose and twist carried over, once it has come far from it (the arm's box is bigger than the
    Panda's reach) and whenever it comes to rest on its goal (what follows a pause is then what a LIBERO
    episode's start gives, whatever came before). :meth:`step` advances one servo period toward
    a goal given in the arm's frame. A state that stops being finite raises ``FloatingPointError``; the
    caller starts the reference over.
    """

    def __init__(self, servo_period: float, config: OscConfig | None = None) -> None:
        if not (math.isfinite(servo_period) and servo_period > 0.0):
            raise ValueError(f"servo period must be a positive number of seconds, not {servo_period!r}")
        self.config = config or OscConfig()
        self.model = mujoco.MjModel.from_xml_string(files("libero_workcell").joinpath(PANDA_MODEL).read_text())
        self.substeps = max(1, math.ceil(servo_period / MAX_PHYSICS_STEP - 1e-9))
        self.model.opt.timestep = servo_period / self.substeps
        self.data = mujoco.MjData(self.model)
        self._site = self.model.site(PANDA_GRIP_SITE).id
        self._jac = np.zeros((6, self.model.nv))
        self._M = np.zeros((self.model.nv, self.model.nv))
        self._lo, self._hi = self.model.actuator_ctrlrange.T.copy()
        self.recentres = 0
        self.reset(np.zeros(3), np.eye(3))
        compile_kernels()  # the law's kernel compiled (or loaded from numba's cache) now, not at the first servo tick

    # -------------------------------------------------------------- state
    def reset(self, pos: np.ndarray, R: np.ndarray) -> None:
        """Start over at rest at the arm pose (``pos``, ``R``): the Panda at its start pose."""
        self._start_panda(np.zeros(6))
        self._anchor(np.asarray(pos, float), np.asarray(R, float))

    def state(self) -> RefState:
        """The reference: the Panda's TCP pose and twist, carried onto the arm."""
        p, R, twist = self._tcp()
        return RefState(p + self._offset, twist[:3].copy(), R @ self._carry, twist[3:].copy())

    def seat(self, pos: np.ndarray, vel: np.ndarray, omega: np.ndarray) -> None:
        """The caller stopped the reference elsewhere (a box face, a speed limit): carry on from ``pos`` with
        this twist, the rotation kept. The Panda keeps its pose; the carried offset absorbs the difference."""
        p, _, _ = self._tcp()
        self._offset = np.asarray(pos, float) - p
        self._set_twist(np.concatenate([vel, omega]))

    def step(self, goal: Goal) -> RefState:
        """One servo period toward ``goal`` (the arm's frame); the reference at its end."""
        m, d, cfg = self.model, self.data, self.config
        goal_p, goal_R = goal.pos - self._offset, goal.R @ self._carry.T
        before = [d.warning[w].number for w in _BAD_STATE_WARNINGS]
        self._check_finite()
        try:
            site_p, site_R = d.site_xpos[self._site], d.site_xmat[self._site]
            jac_p, jac_r = self._jac[:3], self._jac[3:]
            for _ in range(self.substeps):
                mujoco.mj_step1(m, d)
                mujoco.mj_jacSite(m, d, jac_p, jac_r, self._site)
                mujoco.mj_fullM(m, d, self._M)
                d.ctrl[:] = osc_control(cfg.kp, cfg.damping_ratio, cfg.nullspace_kp, self._M, self._jac, d.qvel,
                                        goal_p - site_p, goal_R, site_R.reshape(3, 3), PANDA_INIT_QPOS - d.qpos,
                                        d.qfrc_bias, self._lo, self._hi)  # fmt: skip
                mujoco.mj_step2(m, d)
        except np.linalg.LinAlgError as exc:
            self._check_warnings(before)  # MuJoCo reset a bad state to the zero pose, which is singular
            raise FloatingPointError(f"the response's Panda reached a singular pose: {exc}") from exc
        self._check_warnings(before)
        self._check_finite()
        p, R, twist = self._tcp()
        ref = RefState(p + self._offset, twist[:3].copy(), R @ self._carry, twist[3:].copy())
        far = (np.linalg.norm(p - self._start_p) > RECENTRE_DISTANCE
               or np.linalg.norm(rotation_error(R, self._start_R)) > RECENTRE_ANGLE)  # fmt: skip
        resting = (np.linalg.norm(goal_p - p) < REST_DISTANCE and np.linalg.norm(twist[:3]) < REST_SPEED
                   and np.linalg.norm(twist[3:]) < REST_ROT_SPEED
                   and np.linalg.norm(orientation_error(goal_R, R)) < REST_ANGLE)  # fmt: skip
        if far or (resting and np.max(np.abs(d.qpos - PANDA_INIT_QPOS)) > RESTART_JOINTS):
            self._recentre(ref)
        return ref

    # -------------------------------------------------------------- internals
    def _check_warnings(self, before: list[int]) -> None:
        if any(self.data.warning[w].number != b for w, b in zip(_BAD_STATE_WARNINGS, before, strict=True)):
            raise FloatingPointError("the response's Panda diverged (MuJoCo found its state bad and reset it)")

    def _check_finite(self) -> None:
        if not (np.all(np.isfinite(self.data.qpos)) and np.all(np.isfinite(self.data.qvel))):
            raise FloatingPointError("the response's Panda diverged (its state stopped being finite)")

    def _tcp(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The Panda's TCP position, rotation and twist (linear; angular, world frame), brought up to date."""
        m, d = self.model, self.data
        mujoco.mj_kinematics(m, d)
        mujoco.mj_comPos(m, d)
        mujoco.mj_jacSite(m, d, self._jac[:3], self._jac[3:], self._site)
        return (d.site_xpos[self._site].copy(), d.site_xmat[self._site].reshape(3, 3).copy(), self._jac @ d.qvel)

    def _start_panda(self, twist: np.ndarray) -> None:
        mujoco.mj_resetData(self.model, self.data)
        self.data.qpos[:] = PANDA_INIT_QPOS
        self._start_p, self._start_R, _ = self._tcp()
        self._set_twist(twist)

    def _set_twist(self, twist: np.ndarray) -> None:
        """Joint velocities giving the TCP this twist (least squares: no posture motion added)."""
        self._tcp()
        self.data.qvel[:] = np.linalg.lstsq(self._jac, np.asarray(twist, float), rcond=None)[0]

    def _anchor(self, pos: np.ndarray, R: np.ndarray) -> None:
        """Carry the Panda's current TCP pose onto the arm pose (pos, R)."""
        p, Rp, _ = self._tcp()
        self._offset = pos - p
        self._carry = Rp.T @ R  # arm rotation = Panda rotation @ carry: world-frame deltas carry over unchanged

    def _recentre(self, ref: RefState) -> None:
        """Start the Panda over from its start pose, the reference's pose and twist unchanged."""
        self.recentres += 1
        self._start_panda(np.concatenate([ref.vel, ref.omega]))
        self._anchor(ref.pos, ref.R)
