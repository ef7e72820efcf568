"""The OSC law (libero_workcell.osc_law) is robosuite's, written with inverses instead of pseudo-inverses."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libero_workcell.osc_law import OscConfig, orientation_error, osc_torque


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
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(7, 7))
    M = a @ a.T + 0.1 * np.eye(7)
    J = rng.normal(size=(6, 7))
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
