"""robosuite 1.4's ``OSC_POSE`` control law (LIBERO's controller), on any arm's M, J and joint state.

One home for the law, shared by the Panda replica (``sim_bridge.panda.osc``) and the action response
the driver streams (:class:`libero_workcell.action_response.PandaResponse`). Per physics step:

    F   = Lambda_pos (kp (p_goal - p) - kd v)          (kd = 2 sqrt(kp) damping_ratio)
    Tau = Lambda_ori (kp e_ori - kd w)                 (e_ori = 1/2 sum_i r_i x r_goal_i)
    tau = J^T [F; Tau] + N^T M (kp_n (q0 - q) - 2 sqrt(kp_n) qd)   (+ the bias forces, by the caller)

with Lambda_pos/ori = (J_pos/ori M^-1 J_pos/ori^T)^-1 (``uncouple_pos_ori``: position and orientation
decoupled), N = I - Jbar J the dynamically consistent null space of the full task Jacobian
(Jbar = M^-1 J^T Lambda), kp_n pulling the posture toward the start joints. robosuite writes the
inverses as pseudo-inverses; away from a singularity they are the same matrices (a property test
holds the two forms together), and inverses cost a fraction of the SVDs. The law is a kernel
(:mod:`libero_workcell.kernels`): it runs compiled, at the physics rate.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from libero_workcell.kernels import compile_kernels, kernel, warmer


@dataclass(frozen=True)
class OscConfig:
    """robosuite's defaults for OSC_POSE (controllers/config/osc_pose.json)."""

    kp: float = 150.0
    damping_ratio: float = 1.0
    nullspace_kp: float = 10.0


@kernel
def orientation_error(desired: np.ndarray, current: np.ndarray) -> np.ndarray:
    """robosuite's rotation error: half the sum of the cross products of the frames' columns,
    ``1/2 sum_i c_i x d_i``, which is half the axial vector of ``D C^T - C D^T`` (no per-column products)."""
    a = desired @ current.T
    return 0.5 * np.array([a[2, 1] - a[1, 2], a[0, 2] - a[2, 0], a[1, 0] - a[0, 1]])


@kernel
def posture_torque(M: np.ndarray, kp: float, q_error: np.ndarray, qd: np.ndarray) -> np.ndarray:
    """The posture controller's joint torque toward the start joints (critically damped, robosuite's)."""
    return M @ (kp * q_error - 2.0 * np.sqrt(kp) * qd)


@kernel
def nullspace_torque(M_inv: np.ndarray, J: np.ndarray, lam_full: np.ndarray, torque: np.ndarray) -> np.ndarray:
    """``torque`` projected into the task's dynamically consistent null space: ``(I - J^T Jbar^T) torque`` with
    ``Jbar = M^-1 J^T Lambda`` (robosuite's ``nullspace_matrix.T``). It gives the TCP no acceleration
    (``J M^-1`` of it is zero), so the posture never moves the TCP; the transpose, ``(I - Jbar J)``, would."""
    j_bar = M_inv @ J.T @ lam_full
    return torque - J.T @ (j_bar.T @ torque)


@kernel
def _torque(kp: float, damping_ratio: float, nullspace_kp: float, M: np.ndarray, J: np.ndarray, qd: np.ndarray,
            pos_error: np.ndarray, rot_error: np.ndarray, q_error: np.ndarray) -> np.ndarray:  # fmt: skip
    M_inv = np.linalg.inv(M)
    kd = 2.0 * np.sqrt(kp) * damping_ratio
    twist = J @ qd
    force = kp * pos_error - kd * twist[:3]
    torque = kp * rot_error - kd * twist[3:]
    task_inv = J @ M_inv @ J.T  # its diagonal blocks are the position and the orientation task's alone
    wrench = np.empty(6)
    wrench[:3] = np.linalg.solve(np.ascontiguousarray(task_inv[:3, :3]), force)
    wrench[3:] = np.linalg.solve(np.ascontiguousarray(task_inv[3:, 3:]), torque)
    lam_full = np.linalg.inv(task_inv)
    posture = posture_torque(M, nullspace_kp, q_error, qd)
    return J.T @ wrench + nullspace_torque(M_inv, J, lam_full, posture)


def osc_torque(
    cfg: OscConfig, M: np.ndarray, J: np.ndarray, qd: np.ndarray, pos_error: np.ndarray, rot_error: np.ndarray,
    q_error: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """The joint torque of one physics step, bias forces excluded.

    ``J`` (6 x n) is the TCP's Jacobian (position rows, then rotation rows), ``pos_error`` the goal minus
    the TCP position, ``rot_error`` :func:`orientation_error` (goal, TCP), ``q_error`` the start joints
    minus the joints. Raises ``numpy.linalg.LinAlgError`` at a singular task (a caller's fault path).
    """
    compile_kernels()
    return _torque(cfg.kp, cfg.damping_ratio, cfg.nullspace_kp, *_arrays(M, J, qd, pos_error, rot_error, q_error))


def osc_control(kp: float, damping_ratio: float, nullspace_kp: float, M: np.ndarray, J: np.ndarray,
                qd: np.ndarray, pos_error: np.ndarray, goal_R: np.ndarray, R: np.ndarray, q_error: np.ndarray,
                bias: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:  # fmt: skip
    """One physics step's actuator command: the law's torque toward the goal (``goal_R``, the TCP at ``R``) plus
    the bias forces, clipped to the actuators' range ``[low, high]``: the whole step in one call (the servo path
    runs it at the physics rate, where each call's overhead is the cost). The arrays are float64 and contiguous.

    ``M`` and ``J`` are made C-ordered here: a caller that builds them by fancy indexing (the Panda's columns) gets
    Fortran order, and a kernel given another layout compiles again, for seconds, in the first process that meets it.
    """
    compile_kernels()
    M, J = _arrays(M, J)
    return _control(kp, damping_ratio, nullspace_kp, M, J, qd, pos_error, goal_R, R, q_error, bias, low, high)


@kernel
def _control(kp: float, damping_ratio: float, nullspace_kp: float, M: np.ndarray, J: np.ndarray,
             qd: np.ndarray, pos_error: np.ndarray, goal_R: np.ndarray, R: np.ndarray, q_error: np.ndarray,
             bias: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:  # fmt: skip
    tau = _torque(kp, damping_ratio, nullspace_kp, M, J, qd, pos_error, orientation_error(goal_R, R), q_error)
    return np.minimum(np.maximum(tau + bias, low), high)


def _arrays(*arrays: np.ndarray) -> list[np.ndarray]:
    return [np.ascontiguousarray(a, dtype=np.float64) for a in arrays]


@warmer
def _warm() -> None:
    eye, zeros = np.eye(7), np.zeros(7)
    osc_control(1.0, 1.0, 1.0, eye, np.eye(6, 7), zeros, np.zeros(3), np.eye(3), np.eye(3), zeros, zeros, -eye[0],
                eye[0])  # fmt: skip
