"""AUBO-i5H forward and inverse kinematics from the URDF joint table.

Forward kinematics is the product of the URDF joint transforms in
:mod:`aubo_bridge.description` followed by the tool offset; inverse
kinematics is damped least squares on the geometric Jacobian, seeded from
the current joints so successive servo targets stay on one branch (no
elbow or wrist flips between control steps). Pure numpy: no ROS, no MuJoCo.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.spatial.transform import Rotation
from transforms3d.euler import euler2mat

from aubo_bridge.description import JOINT_LIMITS, JOINT_ORIGINS, TOOL_OFFSET


def _origin(xyz: tuple[float, float, float], rpy: tuple[float, float, float]) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = euler2mat(*rpy, axes="sxyz")  # URDF: fixed-axis roll, pitch, yaw
    T[:3, 3] = xyz
    return T


_ORIGINS: Final = tuple(_origin(j.xyz, j.rpy) for j in JOINT_ORIGINS)


def _rot_z(angle: float) -> np.ndarray:
    c, s = np.cos(angle), np.sin(angle)
    T = np.eye(4)
    T[0, 0], T[0, 1], T[1, 0], T[1, 1] = c, -s, s, c
    return T


def joint_frames(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> list[np.ndarray]:
    """World transforms of each joint frame (after its rotation) and, last, the TCP."""
    T = np.eye(4)
    frames = []
    for origin, angle in zip(_ORIGINS, q, strict=True):
        T = T @ origin @ _rot_z(angle)
        frames.append(T)
    tcp = T.copy()
    tcp[:3, 3] = T[:3, :3] @ tool_offset + T[:3, 3]
    frames.append(tcp)
    return frames


def fk(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> tuple[np.ndarray, np.ndarray]:
    """TCP (position m, rotation matrix) in the base frame for joints ``q`` (rad)."""
    T = joint_frames(np.asarray(q, float), tool_offset)[-1]
    return T[:3, 3].copy(), T[:3, :3].copy()


def jacobian(q: np.ndarray, tool_offset: np.ndarray = TOOL_OFFSET) -> np.ndarray:
    """Geometric Jacobian (6x6): rows = TCP linear velocity, angular velocity (base frame)."""
    frames = joint_frames(np.asarray(q, float), tool_offset)
    p_tcp = frames[-1][:3, 3]
    J = np.zeros((6, 6))
    for i, T in enumerate(frames[:-1]):
        z = T[:3, 2]
        J[:3, i] = np.cross(z, p_tcp - T[:3, 3])
        J[3:, i] = z
    return J


def rotation_error(R_target: np.ndarray, R_current: np.ndarray) -> np.ndarray:
    """Rotation vector (rad, base frame) that takes R_current to R_target: Log(R_t R_c^T)."""
    return Rotation.from_matrix(R_target @ R_current.T).as_rotvec()


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
        p, R = fk(q, tool_offset)
        err = np.concatenate([target_p - p, rotation_error(target_R, R)])
        pe, re = float(np.linalg.norm(err[:3])), float(np.linalg.norm(err[3:]))
        if pe <= pos_tol and re <= rot_tol:
            return IkResult(q, True, pe, re, it - 1)
        J = jacobian(q, tool_offset)
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
# straight down (layout.HOME_TCP_ROTMAT); tests/test_kinematics.py checks it.
HOME_Q: Final = np.array([0.492702059, 0.3548380589, 1.7669445318, -0.1586898539, 1.5707963268, 2.0634983858])
