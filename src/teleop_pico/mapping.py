"""Controller samples and the headset-to-base mapping (pure: no SDK, no ROS).

The SDK gives the right controller's pose as ``[x, y, z, qx, qy, qz, qw]`` in the headset's OpenXR frame.
A pose of seven zeros is what it returns without its PC service (qw = 0 is not a rotation): that, a
non-unit quaternion, a non-finite value or a position beyond any room is *no tracking*, never a pose.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.spatial.transform import Rotation

QUAT_NORM_TOL: Final = 0.05  # |q| within 1 +- this is a rotation (the stream is float32)
# m from the headset's origin: no tracked controller is further (a room-scale volume is a few metres). Checked before
# any arithmetic, so a garbage value of 1e300 is refused instead of overflowing in a norm or a difference.
POSITION_BOUND: Final = 100.0


@dataclass(frozen=True)
class ControllerSample:
    """One reading of the right controller, as the SDK reports it."""

    stamp_ns: int  # the SDK's time stamp of the data (get_time_stamp_ns)
    pose: tuple[float, ...]  # x, y, z (m), qx, qy, qz, qw: headset frame
    trigger: float  # 0..1
    grip: float  # 0..1
    a: bool  # A button (start / stop and save)
    b: bool  # B button (discard)


def is_tracking(pose: tuple[float, ...] | np.ndarray) -> bool:
    """True when ``pose`` is a real pose: 7 finite values, the position within :data:`POSITION_BOUND`, and a
    quaternion of unit norm (bounds first: the norm of a huge quaternion would overflow)."""
    try:
        p = np.asarray(pose, float)
    except (TypeError, ValueError):
        return False
    if p.shape != (7,) or not np.all(np.isfinite(p)):
        return False
    if np.any(np.abs(p[:3]) > POSITION_BOUND) or np.any(np.abs(p[3:]) > 1.0 + QUAT_NORM_TOL):
        return False
    return abs(float(np.linalg.norm(p[3:])) - 1.0) <= QUAT_NORM_TOL


def to_base(pose: tuple[float, ...] | np.ndarray, headset_to_base: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The controller pose in the robot base frame: p_b = R p_xr, R_b = R R_xr R^T (q_b = q_R q q_R*)."""
    p = np.asarray(pose, float)
    R = np.asarray(headset_to_base, float)
    R_xr = Rotation.from_quat(p[3:] / np.linalg.norm(p[3:])).as_matrix()  # scipy: (x, y, z, w), as the SDK
    return R @ p[:3], R @ R_xr @ R.T
