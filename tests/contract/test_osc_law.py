"""The OSC law (libero_workcell.osc_law) is robosuite's, written with inverses instead of pseudo-inverses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libero_workcell.osc_law import OscConfig, nullspace_torque, orientation_error, osc_torque


def random_arm(seed: int) -> tuple[np.ndarray, np.ndarray, np.random.Generator]:
    """A random 7-joint arm's mass matrix (symmetric positive definite) and 6 x 7 task Jacobian."""
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(7, 7))
    return a @ a.T + 0.1 * np.eye(7), rng.normal(size=(6, 7)), rng


def robosuite_form(cfg: OscConfig, M, J, qd, pos_error, rot_error, q_error) -> np.ndarray:
    """robosuite 1.4's OSC.run_controller and opspace_matrices / nullspace_torques, term by term (pinv)."""
    kd = 2.0 * np.sqrt(cfg.kp) * cfg.damping_ratio
    force = cfg.kp * pos_error - kd * (J[:3] @ qd)
    torque = cfg.kp * rot_error - kd * (J[3:] @ qd)
    M_inv = np.linalg.inv(M)
    lambda_full = np.linalg.pinv(J @ M_inv @ J.T)
    lambda_pos = np.linalg.pinv(J[:3] @ M_inv @ J[:3].T)
    lambda_ori = np.linalg.pinv(J[3:] @ M_inv @ J[3:].T)
    nullspace_matrix = np.eye(len(qd)) - M_inv @ J.T @ lambda_full @ J
    pose = M @ (cfg.nullspace_kp * q_error - 2.0 * np.sqrt(cfg.nullspace_kp) * qd)
    return J.T @ np.concatenate([lambda_pos @ force, lambda_ori @ torque]) + nullspace_matrix.T @ pose


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_law_is_robosuites_pinv_form_on_random_arms(seed: int) -> None:
    M, J, rng = random_arm(seed)
    qd, q_error = rng.normal(size=7), rng.normal(size=7) * 0.1
    pos_error, rot_error = rng.normal(size=3) * 0.05, rng.normal(size=3) * 0.2
    cfg = OscConfig()
    ours = osc_torque(cfg, M, J, qd, pos_error, rot_error, q_error)
    theirs = robosuite_form(cfg, M, J, qd, pos_error, rot_error, q_error)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-6 * np.abs(theirs).max())


def test_a_singular_task_raises() -> None:
    """A Jacobian that lost rank (a singularity): the caller's fault path, never a silent huge torque."""
    J = np.zeros((6, 7))
    J[:, :5] = np.eye(6)[:, :5]
    with pytest.raises(np.linalg.LinAlgError):
        osc_torque(OscConfig(), np.eye(7), J, np.zeros(7), np.ones(3), np.ones(3), np.zeros(7))


def test_orientation_error_matches_the_column_sum() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        A, B = (np.linalg.qr(rng.normal(size=(3, 3)))[0] for _ in range(2))
        expected = 0.5 * sum(np.cross(B[:, i], A[:, i]) for i in range(3))
        np.testing.assert_allclose(orientation_error(A, B), expected, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_the_posture_torque_never_moves_the_tcp(seed: int) -> None:
    """robosuite's null space is dynamically consistent: the posture torque, projected, gives the TCP no
    acceleration (J M^-1 tau = 0). Its transpose would (and made our Panda drift 7-9 mm off robosuite's
    after a rotation)."""
    M, J, rng = random_arm(seed)
    M_inv = np.linalg.inv(M)
    lam = np.linalg.inv(J @ M_inv @ J.T)
    tau = rng.normal(size=7)
    projected = nullspace_torque(M_inv, J, lam, tau)
    np.testing.assert_allclose(J @ M_inv @ projected, 0.0, atol=1e-8 * (1 + np.abs(J @ M_inv @ tau).max()))
    assert np.linalg.norm(projected) > 1e-6  # a seventh joint: something is left to move the posture


def test_orientation_error_is_robosuites() -> None:
    R = np.eye(3)
    Rz = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # 90 deg about z
    np.testing.assert_allclose(orientation_error(Rz, R), [0.0, 0.0, 1.0], atol=1e-12)  # sin(90 deg) about z
    np.testing.assert_allclose(orientation_error(R, R), np.zeros(3), atol=1e-12)
