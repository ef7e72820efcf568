"""``goal_delta``: the action moves the goal by the scaled delta, clipped to the TCP speed limits, and the stream
reaches it on a straight line within the control period; a goal whose joints would move faster than the joint
speed limit is refused."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import fk, ik, rotation_error
from aubo_bridge.response.base import IK_MAX_ITERATIONS, clip_norm


@dataclass(frozen=True)
class Segment:
    """One control period of motion: from the stream's pose at the action to the new goal."""

    q0: np.ndarray  # joints at the start (the servo target when the action arrived)
    q1: np.ndarray  # the goal's validated IK solution
    p0: np.ndarray  # TCP at the start
    p1: np.ndarray  # TCP goal
    R0: np.ndarray  # TCP rotation at the start
    w: np.ndarray  # rotation vector (base frame) from R0 to the goal rotation
    t0: float  # driver clock at the start


class GoalDeltaMotion:
    """The current segment (see the module)."""

    def __init__(self, config: ArmConfig, counters: Counter[str]) -> None:
        self.config = config
        self.counters = counters
        self.seg: Segment  # the driver anchors the motion before anything else

    def anchor(self, target: np.ndarray, pos: np.ndarray, R: np.ndarray, now: float) -> None:
        self.seg = Segment(target.copy(), target.copy(), pos, pos, R, np.zeros(3), now)  # stays at the target

    def action_base(self, goal_pos: np.ndarray, goal_R: np.ndarray, dpos: np.ndarray,
                    drot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        # relative to the previous goal, which is reached within the period: clipped to the speed limits
        cfg = self.config
        return (goal_pos, goal_R, clip_norm(dpos, cfg.max_tcp_speed * cfg.control_period),
                clip_norm(drot, cfg.max_tcp_rot_speed * cfg.control_period))  # fmt: skip

    def goal_rotation(self, goal_pos: np.ndarray, goal_R: np.ndarray, base_R: np.ndarray, dpos: np.ndarray,
                      drot: np.ndarray) -> np.ndarray:  # fmt: skip
        return Rotation.from_rotvec(drot).as_matrix() @ base_R

    def ik_seed(self, target: np.ndarray) -> np.ndarray:
        return self.seg.q1

    def refusal(self, q: np.ndarray) -> str | None:
        """The step this action asks for, from the previous goal's joints (how fast the servo stream then really
        moves is bounded separately, per tick, by the driver's limiter)."""
        cfg = self.config
        joint_speed = np.abs(q - self.seg.q1) / cfg.control_period
        if np.any(joint_speed > cfg.max_joint_speed):
            j = int(np.argmax(joint_speed / cfg.max_joint_speed))
            return (f"joint {j + 1} would move at {joint_speed[j]:.2f} rad/s (limit {cfg.max_joint_speed[j]:.2f}): "
                    "step too large or near a singularity")  # fmt: skip
        return None

    def accepted(self, target: np.ndarray, q: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                 now: float) -> None:  # fmt: skip
        p0, R0 = fk(target, self.config.tool_offset)
        self.seg = Segment(target.copy(), q, p0, goal_pos, R0, rotation_error(goal_R, R0), now)

    def next_point(self, target: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                   now: float) -> tuple[np.ndarray, str | None]:  # fmt: skip
        """Joints where the arm should be when the next servo target is due (AUBO servoJoint's t = the call
        interval: interpolated to now + one servo period), on the segment's straight Cartesian line.

        The TCP moves uniformly (so the per-tick speed limit is the action's own, not a curvature artefact of
        joint interpolation); the end is the goal's validated IK solution. Where IK fails on the way (a singular
        pose between two reachable ones), the joint-space interpolation between the segment's two valid
        configurations is used instead.
        """
        cfg, seg = self.config, self.seg
        frac = min(1.0, (now + cfg.servo_period - seg.t0) / cfg.control_period)
        if frac >= 1.0:
            return seg.q1, None
        p = seg.p0 + (seg.p1 - seg.p0) * frac
        R = Rotation.from_rotvec(seg.w * frac).as_matrix() @ seg.R0
        sol = ik(p, R, target, cfg.tool_offset, IK_MAX_ITERATIONS, cfg.ik_pos_tol, cfg.ik_rot_tol)
        if sol.converged:
            return sol.q, None
        self.counters["ik_fallbacks"] += 1
        return seg.q0 + (seg.q1 - seg.q0) * frac, None

    def tracked_pos(self, goal_pos: np.ndarray) -> np.ndarray:
        return goal_pos
