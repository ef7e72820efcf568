"""AUBO-i5H forward and inverse kinematics from the URDF joint table.

Forward kinematics is the product of the URDF joint transforms in
:mod:`aubo_bridge.model.description` followed by the tool offset; inverse
kinematics is damped least squares on the geometric Jacobian, seeded from
the current joints so successive servo targets stay on one branch (no
elbow or wrist flips between control steps). No ROS, no MuJoCo. The chain and the IK iterations are kernels
(:mod:`libero_workcell.kernels`): the servo path runs them compiled, several times per tick; IK always runs
compiled, the chain (scalar arithmetic: the same bits either way) as Python in a process that never needed IK.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

import numpy as np
from transforms3d.euler import euler2mat

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_ORIGINS, TOOL_OFFSET
from libero_workcell import rotations
from libero_workcell.kernels import compile_kernels, kernel, warmer
from libero_workcell.rotations import rotation_error as rotation_error  # the driver's and the responses' (Python)

# URDF joint origins as (rotation, translation); URDF rpy is fixed-axis roll, pitch, yaw.
_ORIGIN_R: Final = np.array([euler2mat(*j.rpy, axes="sxyz") for j in JOINT_ORIGINS], dtype=float)
_ORIGIN_P: Final = np.array([j.xyz for j in JOINT_ORIGINS], dtype=float)


@kernel
def _chain(q: np.ndarray, origin_R: np.ndarray, origin_p: np.ndarray,
           tool_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """(joint axes z_i (6x3), joint origins p_i (6x3), TCP position, TCP rotation) in the base frame.

    R_i = R_{i-1} R_origin_i Rz(q_i) and p_i = p_{i-1} + R_{i-1} p_origin_i, written out on floats (Rz only
    mixes the first two columns).
    """
    r00, r01, r02, r10, r11, r12, r20, r21, r22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    px = py = pz = 0.0
    n = origin_R.shape[0]
    axes = np.empty((n, 3))
    origins = np.empty((n, 3))
    for i in range(n):
        a, (ox, oy, oz) = origin_R[i], origin_p[i]
        px, py, pz = (
            px + r00 * ox + r01 * oy + r02 * oz,
            py + r10 * ox + r11 * oy + r12 * oz,
            pz + r20 * ox + r21 * oy + r22 * oz,
        )
        m00 = r00 * a[0, 0] + r01 * a[1, 0] + r02 * a[2, 0]
        m01 = r00 * a[0, 1] + r01 * a[1, 1] + r02 * a[2, 1]
        m02 = r00 * a[0, 2] + r01 * a[1, 2] + r02 * a[2, 2]
        m10 = r10 * a[0, 0] + r11 * a[1, 0] + r12 * a[2, 0]
        m11 = r10 * a[0, 1] + r11 * a[1, 1] + r12 * a[2, 1]
        m12 = r10 * a[0, 2] + r11 * a[1, 2] + r12 * a[2, 2]
        m20 = r20 * a[0, 0] + r21 * a[1, 0] + r22 * a[2, 0]
        m21 = r20 * a[0, 1] + r21 * a[1, 1] + r22 * a[2, 1]
        m22 = r20 * a[0, 2] + r21 * a[1, 2] + r22 * a[2, 2]
        c, s = math.cos(q[i]), math.sin(q[i])
        r00, r01, r02 = m00 * c + m01 * s, m01 * c - m00 * s, m02
        r10, r11, r12 = m10 * c + m11 * s, m11 * c - m10 * s, m12
        r20, r21, r22 = m20 * c + m21 * s, m21 * c - m20 * s, m22
        axes[i, 0], axes[i, 1], axes[i, 2] = r02, r12, r22
        origins[i, 0], origins[i, 1], origins[i, 2] = px, py, pz
    tx, ty, tz = tool_offset[0], tool_offset[1], tool_offset[2]
    tcp = np.array([
        px + r00 * tx + r01 * ty + r02 * tz,
        py + r10 * tx + r11 * ty + r12 * tz,
        pz + r20 * tx + r21 * ty + r22 * tz,
    ])  # fmt: skip
    R = np.array([[r00, r01, r02], [r10, r11, r12], [r20, r21, r22]])
    return axes, origins, tcp, R


@kernel
def _fk_jacobian(q: np.ndarray, origin_R: np.ndarray, origin_p: np.ndarray,
                 tool_offset: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    axes, origins, p, R = _chain(q, origin_R, origin_p, tool_offset)
    J = np.empty((6, axes.shape[0]))
    for i in range(axes.shape[0]):  # z_i x (p - p_i)
        dx, dy, dz = p[0] - origins[i, 0], p[1] - origins[i, 1], p[2] - origins[i, 2]
        J[0, i] = axes[i, 1] * dz - axes[i, 2] * dy
        J[1, i] = axes[i, 2] * dx - axes[i, 0] * dz
        J[2, i] = axes[i, 0] * dy - axes[i, 1] * dx
        J[3, i], J[4, i], J[5, i] = axes[i, 0], axes[i, 1], axes[i, 2]
    return p, R, J


def _vector(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float64)


def fk(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> tuple[np.ndarray, np.ndarray]:
    """TCP (position m, rotation matrix) in the base frame for joints ``q`` (rad)."""
    _, _, p, R = _chain(_vector(q), _ORIGIN_R, _ORIGIN_P, _vector(tool_offset))
    return p, R


def fk_jacobian(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(TCP position, TCP rotation, geometric Jacobian 6x6) in one pass over the chain."""
    return _fk_jacobian(_vector(q), _ORIGIN_R, _ORIGIN_P, _vector(tool_offset))


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
    compile_kernels()
    q, converged, pe, re, iterations = _ik(_vector(q_seed), _vector(pos), _vector(rotmat), _ORIGIN_R, _ORIGIN_P,
                                           _vector(tool_offset), _vector(joint_limits), int(max_iterations),
                                           float(pos_tol), float(rot_tol), float(damping), float(max_step))  # fmt: skip
    return IkResult(q, bool(converged), float(pe), float(re), int(iterations))


