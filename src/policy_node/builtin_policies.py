"""Policies the local server can serve with no checkpoint and no GPU (openpi's ``BasePolicy`` interface).

- :class:`ReachPolicy` closes the loop through the observation: from the request's state it plans a chunk
  toward a target TCP position, stepping the tracking law (libero_workcell.tracking_law) on a model of the
  arm's LIBERO response (libero_workcell.action_response), so each chunk is what the arm should be told over the
  next H steps from where it is now.
- :class:`SampledReachPolicy` (``reach-rtc``) is ``reach`` as a flow-matching VLA answers: each chunk is one
  sample, the plan plus a smooth offset drawn afresh per request (``noise``), so two chunks for the same steps
  disagree the way two samples do. Given ``prev_actions`` and ``inference_delay`` (policy.rtc) it does what a
  real-time chunking server does (Black et al. 2025): its first d actions are the committed ones and the rest
  leave them through RTC's soft mask. Without them it is a plain server. It records what it received.
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
from policy_node.served import read_request

FAULTS: Final = ("nan", "shape", "missing", "raise")
SAMPLE_NOISE_DEFAULT: Final = 0.1  # action units: the spread of SampledReachPolicy's samples


def rtc_soft_mask(horizon: int, delay: int) -> np.ndarray:
    """RTC's prefix weights (Black et al. 2025, eq. 5, execution horizon 0): 1 for the d committed actions, then
    c_i (e^c_i - 1) / (e - 1) with c_i = (H - i) / (H - d + 1), decaying to 0 by the chunk's end."""
    i = np.arange(horizon, dtype=np.float64)
    c = (horizon - i) / max(horizon - delay + 1, 1)
    w = c * np.expm1(c) / np.expm1(1.0)
    w[: max(0, delay)] = 1.0
    return np.clip(w, 0.0, 1.0)


def inpaint(sample: np.ndarray, prev: np.ndarray) -> np.ndarray:
    """A chunk whose first d = len(prev) actions are ``prev`` and whose rest is the sample, offset by the
    difference at the last committed action times RTC's soft mask: the guidance toward the committed actions
    continued, which the flow's inpainting does to the whole chunk."""
    out = np.array(sample, dtype=np.float64)
    d = min(len(prev), len(out))
    if d == 0:
        return out
    out[:d] = prev[:d]
    w = rtc_soft_mask(len(out), d)[d:, None]
    offset = np.asarray(prev[d - 1], float) - np.asarray(sample[d - 1], float)
    offset[6] = 0.0  # the gripper is the sample's after the committed steps
    out[d:] = sample[d:] + w * offset
    return np.clip(out, -1.0, 1.0)


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
        state = read_request(obs).state
        if state.ndim != 1 or state.shape[0] < 6:
            raise ValueError(f"the state has shape {state.shape}; this policy needs the TCP pose")
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


class SampledReachPolicy(ReachPolicy):
    """``reach`` with a fresh smooth offset per chunk (a sample), and real-time chunking's inpainting when the
    request carries the committed actions (``prev_actions``, ``inference_delay``)."""

    def __init__(self, target: np.ndarray, horizon: int = 10, delay_ms: float = 0.0,
                 control_hz: float = CONTROL_HZ_DEFAULT, noise: float = SAMPLE_NOISE_DEFAULT,
                 seed: int | None = 0) -> None:  # fmt: skip
        super().__init__(target, horizon, delay_ms, control_hz)
        if not 0.0 <= noise <= 0.5:
            raise ValueError(f"noise must be in [0, 0.5], got {noise}")
        self.noise = float(noise)
        self._rng = np.random.default_rng(seed)
        self.received: list[tuple[int, tuple[int, ...], str]] = []  # (inference_delay, prev_actions' shape, dtype)
        self.keys_seen: set[str] = set()

    def infer(self, obs: dict) -> dict:
        self.keys_seen.update(obs)
        reply = super().infer(obs)
        h = len(reply["actions"])
        j = np.arange(h)[:, None] / max(h - 1, 1)
        start, end = self._rng.uniform(-self.noise, self.noise, (2, 6))  # a smooth offset: a line over the chunk
        sample = np.array(reply["actions"], float)
        sample[:, :6] += start + (end - start) * j
        sample = np.clip(sample, -1.0, 1.0)
        request = read_request(obs)
        if request.committed is not None and request.inference_delay is not None:
            prev, d = request.committed, request.inference_delay
            self.received.append((d, tuple(prev.shape), str(prev.dtype)))
            if prev.ndim != 2 or prev.shape[1] != 7 or d != len(prev):
                raise ValueError(f"prev_actions must be (inference_delay, 7), got {prev.shape} and {d}")
            sample = inpaint(sample, prev.astype(np.float64))
        reply["actions"] = sample
        return reply


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
