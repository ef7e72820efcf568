"""``libero``: robosuite OSC_POSE's response (:mod:`libero_workcell.action_response`).

The goal is the reference pose plus the scaled delta, and robosuite's law on the Panda's dynamics moves the
streamed reference toward it at the servo rate, so the arm covers about a quarter of the offset per step and
coasts a little after the last action, as in LIBERO. The reference is held to the driver's TCP speed limits and
never leaves the workspace box (:func:`reference_tick`, shared with the kinematic conversion).
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import ik
from aubo_bridge.response.base import IK_MAX_ITERATIONS, box_step, clip_norm
from libero_workcell.action_response import Goal, PandaResponse, RefState, next_goal


def reference_tick(response: PandaResponse, ref: RefState, goal: Goal, cfg: ArmConfig) -> tuple[RefState, str | None]:
    """One servo period of the libero reference toward ``goal`` under the driver's limits, from ``ref``.

    The reference never moves faster than the TCP speed limits (its velocity is clipped) and never leaves
    the workspace box (nor moves further out of it): stopped on a face, that axis's velocity is zeroed.
    Where either acted, the response carries on from where it was stopped. Returns the reference and
    the name of the speed limit that acted, if one did (the kinematic conversion refuses to model that).
    Shared by the driver and the kinematic conversion (sim_bridge.convert): both stream the same reference.
    """
    new = response.step(goal)
    vel, omega = clip_norm(new.vel, cfg.max_tcp_speed), clip_norm(new.omega, cfg.max_tcp_rot_speed)
    sped = "max_tcp_speed" if np.any(vel != new.vel) else "max_tcp_rot_speed" if np.any(omega != new.omega) else None
    pos, _ = box_step(ref.pos, new.pos - ref.pos, cfg.workspace_min, cfg.workspace_max)
    boxed = pos != new.pos
    vel = np.where(boxed, 0.0, vel)
    if sped or np.any(boxed):
        response.seat(pos, vel, omega)
    return RefState(pos, vel, new.R, omega), sped


class LiberoMotion:
    """The streamed reference and the response it follows (see the module)."""

    def __init__(self, config: ArmConfig, counters: Counter[str]) -> None:
        self.config = config
        self.counters = counters
        self.response = PandaResponse(config.servo_period)
        self.ref: RefState  # the driver anchors the motion before anything else

    def anchor(self, target: np.ndarray, pos: np.ndarray, R: np.ndarray, now: float) -> None:
        self._restart(pos, R)

    def _restart(self, pos: np.ndarray, R: np.ndarray) -> None:
        """The reference at rest at (pos, R), its response started over there."""
        self.response.reset(pos, R)
        self.ref = RefState.at_rest(pos, R)

    def action_base(self, goal_pos: np.ndarray, goal_R: np.ndarray, dpos: np.ndarray,
                    drot: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
        return self.ref.pos, self.ref.R, dpos, drot  # relative to the reference; its speed is limited as it streams

    def goal_rotation(self, goal_pos: np.ndarray, goal_R: np.ndarray, base_R: np.ndarray, dpos: np.ndarray,
                      drot: np.ndarray) -> np.ndarray:  # fmt: skip
        return next_goal(self.ref, Goal(goal_pos, goal_R), dpos, drot).R

    def ik_seed(self, target: np.ndarray) -> np.ndarray:
        return target

    def refusal(self, q: np.ndarray) -> str | None:
        return None  # the reference is what streams, under the per-tick limits

    def accepted(self, target: np.ndarray, q: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                 now: float) -> None:  # fmt: skip
        pass  # the reference heads for the new goal from where it is

    def next_point(self, target: np.ndarray, goal_pos: np.ndarray, goal_R: np.ndarray,
                   now: float) -> tuple[np.ndarray, str | None]:  # fmt: skip
        """The reference advanced one servo period toward the goal (:func:`reference_tick`); its joints.

        Where IK fails (a singular pose on the way), the reference stops where it was and the arm holds.
        Should the response itself break (its model diverged), it starts over at rest where the reference
        was and the arm stays at its last target: counted as ``response_resets``.
        """
        cfg = self.config
        try:
            ref, _ = reference_tick(self.response, self.ref, Goal(goal_pos, goal_R), cfg)
        except FloatingPointError as exc:
            self.counters["response_resets"] += 1
            self._restart(self.ref.pos, self.ref.R)
            return target.copy(), f"action response restarted at rest: {exc}"
        sol = ik(ref.pos, ref.R, target, cfg.tool_offset, IK_MAX_ITERATIONS, cfg.ik_pos_tol, cfg.ik_rot_tol)
        if not sol.converged:
            self.counters["ik_fallbacks"] += 1
            self._restart(self.ref.pos, self.ref.R)
            return target.copy(), None
        self.ref = ref
        return sol.q, None

    def tracked_pos(self, goal_pos: np.ndarray) -> np.ndarray:
        return self.ref.pos
