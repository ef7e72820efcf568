"""Policies the local server can serve with no checkpoint and no GPU (openpi's ``BasePolicy`` interface).

- :class:`ReachPolicy` closes the loop through the observation: from ``observation/state`` it plans a chunk
  toward a target TCP position, stepping the tracking law (libero_workcell.tracking_law) on a model of the
  arm's LIBERO response (libero_workcell.action_response), so each chunk is what the arm should be told over the
  next H steps from where it is now.
- :class:`FaultyPolicy` wraps one and, from its ``after``-th call on, answers as a broken server would:
  NaN actions, the wrong shape, no ``actions`` key, or an exception (openpi-server then sends the traceback
  as a text frame and closes with 1011). The tests use it; so can a lab checking its own client.

Both can be made slow (``delay_ms``: inference time, spent before answering) to test chunk prefetching.
"""

from __future__ import annotations

import time
from typing import Any, Final

import numpy as np
from openpi_client.base_policy import BasePolicy
from scipy.spatial.transform import Rotation

from libero_workcell.action_response import Goal, OscGains, OscResponse, RefState, next_goal
from libero_workcell.contract import CONTROL_HZ_DEFAULT, GRIPPER_OPEN, action_to_delta
from libero_workcell.tracking_law import tracking_action

FAULTS: Final = ("nan", "shape", "missing", "raise")


class ReachPolicy(BasePolicy):
    """Chunks of H actions taking the TCP to ``target`` (base frame, m), orientation held, gripper open."""

    def __init__(self, target: np.ndarray, horizon: int = 10, delay_ms: float = 0.0,
                 control_hz: float = CONTROL_HZ_DEFAULT) -> None:  # fmt: skip
        self.target = np.asarray(target, float)
        if self.target.shape != (3,) or not np.all(np.isfinite(self.target)):
            raise ValueError(f"target must be 3 finite numbers (m), got {target!r}")
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        self.horizon = int(horizon)
        self.delay_ms = float(delay_ms)
        self._model = OscResponse(OscGains(), 1.0 / control_hz)  # exact over a period: the goal holds within it
        self.calls = 0

    def infer(self, obs: dict) -> dict:
        t0 = time.monotonic()
        self.calls += 1
        state = np.asarray(obs["observation/state"], float)
        if state.shape[0] < 6:
            raise ValueError(f"observation/state has {state.shape[0]} values; this policy needs the TCP pose")
        ref = RefState.at_rest(state[:3], Rotation.from_rotvec(state[3:6]).as_matrix())
        goal = Goal(ref.pos, ref.R)
        target_R = ref.R.copy()
        actions = np.zeros((self.horizon, 7))
        for j in range(self.horizon):  # plan on the response model from the observed pose
            a = tracking_action(self.target, target_R, ref.pos, ref.R, GRIPPER_OPEN)
            actions[j] = a
            dpos, drot, _ = action_to_delta(a)
            goal = next_goal(ref, goal, dpos, drot)
            ref = self._model.step(ref, goal)
        spare = self.delay_ms / 1e3 - (time.monotonic() - t0)
        if spare > 0:
            time.sleep(spare)
        return {"actions": actions, "policy_timing": {"infer_ms": (time.monotonic() - t0) * 1e3}}


class FaultyPolicy(BasePolicy):
    """``inner``'s answers until call ``after``, then the ``fault`` (one of FAULTS) on every call."""

    def __init__(self, inner: BasePolicy, fault: str, after: int = 0) -> None:
        if fault not in FAULTS:
            raise ValueError(f"fault must be one of {list(FAULTS)}, got {fault!r}")
        self.inner, self.fault, self.after = inner, fault, int(after)
        self.calls = 0

    def infer(self, obs: dict) -> dict:
        self.calls += 1
        reply: dict[str, Any] = self.inner.infer(obs)
        if self.calls <= self.after:
            return reply
        if self.fault == "nan":
            reply["actions"] = np.array(reply["actions"], float)
            reply["actions"][1, 2] = np.nan
        elif self.fault == "shape":
            reply["actions"] = np.zeros((len(reply["actions"]), 6))
        elif self.fault == "missing":
            reply = {"policy_timing": reply.get("policy_timing", {})}
        else:
            raise RuntimeError("the policy failed on purpose (FaultyPolicy 'raise')")
        return reply
