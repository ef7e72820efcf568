"""AUBO-i5H kinematics: FK agrees with the URDF chain (compiled by MuJoCo), IK round-trips."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from aubo_bridge.model.description import JOINT_LIMITS
from aubo_bridge.model.kinematics import HOME_Q, fk, ik, jacobian, urdf_string
from libero_workcell.layout import HOME_TCP_POS, HOME_TCP_ROTMAT

RNG = np.random.default_rng(7)


_URDF_MODEL = mujoco.MjModel.from_xml_string(urdf_string())


def _mujoco_tcp(q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """TCP pose from MuJoCo's own URDF compiler: an implementation independent of ours."""
    data = mujoco.MjData(_URDF_MODEL)
    data.qpos[:] = q
    mujoco.mj_kinematics(_URDF_MODEL, data)
    body = _URDF_MODEL.body("tcp").id
    return data.xpos[body].copy(), data.xmat[body].reshape(3, 3).copy()


@pytest.mark.parametrize("trial", range(20))
def test_fk_matches_urdf_compiled_by_mujoco(trial: int) -> None:
    q = np.zeros(6) if trial == 0 else RNG.uniform(-np.pi, np.pi, 6)
    p_ours, R_ours = fk(q)
    p_mj, R_mj = _mujoco_tcp(q)
    np.testing.assert_allclose(p_ours, p_mj, atol=1e-9)
    np.testing.assert_allclose(R_ours, R_mj, atol=1e-9)


def test_fk_zero_configuration_by_hand() -> None:
    # At q = 0 the i5H stands straight up: the vertical links add up along z
    # (0.122 + 0.408 + 0.376 + 0.1025); the shoulder (0.1215) and wrist3
    # (0.094) offsets and the 0.17 m tool all point along -y.
    p, R = fk(np.zeros(6))
    np.testing.assert_allclose(p[2], 0.122 + 0.408 + 0.376 + 0.1025, atol=1e-12)
    np.testing.assert_allclose(p[0], 0.0, atol=1e-12)
    np.testing.assert_allclose(p[1], -(0.1215 + 0.094 + 0.17), atol=1e-12)
    np.testing.assert_allclose(R[:, 2], [0.0, -1.0, 0.0], atol=1e-12)


def test_jacobian_matches_finite_differences() -> None:
    q = RNG.uniform(-2, 2, 6)
    J = jacobian(q)
    eps = 1e-7
    p0, R0 = fk(q)
    for i in range(6):
        dq = np.zeros(6)
        dq[i] = eps
        p1, R1 = fk(q + dq)
        np.testing.assert_allclose((p1 - p0) / eps, J[:3, i], atol=1e-5)
        np.testing.assert_allclose(Rotation.from_matrix(R1 @ R0.T).as_rotvec() / eps, J[3:, i], atol=1e-5)


@pytest.mark.parametrize("trial", range(30))
def test_ik_round_trip_from_nearby_seed(trial: int) -> None:
    q_true = RNG.uniform(JOINT_LIMITS[:, 0] / 2, JOINT_LIMITS[:, 1] / 2)
    p, R = fk(q_true)
    seed = q_true + RNG.normal(0, 0.15, 6)
    res = ik(p, R, seed)
    if np.linalg.cond(jacobian(q_true)) > 1e4:
        pytest.skip("configuration too close to a singularity for a meaningful round trip")
    assert res.converged, res
    p2, R2 = fk(res.q)
    np.testing.assert_allclose(p2, p, atol=1e-6)
    np.testing.assert_allclose(R2, R, atol=1e-6)


def test_ik_reports_unreachable_pose() -> None:
    res = ik(np.array([2.0, 0.0, 0.5]), np.eye(3), HOME_Q)
    assert not res.converged
    assert res.pos_error > 0.5


def test_home_q_puts_tcp_at_home_pointing_down() -> None:
    p, R = fk(HOME_Q)
    np.testing.assert_allclose(p, HOME_TCP_POS, atol=1e-8)
    np.testing.assert_allclose(R, HOME_TCP_ROTMAT, atol=1e-8)
    assert R[2, 2] == pytest.approx(-1.0)  # tool z points down


def test_rotation_error_matches_scipy_everywhere_including_near_pi() -> None:
    from aubo_bridge.model.kinematics import rotation_error

    rng = np.random.default_rng(3)
    cases = [
        (Rotation.random(random_state=rng).as_matrix(), Rotation.random(random_state=rng).as_matrix())
        for _ in range(500)
    ]
    near_pi = Rotation.from_rotvec([0.0, np.pi - 1e-4, 0.0]).as_matrix()
    cases += [(near_pi, np.eye(3)), (np.eye(3), np.eye(3)), (Rotation.from_rotvec([1e-9, 0, 0]).as_matrix(), np.eye(3))]
    for R_t, R_c in cases:
        np.testing.assert_allclose(rotation_error(R_t, R_c), Rotation.from_matrix(R_t @ R_c.T).as_rotvec(), atol=1e-7)


@pytest.mark.parametrize("angle", [0.0, 1e-12, 1e-7, 1e-6, 1e-3, 0.5, 2.0, np.pi - 1e-6])
def test_rotvec_matrix_matches_scipy_at_every_scale(angle: float) -> None:
    """The servo path's closed form (Rodrigues, series near zero) against scipy, on both sides of the
    series' switch-over and up to pi."""
    from libero_workcell.rotations import rotvec_matrix

    rng = np.random.default_rng(int(angle * 1e6) % 2**32)
    for _ in range(200):
        axis = rng.normal(size=3)
        v = axis / np.linalg.norm(axis) * angle
        np.testing.assert_allclose(rotvec_matrix(v), Rotation.from_rotvec(v).as_matrix(), rtol=0, atol=1e-14)
