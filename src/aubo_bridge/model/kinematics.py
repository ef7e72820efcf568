"""AUBO-i5H forward and inverse kinematics from the URDF joint table.

Forward kinematics is the product of the URDF joint transforms in
:mod:`aubo_bridge.model.description` followed by the tool offset; inverse
kinematics is damped least squares on the geometric Jacobian, seeded from
the current joints so successive servo targets stay on one branch (no
elbow or wrist flips between control steps). Pure numpy: no ROS, no MuJoCo.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from transforms3d.euler import euler2mat

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_ORIGINS, TOOL_OFFSET
from libero_workcell.rotations import rotation_error

# URDF joint origins as (rotation, translation); URDF rpy is fixed-axis roll, pitch, yaw. Kept as plain floats:
# the chain below runs in the servo path several times per tick, where numpy's per-call cost on 3-vectors
# dominates the arithmetic (bench.sim_time measures the tick).
_ORIGIN_R: Final = tuple(tuple(tuple(float(x) for x in row) for row in euler2mat(*j.rpy, axes="sxyz"))
                         for j in JOINT_ORIGINS)  # fmt: skip
_ORIGIN_P: Final = tuple(tuple(float(x) for x in j.xyz) for j in JOINT_ORIGINS)


def _chain(q: np.ndarray, tool_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(joint axes z_i (6x3), joint origins p_i (6x3), TCP position, TCP rotation) in the base frame.

    R_i = R_{i-1} R_origin_i Rz(q_i) and p_i = p_{i-1} + R_{i-1} p_origin_i, written out on floats (Rz only
    mixes the first two columns).
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    px = py = pz = 0.0
    axes: list[tuple[float, float, float]] = []
    origins: list[tuple[float, float, float]] = []
    for ((a00, a01, a02), (a10, a11, a12), (a20, a21, a22)), (ox, oy, oz), angle in zip(
        _ORIGIN_R, _ORIGIN_P, np.asarray(q, float).tolist(), strict=True
    ):
        px, py, pz = (
            px + r00 * ox + r01 * oy + r02 * oz,
            py + r10 * ox + r11 * oy + r12 * oz,
            pz + r20 * ox + r21 * oy + r22 * oz,
        )
        m00, m01, m02 = (
            r00 * a00 + r01 * a10 + r02 * a20,
            r00 * a01 + r01 * a11 + r02 * a21,
            r00 * a02 + r01 * a12 + r02 * a22,
        )
        m10, m11, m12 = (
            r10 * a00 + r11 * a10 + r12 * a20,
            r10 * a01 + r11 * a11 + r12 * a21,
            r10 * a02 + r11 * a12 + r12 * a22,
        )
        m20, m21, m22 = (
            r20 * a00 + r21 * a10 + r22 * a20,
            r20 * a01 + r21 * a11 + r22 * a21,
            r20 * a02 + r21 * a12 + r22 * a22,
        )
        c, s = math.cos(angle), math.sin(angle)
        r00, r01, r02 = m00 * c + m01 * s, m01 * c - m00 * s, m02
        r10, r11, r12 = m10 * c + m11 * s, m11 * c - m10 * s, m12
        r20, r21, r22 = m20 * c + m21 * s, m21 * c - m20 * s, m22
        axes.append((r02, r12, r22))
        origins.append((px, py, pz))
    tx, ty, tz = np.asarray(tool_offset, float).tolist()
    tcp = (
        px + r00 * tx + r01 * ty + r02 * tz,
        py + r10 * tx + r11 * ty + r12 * tz,
        pz + r20 * tx + r21 * ty + r22 * tz,
    )
    R = np.array(((r00, r01, r02), (r10, r11, r12), (r20, r21, r22)))
    return np.array(axes), np.array(origins), np.array(tcp), R


def fk(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> tuple[np.ndarray, np.ndarray]:
    """TCP (position m, rotation matrix) in the base frame for joints ``q`` (rad)."""
    _, _, p, R = _chain(q, tool_offset)
    return p, R


def fk_jacobian(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TCP position, TCP rotation, geometric Jacobian 6x6) in one pass over the chain."""
    axes, origins, p, R = _chain(q, tool_offset)
    d = p - origins  # z_i x (p - p_i), the rows written out (np.cross costs more than the products)
    J = np.empty((6, 6))
    J[0] = axes[:, 1] * d[:, 2] - axes[:, 2] * d[:, 1]
    J[1] = axes[:, 2] * d[:, 0] - axes[:, 0] * d[:, 2]
    J[2] = axes[:, 0] * d[:, 1] - axes[:, 1] * d[:, 0]
    J[3:] = axes.T
    return p, R, J


