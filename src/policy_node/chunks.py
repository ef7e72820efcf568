"""Action chunks: which action of which chunk the arm executes at each control step.

A policy server answers one observation with a chunk of H actions for the steps that follow it; like
openpi's LIBERO client, the first ``replan_steps`` of them are used, then a newer chunk takes over.

The rule, in both modes (``ChunkQueue``):

- **Time alignment.** A chunk answers the observation of the moment it was requested. If the arm executed
  k actions while the request was in flight, the chunk's first k actions are for steps already past and are
  dropped: the chunk contributes its actions k .. k + replan_steps - 1 (as far as it reaches), at most
  ``replan_steps`` of them, as openpi's client uses ``replan_steps`` of each chunk. (With k = 0, openpi's
  own 0 .. replan_steps - 1; with a round trip of k steps, each chunk still covers more steps than its
  successor takes to arrive, so the stream has no pause.) A chunk with nothing left (k >= its length) is
  stale and dropped whole.
- **Overlap.** Where actions of the previous chunk are still queued, the new chunk's actions for the same
  steps are blended: ``blend_old`` x old + (1 - ``blend_old``) x new for the six pose components (LeRobot's
  async-inference default, 0.3 old + 0.7 new), the new chunk's gripper command as it is (a blend of open and
  close would be a half-closed command no policy asked for). Old actions beyond the new chunk's window are
  dropped: the newer observation wins.
- **Bounded splice** (``bound_splice``, the node's default, ``policy.splice: bounded``). Each pose component
  c of an executed action differs from the one executed before it by at most S_c, the largest step-to-step
  change of that component within the chunks involved: the chunk the last executed action came from and the
  new one (both as the server sent them), and never less than ``min_splice_step`` (so two chunks that hold a
  component still, at different values, still meet). At a join the queued actions are, from the last executed
  action L: e_i = e_(i-1) + clip(t_i - e_(i-1), -S, S) per component, t_i being the aligned (and
  overlap-blended) action; once caught up (|t_i - e_(i-1)| <= S) this is t_i itself. So the jump at a splice
  is never larger than a step the policy itself takes within a chunk (or ``min_splice_step``), and the new
  chunk is followed exactly as soon as it is reached. The first chunk of an episode, or after the queue was
  dropped (nothing executed just before it), is taken as it is. Time alignment holds either way: no action
  whose step has passed is ever executed.
- **Synchronous** (openpi's own client): the next request goes out when the queue is empty, so the arm
  executes exactly ``replan_steps`` actions of each chunk and stands still during inference (k = 0, nothing
  blended). **Asynchronous** (prefetch): the request goes out while ``prefetch_steps`` actions are still
  queued (at least the measured round trip in control steps, plus one), so the next chunk is there before
  the queue runs dry and the action stream has no pause.

Every action in a chunk has been validated (``validate_chunk``) before it is queued; nothing here makes up
an action (an empty queue yields None: the node publishes nothing and the arm driver's watchdog holds).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Final

import numpy as np

from libero_workcell.contract import ACTION_DIM, ContractError, validate_action

BLEND_OLD_DEFAULT: Final = 0.3  # LeRobot's async inference: 0.3 old + 0.7 new where chunks overlap
MIN_SPLICE_STEP_DEFAULT: Final = 0.05  # action units ([-1, 1]): the bounded splice's least step per control step
POSE: Final = slice(0, 6)  # the pose components of an action; index 6 is the gripper


@dataclass(frozen=True)
class ChunkAction:
    """One action to execute, and where it came from."""

    action: np.ndarray  # (7,)
    chunk: int  # the chunk's sequence number (0, 1, ... in the order requested)
    index: int  # its index in that chunk
    blended: bool  # blended with the previous chunk's action for the same step
    limited: bool = False  # moved toward the chunk's action by the splice bound, not yet on it


@dataclass(frozen=True)
class Joined:
    """What happened when a chunk arrived."""

    chunk: int
    dropped_past: int  # leading actions for steps already executed while the request was in flight
    blended: int
    queued: int  # actions of this chunk now queued (0: the chunk was stale)
    limited: int = 0  # of them, how many the splice bound moved short of the chunk's action


def validate_chunk(actions: object, min_length: int = 1) -> np.ndarray:
    """A server's ``actions`` as an (H, 7) float array, every row a valid contract action; ContractError
    naming the first bad row otherwise."""
    try:
        a = np.asarray(actions, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ContractError(f"actions are not numeric: {exc}") from None
    if a.ndim != 2 or a.shape[1] != ACTION_DIM or a.shape[0] < min_length:
        raise ContractError(f"actions must be (H >= {min_length}, {ACTION_DIM}), got shape {a.shape}")
    for i, row in enumerate(a):
        try:
            validate_action(row)
        except ContractError as exc:
            raise ContractError(f"action {i} of the chunk: {exc}") from None
    return a


class ChunkQueue:
    """The actions to execute, step by step; see the module docstring for the rule."""

    def __init__(self, replan_steps: int, blend_old: float = BLEND_OLD_DEFAULT, bound_splice: bool = False,
                 min_splice_step: float = MIN_SPLICE_STEP_DEFAULT) -> None:  # fmt: skip
        if replan_steps < 1:
            raise ValueError(f"replan_steps must be >= 1, got {replan_steps}")
        if not 0.0 <= blend_old < 1.0:
            raise ValueError(f"blend_old must be in [0, 1), got {blend_old}")
        if not min_splice_step > 0.0:
            raise ValueError(f"min_splice_step must be > 0, got {min_splice_step}")
        self.replan_steps = int(replan_steps)
        self.blend_old = float(blend_old)
        self.bound_splice = bool(bound_splice)
        self.min_splice_step = float(min_splice_step)
        self.executed = 0  # actions handed out so far
        self.last: ChunkAction | None = None  # the last action handed out (None at start and after clear)
        self._step_of: dict[int, np.ndarray] = {}  # chunk -> its largest step of each pose component (as sent)
        self._queue: deque[ChunkAction] = deque()
        self._next_chunk = 0

    @property
    def remaining(self) -> int:
        return len(self._queue)

    def committed(self, steps: int) -> np.ndarray:
        """The next ``steps`` queued actions (fewer if fewer are queued), (n, 7): what the arm will execute
        while a chunk requested now is computed (real-time chunking's committed prefix)."""
        rows = [x.action for x in list(self._queue)[: max(0, int(steps))]]
        return np.array(rows).reshape(len(rows), ACTION_DIM)  # rows are validated float64 actions

    def request(self) -> tuple[int, int]:
        """A chunk is being requested now: (its sequence number, the executed count it answers)."""
        chunk, self._next_chunk = self._next_chunk, self._next_chunk + 1
        return chunk, self.executed

    def join(self, chunk: int, actions: np.ndarray, requested_at: int) -> Joined:
        """Queue a validated chunk that answers the observation taken when ``requested_at`` actions had been
        executed."""
        k = self.executed - requested_at
        if k < 0:
            raise ValueError(f"chunk {chunk} answers executed count {requested_at}, but only {self.executed} ran")
        window = actions[k : k + self.replan_steps]
        if len(window) == 0:
            return Joined(chunk, min(k, len(actions)), 0, 0)
        old = list(self._queue)
        fresh: list[ChunkAction] = []
        for i, a in enumerate(window):
            a = np.array(a, dtype=np.float64)
            blended = i < len(old)
            if blended:
                a[POSE] = self.blend_old * old[i].action[POSE] + (1.0 - self.blend_old) * a[POSE]
            fresh.append(ChunkAction(a, chunk, k + i, blended))
        limited = 0
        self._step_of[chunk] = max_step(actions)
        if self.bound_splice and self.last is not None:
            bound = self.splice_bound(self.last.chunk, chunk)
            prev = self.last.action[POSE]
            for i, x in enumerate(fresh):
                pose = prev + np.clip(x.action[POSE] - prev, -bound, bound)
                if not np.array_equal(pose, x.action[POSE]):
                    a = x.action.copy()
                    a[POSE] = pose
                    fresh[i] = ChunkAction(a, x.chunk, x.index, x.blended, True)
                    limited += 1
                prev = pose
        # what the next join may need: this chunk's steps (its actions are now queued), and the running one's while
        # nothing of this one has run yet
        keep = {chunk} | ({self.last.chunk} if self.last is not None else set())
        self._step_of = {c: v for c, v in self._step_of.items() if c in keep}
        self._queue = deque(fresh)
        return Joined(chunk, k, min(len(old), len(window)), len(fresh), limited)

    def splice_bound(self, old: int, new: int) -> np.ndarray:
        """S: per pose component, the largest step between consecutive actions of chunk ``old`` or ``new`` (as
        the server sent them), at least ``min_splice_step``."""
        return np.maximum(np.maximum(self._step_of[old], self._step_of[new]), self.min_splice_step)

    def next(self) -> ChunkAction | None:
        """The action for this control step, or None when none is queued (the arm holds)."""
        if not self._queue:
            return None
        self.executed += 1
        self.last = self._queue.popleft()
        return self.last

    def clear(self) -> int:
        """Drop every queued action (the server was lost, the episode ended); how many were dropped."""
        n = len(self._queue)
        self._queue.clear()
        self.last = None  # what follows starts afresh (a new episode, a new connection): no splice
        return n


def max_step(actions: np.ndarray) -> np.ndarray:
    """Per pose component, the largest change between consecutive actions of a chunk (zeros for one action)."""
    a = np.asarray(actions)[:, POSE]
    return np.max(np.abs(np.diff(a, axis=0)), axis=0) if len(a) > 1 else np.zeros(6)


def prefetch_steps(replan_steps: int, round_trip_steps: float, share: float = 0.5) -> int:
    """Queued actions at which the asynchronous mode requests the next chunk: ``share`` of a window
    (LeRobot's 0.5), and never fewer than the round trip in control steps plus one, so a reply is there
    before the queue runs dry; at most replan_steps - 1 (a request per executed action is the limit: a round
    trip longer than that pauses the stream, and a longer replan_steps is the cure)."""
    need = max(math.ceil(share * replan_steps), math.ceil(max(round_trip_steps, 0.0)) + 1)
    return max(1, min(need, replan_steps - 1))
