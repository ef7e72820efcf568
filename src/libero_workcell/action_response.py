"""LIBERO's action response: robosuite's OSC_POSE as a task-space reference the driver streams.

In robosuite 1.4 (LIBERO's simulator) an ``OSC_POSE`` action sets, once per control step,
a goal = the current TCP pose + the scaled delta (position: always; orientation: only when
the rotation delta is non-zero, else the previous orientation goal is kept), and a
task-space spring-damper tracks that goal at the simulation rate until the next action.
The arm therefore covers about a quarter of each step's goal offset per step and coasts a
few millimetres after the last action. Demonstrations and checkpoints assume exactly that.

This module is that response without the Panda's dynamics: a unit-mass second-order
reference per axis (stiffness ``kp``, damping ratio ``zeta``; position and rotation each
their own), integrated exactly over each servo period, so the response does not depend on
the servo rate. The driver turns each reference pose into joints by IK and streams it under
its limits. The default gains are fitted to robosuite's measured response
(``tests/data/robosuite_osc_response.json``, refit with ``tools/fit_osc_response.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.linalg import expm

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