def jacobian(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> np.ndarray:
    """Geometric Jacobian (6x6): rows = TCP linear velocity, angular velocity (base frame)."""
    return fk_jacobian(q, tool_offset)[2]


@dataclass(frozen=True)
class IkResult:
    q: np.ndarray
    converged: bool
    pos_error: float  # m
    rot_error: float  # rad
    iterations: int


def ik(
    pos: np.ndarray,
    rotmat: np.ndarray,
    q_seed: np.ndarray,
    tool_offset: np.ndarray = TOOL_OFFSET,
    max_iterations: int = 100,
    pos_tol: float = 1e-6,
    rot_tol: float = 1e-6,
    damping: float = 1e-3,
    max_step: float = 0.3,
    joint_limits: np.ndarray = JOINT_LIMITS,
) -> IkResult:
    """Joints that put the TCP at (pos, rotmat), nearest the seed's branch.

    Damped least squares with a per-iteration joint step bound; joints are
    clamped to ``joint_limits``. ``converged`` is False when the pose is out
    of reach or would need a joint past its limit: the caller must not send
    such a result to the arm.
    """
    q = np.array(q_seed, dtype=float)
    target_p = np.asarray(pos, float)
    target_R = np.asarray(rotmat, float)
    lam2 = damping**2
    for it in range(1, max_iterations + 1):
        p, R, J = fk_jacobian(q, tool_offset)
        err = np.concatenate([target_p - p, rotation_error(target_R, R)])
        pe, re = float(np.linalg.norm(err[:3])), float(np.linalg.norm(err[3:]))
        if pe <= pos_tol and re <= rot_tol:
            return IkResult(q, True, pe, re, it - 1)
        dq = J.T @ np.linalg.solve(J @ J.T + lam2 * np.eye(6), err)
        biggest = float(np.max(np.abs(dq)))
        if biggest > max_step:
            dq *= max_step / biggest
        q = np.clip(q + dq, joint_limits[:, 0], joint_limits[:, 1])
    p, R = fk(q, tool_offset)
    pe = float(np.linalg.norm(target_p - p))
    re = float(np.linalg.norm(rotation_error(target_R, R)))
    return IkResult(q, pe <= pos_tol * 10 and re <= rot_tol * 10, pe, re, max_iterations)


def urdf_string(tool_offset: np.ndarray = TOOL_OFFSET) -> str:
    """The arm as a minimal URDF built from the joint table (for independent checks, e.g. MuJoCo's URDF compiler)."""
    names = ["base_link"] + [f"link{i + 1}" for i in range(len(JOINT_ORIGINS))] + ["tcp"]
    links = "".join(
        f'<link name="{n}"><inertial><mass value="1"/>'
        '<inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial></link>'
        for n in names
    )
    joints = []
    for i, j in enumerate(JOINT_ORIGINS):
        joints.append(
            f'<joint name="{j.name}" type="revolute"><parent link="{names[i]}"/><child link="{names[i + 1]}"/>'
            f'<origin xyz="{" ".join(map(repr, j.xyz))}" rpy="{" ".join(map(repr, j.rpy))}"/><axis xyz="0 0 1"/>'
            f'<limit lower="{float(JOINT_LIMITS[i, 0])!r}" upper="{float(JOINT_LIMITS[i, 1])!r}"'
            ' effort="100" velocity="3"/></joint>'
        )
    joints.append(
        f'<joint name="tcp_joint" type="fixed"><parent link="{names[-2]}"/><child link="tcp"/>'
        f'<origin xyz="{" ".join(map(repr, map(float, tool_offset)))}" rpy="0 0 0"/></joint>'
    )
    # The <mujoco> extension keeps the fixed tcp link as a body when MuJoCo compiles this URDF.
    mujoco_ext = '<mujoco><compiler fusestatic="false" discardvisual="true"/></mujoco>'
    return f'<robot name="aubo_i5H">{mujoco_ext}{links}{"".join(joints)}</robot>'


# Elbow-up joint configuration whose TCP is at layout.HOME_TCP_POS pointing
# straight down (layout.HOME_TCP_ROTMAT); tests/arm/test_kinematics.py checks it.
HOME_Q: Final = np.array([0.492702059, 0.3548380589, 1.7669445318, -0.1586898539, 1.5707963268, 2.0634983858])
