"""The Cartesian tracking law: the one way a TCP target becomes the contract's 7-D action.

LIBERO-Industry's retargeting law (seed 002, Appendix D), used wherever a source knows where the TCP should
be rather than how to move it (the Panda-to-AUBO bridge, closed-loop replay, PICO teleoperation):

    action = clip(k [ (p_ref - p) / s_p ; Log(R_ref R^T) / s_R ], -1, 1),   k = 3,

with s_p = 0.05 m and s_R = 0.5 rad, the contract's action scales. The action then means what every other
source's does (LIBERO's response on the arm), so a demonstration driven this way stores exactly what a
policy must output.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from libero_workcell.contract import ACTION_POS_SCALE, ACTION_ROT_SCALE
from libero_workcell.rotations import rotation_error

TRACKING_GAIN: Final = 3.0  # k, the seed's


def tracking_action(
    p_ref: np.ndarray, R_ref: np.ndarray, p: np.ndarray, R: np.ndarray, gripper: float, gain: float = TRACKING_GAIN
) -> np.ndarray:
    """One 7-D action driving the TCP (p, R) toward (p_ref, R_ref), with the gripper command ``gripper``."""
    pos = gain * (np.asarray(p_ref, float) - p) / ACTION_POS_SCALE
    rot = gain * rotation_error(np.asarray(R_ref, float), np.asarray(R, float)) / ACTION_ROT_SCALE  # Log(R_ref R^T)
    return np.concatenate([np.clip(np.concatenate([pos, rot]), -1.0, 1.0), [float(np.clip(gripper, -1.0, 1.0))]])