@kernel
def _ik(q_seed: np.ndarray, target_p: np.ndarray, target_R: np.ndarray, origin_R: np.ndarray, origin_p: np.ndarray,
        tool_offset: np.ndarray, joint_limits: np.ndarray, max_iterations: int, pos_tol: float, rot_tol: float,
        damping: float, max_step: float) -> tuple[np.ndarray, bool, float, float, int]:  # fmt: skip
    q = q_seed.copy()
    damped = damping**2 * np.eye(6)
    err = np.empty(6)
    for it in range(1, max_iterations + 1):
        p, R, J = _fk_jacobian(q, origin_R, origin_p, tool_offset)
        err[:3] = target_p - p
        err[3:] = rotations.rotation_error(target_R, R)
        pe, re = np.linalg.norm(err[:3]), np.linalg.norm(err[3:])
        if pe <= pos_tol and re <= rot_tol:
            return q, True, pe, re, it - 1
        dq = J.T @ np.linalg.solve(J @ J.T + damped, err)
        biggest = np.max(np.abs(dq))
        if biggest > max_step:
            dq *= max_step / biggest
        q = np.minimum(np.maximum(q + dq, joint_limits[:, 0]), joint_limits[:, 1])
    _, _, p, R = _chain(q, origin_R, origin_p, tool_offset)
    pe = np.linalg.norm(target_p - p)
    re = np.linalg.norm(rotations.rotation_error(target_R, R))
    return q, pe <= pos_tol * 10 and re <= rot_tol * 10, pe, re, max_iterations


@warmer
def _warm() -> None:
    p, R = fk(HOME_Q)
    ik(p, R, HOME_Q)


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
