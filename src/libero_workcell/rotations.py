"""Rotation helpers every layer shares (the driver's IK, the tracking law)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation


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
    if angle > np.pi - 1e-2:
        return Rotation.from_matrix(E).as_rotvec()
    return (angle / (2.0 * np.sin(angle))) * v
