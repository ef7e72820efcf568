"""Panda-to-AUBO Cartesian retargeting: the AUBO follows a Panda's TCP path through the 7-D action.

LIBERO-Industry's law (seed 002, Appendix D): at each control step the AUBO is driven toward the
Panda's *next* TCP reference by

    action = clip(k [ (p_ref - p) / s_p ; Log(R_ref R^T) / s_R ], -1, 1),   k = 3,

with s_p = 0.05 m and s_R = 0.5 rad (the action scales), and the source's gripper schedule kept.
The action goes through the contract like any other source's, so the AUBO answers it with
LIBERO's response (libero_workcell.action_response) under every limit of the arm driver, and what is
recorded is exactly what a policy must output.

The reference is mapped into the AUBO's frame relative to the start: the Panda's displacement and
rotation since its first state are applied to the AUBO's start pose (both worlds share the task's
base frame convention: x forward, z up), so a path recorded in any world can be followed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.demo_reading import TcpPath
from libero_workcell.tracking_law import TRACKING_GAIN, tracking_action

# m/s: the top TCP speed of a path the law follows closely. One step ahead, with k = 3, a path at v needs
# goal offsets of ~4 v dt (LIBERO's response covers a quarter of the offset per step), which reach the
# full-scale 0.05 m near 0.25 m/s; above that the action saturates and the follower falls behind.
FOLLOWABLE_SPEED = 0.18
# m/s: the top TCP speed of a path the law follows within 2 mm RMS. It lags a path moving at v by about
# v dt / 3 (the offset it holds is k times the lag plus one step, a quarter of which the response covers per
# step): 1.3 mm at this speed, and starts, stops and corners add to it (whole Panda episodes: 1.6 mm RMS).
CLOSE_SPEED = 0.08


@dataclass(frozen=True)
class Tracking:
    """How the follower tracked the reference: per step, after each action, against the reference it aimed at."""

    actions: np.ndarray  # (n - 1, 7) what was sent
    pos: np.ndarray  # (n, 3) the follower's TCP
    R: np.ndarray  # (n, 3, 3)
    pos_error: np.ndarray  # (n,) m
    rot_error: np.ndarray  # (n,) rad

    @property
    def pos_rms(self) -> float:
        return float(np.sqrt(np.mean(self.pos_error**2)))

    @property
    def rot_rms(self) -> float:
        return float(np.sqrt(np.mean(self.rot_error**2)))


def follow(
    path: TcpPath,
    observe: Callable[[], tuple[np.ndarray, np.ndarray]],
    step: Callable[[np.ndarray], None],
    gain: float = TRACKING_GAIN,
) -> Tracking:
    """Drive a follower along ``path`` (already in its frame): at step t, aim at the reference of t + 1.

    ``observe()`` gives the follower's TCP (position, rotation); ``step(action)`` sends one action and
    lets one control period pass.
    """
    actions, poses = [], [observe()]
    for t in range(len(path.pos) - 1):
        p, R = poses[-1]
        a = tracking_action(path.pos[t + 1], path.R[t + 1], p, R, path.gripper[t], gain)
        step(a)
        actions.append(a)
        poses.append(observe())
    pos = np.array([p for p, _ in poses])
    rot = np.array([r for _, r in poses])
    pos_err = np.linalg.norm(pos - path.pos, axis=1)
    rot_err = Rotation.from_matrix(np.einsum("nij,nkj->nik", rot, path.R)).magnitude()
    return Tracking(np.array(actions), pos, rot, pos_err, rot_err)
