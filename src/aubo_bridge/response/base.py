"""The interface between the arm driver and what an action means (:mod:`aubo_bridge.response`)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

# One control step's goal is millimetres from the previous one: IK from the previous goal's joints converges in 2-3
# iterations. A goal that needs more is unreachable in practice, and the lock the servo tick needs is held meanwhile.
IK_MAX_ITERATIONS = 15


def box_step(start: np.ndarray, step: np.ndarray, low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where a goal step from ``start`` may land in the box [low, high], and which axes it pushes further out.

    Inside the box the goal is clipped to it. On an axis where ``start`` is already outside,
    the goal may move toward the box but never further out, and is never pulled in faster
    than ``step``: per axis the result lies between ``start`` and ``start + step``, so the
    step's length (the speed limit) holds whatever the box does, and a zero step stays put.
    Returns (new goal, boolean mask of axes where ``step`` points further out of the box).
    """
    lo = np.minimum(low, start)
    hi = np.maximum(high, start)
    outward = ((start < low) & (step < 0)) | ((start > high) & (step > 0))
    return np.clip(start + step, lo, hi), outward


def clip_norm(v: np.ndarray, limit: float) -> np.ndarray:
    """``v`` shortened (never turned) to at most ``limit`` long."""
    n = float(np.linalg.norm(v))
    return v * (limit / n) if n > limit else v


class Motion(Protocol):
    """How the servo stream moves toward the goal the accepted actions set. The driver holds its lock around
    every call; the goal itself (``goal_pos``, ``goal_R``) is the driver's, passed in."""

    def anchor(self, target: np.ndarray, pos: np.ndarray, R: np.ndarray, now: float) -> None:
        """Stand still at the servo target ``target`` (its TCP pose ``pos``, ``R``): every hold re-anchors here."""

    def action_base(self, goal_pos: np.ndarray, goal_R: np.ndarray, dpos: np.ndarray,
                    drot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        """The pose an action's deltas are relative to, and the deltas as they apply: (pos, R, dpos, drot)."""

    def goal_rotation(self, goal_pos: np.ndarray, goal_R: np.ndarray, base_R: np.ndarray, dpos: np.ndarray,
                      drot: np.ndarray) -> np.ndarray:  # fmt: skip
        """The new goal's rotation for an action (``dpos``, ``drot``) from the base rotation ``base_R``."""

    def ik_seed(self, target: np.ndarray) -> np.ndarray:
        """The joints the new goal's IK starts from."""

    def refusal(self, q: np.ndarray) -> str | None:
        """Why the goal's joints ``q`` cannot be reached as this motion reaches a goal (None: they can)."""

    def accepted(self, target: np.ndarray, q: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                 now: float) -> None:  # fmt: skip
        """A new goal (its joints ``q``) was accepted at ``now``, the stream at ``target``."""

    def next_point(self, target: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                   now: float) -> tuple[np.ndarray, str | None]:  # fmt: skip
        """The joints the stream heads for this servo period (the driver's limiter then bounds the step), and what
        went wrong on the way that the operator should read (None: nothing)."""

    def tracked_pos(self, goal_pos: np.ndarray) -> np.ndarray:
        """Where the TCP is meant to be now (what the tracking-error guard compares the measurement with)."""
