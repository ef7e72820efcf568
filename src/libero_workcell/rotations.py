"""Rotation helpers every layer shares (the driver's IK and response model, the tracking law).

Closed forms on 3x3 matrices: these run in the servo path several times per tick, where building a scipy
``Rotation`` costs more than the arithmetic; scipy takes over where a closed form is badly conditioned.
"""

from __future__ import annotations

import math

import numpy as np


def rotation_error(R_target: np.ndarray, R_current: np.ndarray) -> np.ndarray:
    """Rotation vector (rad, base frame) that takes R_current to R_target: Log(R_t R_c^T).

    The closed form is used where it is well conditioned (what IK sees every
    iteration); within 0.01 rad of pi, scipy's robust conversion takes over.
    """
    E = R_target @ R_current.T
    cos = min(1.0, max(-1.0, (E[0, 0] + E[1, 1] + E[2, 2] - 1.0) / 2.0))
    angle = float(np.arccos(cos))
    v = np.array([E[2, 1] - E[1, 2], E[0, 2] - E[2, 0], E[1, 0] - E[0, 1]])
    if angle < 1e-8:
        return 0.5 * v
    if angle > np.pi - 1e-2:  # (scipy's import is a third of a second: paid only by a process that comes here)
        from scipy.spatial.transform import Rotation

        return Rotation.from_matrix(E).as_rotvec()
    return (angle / (2.0 * np.sin(angle))) * v


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
