"""Rotation helpers every layer shares (the driver's IK and response model, the tracking law).

Closed forms on 3x3 matrices: these run in the servo path several times per tick, where building a scipy
``Rotation`` costs more than the arithmetic. :func:`rotation_error` is a kernel
(:mod:`libero_workcell.kernels`): the IK kernel (:mod:`aubo_bridge.model.kinematics`) calls it compiled at every
iteration.
"""

from __future__ import annotations

import math

import numpy as np

from libero_workcell.kernels import kernel


@kernel
def rotation_error(R_target: np.ndarray, R_current: np.ndarray) -> np.ndarray:
    """Rotation vector (rad, base frame) that takes R_current to R_target: Log(R_t R_c^T).

    The closed form is used where it is well conditioned (what IK sees every
    iteration); within 0.01 rad of pi, the quaternion of the matrix (:func:`matrix_rotvec`) takes over.
    """
    E = R_target @ R_current.T
    cos = min(1.0, max(-1.0, (E[0, 0] + E[1, 1] + E[2, 2] - 1.0) / 2.0))
    angle = math.acos(cos)
    v = np.array([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])
    if angle < 1e-8:
        return 0.5 * v
    if angle > np.pi - 1e-2:
        return matrix_rotvec(E)
    return (angle / (2.0 * math.sin(angle))) * v


@kernel
def matrix_rotvec(E: np.ndarray) -> np.ndarray:
    """The rotation vector of the rotation matrix ``E``, well conditioned at any angle (scipy's
    ``Rotation.from_matrix(E).as_rotvec()``: the quaternion from the largest of the trace and the diagonal,
    then its angle and axis)."""
    trace = E[0, 0] + E[1, 1] + E[2, 2]
    q = np.empty(4)
    i = 0
    for k in range(1, 3):
        if E[k, k] > E[i, i]:
            i = k
    if trace >= E[i, i]:
        q[0], q[1], q[2], q[3] = E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1], 1.0 + trace
    else:
        j, k = (i + 1) % 3, (i + 2) % 3
        q[i] = 1.0 - trace + 2.0 * E[i, i]
        q[j] = E[j, i] + E[i, j]
        q[k] = E[k, i] + E[i, k]
        q[3] = E[k, j] - E[j, k]
    q /= math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3])
    if q[3] < 0.0:
        q = -q
    s = math.sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2])
    angle = 2.0 * math.atan2(s, q[3])
    # angle / sin(angle / 2), from its series near 0
    scale = 2.0 + angle * angle / 12.0 + 7.0 * angle**4 / 2880.0 if angle <= 1e-3 else angle / math.sin(angle / 2.0)
    return scale * q[:3]


def rotvec_matrix(v: np.ndarray) -> np.ndarray:
    """Rotation matrix of the rotation vector ``v`` (Rodrigues: I + a K + b K^2, K the cross matrix of ``v``),
    with a = sin(t)/t and b = (1 - cos t)/t^2 from their series below 1e-6 rad (no 0/0 and no cancellation)."""
    x, y, z = (float(c) for c in v)
    t2 = x * x + y * y + z * z
    if t2 < 1e-12:
        a, b = 1.0 - t2 / 6.0, 0.5 - t2 / 24.0
    else:
        t = math.sqrt(t2)
        a, h = math.sin(t) / t, math.sin(0.5 * t) / t
        b = 2.0 * h * h
    return np.array(
        (
            (1.0 - b * (y * y + z * z), b * x * y - a * z, b * x * z + a * y),
            (b * x * y + a * z, 1.0 - b * (x * x + z * z), b * y * z - a * x),
            (b * x * z - a * y, b * y * z + a * x, 1.0 - b * (x * x + y * y)),
        )
    )
