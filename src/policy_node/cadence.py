"""What the operator reads in policy_node's log: each change between acting and holding on a fault, once, and a
one-line cadence report at the end of each episode.

With a server that returned NaN in one chunk and raised on another, the log used to say nothing (only
``/diagnostics`` knew). :class:`Transitions` turns the step records into "holding (kind): reason" and
"recovered" messages, one per change and at most one every ``min_interval`` seconds (a flapping fault is
summarised, not streamed). :class:`EpisodeStats` keeps the episode's accounting for the line LeRobot's record
loop prints per episode: the rate achieved against the target, the steps held and why, the round trips' p50 and
p99. :class:`Cadence` holds both behind one lock: the control loop adds steps, the services end episodes.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import TYPE_CHECKING, Final

import numpy as np

if TYPE_CHECKING:
    from policy_node.runner import StepRecord

LOG_INTERVAL_S: Final = 2.0  # at most one transition message this often (the node's other throttled logs: 2 s)
WARNING: Final = "warning"
INFO: Final = "info"


def fault_kind(record: StepRecord) -> str | None:
    """The fault the arm holds on at this step (its record's kind), or None: an action went out, or a chunk is
    merely on its way (a synchronous client stands still during every inference; that is no fault)."""
    return record.kind if record.action is None and record.reason else None


class Transitions:
    """Holding / recovered messages: one per change of state, at most one every ``min_interval`` s."""

    def __init__(self, min_interval: float = LOG_INTERVAL_S) -> None:
        self.min_interval = float(min_interval)
        self.reset()

    def reset(self) -> None:
        """A new episode starts acting: nothing is held, nothing pending."""
        self._state: str | None = None  # the fault held on now (None: acting)
        self._logged: str | None = None  # the state the last message reported
        self._last_log = -np.inf
        self._changes = 0  # changes of state since the last message
        self._held = 0  # fault steps since the last message
        self._reason = ""

    def update(self, record: StepRecord, now: float) -> tuple[str, str] | None:
        """(level, message) when this step's state differs from the one last reported and the interval has
        passed; None otherwise."""
        kind = fault_kind(record)
        if kind != self._state:
            self._state = kind
            self._changes += 1
        if kind is not None:
            self._held += 1
            self._reason = record.reason
        if self._state == self._logged or now - self._last_log < self.min_interval:
            return None
        more = f" ({self._changes - 1} more changes since the last message)" if self._changes > 1 else ""
        self._logged, self._last_log, self._changes = self._state, now, 0
        if kind is None:
            held, self._held = self._held, 0
            return INFO, f"recovered: acting again after {held} steps held{more}"
        return WARNING, f"holding ({kind}): {self._reason}{more}"


class EpisodeStats:
    """One episode's steps: how many, at what rate, which acted, which held and why, each chunk's round trip."""

    def __init__(self, control_hz: float) -> None:
        self.control_hz = float(control_hz)
        self.reset()

    def reset(self) -> None:
        self.steps = 0
        self.first_t = self.last_t = 0.0
        self.acted: Counter[str] = Counter()  # kind -> steps an action went out ("wait", "chunk")
        self.held: Counter[str] = Counter()  # kind -> steps the arm held ("no_chunk", "server_lost", "stale_obs")
        self.last_reason = ""
        self.round_trips: dict[int, float] = {}  # chunk -> its round trip (ms), once per chunk

    def add(self, record: StepRecord) -> None:
        if self.steps == 0:
            self.first_t = record.t
        self.steps += 1
        self.last_t = record.t
        (self.held if record.action is None else self.acted)[record.kind] += 1
        if record.reason:
            self.last_reason = record.reason
        if record.round_trip_ms is not None:
            self.round_trips[record.chunk] = record.round_trip_ms

    @property
    def rate_hz(self) -> float | None:
        """Steps per second over the episode (its clock: sim time in lockstep); None under two steps."""
        span = self.last_t - self.first_t
        return (self.steps - 1) / span if self.steps > 1 and span > 0 else None

    def line(self, label: str) -> str | None:
        """The episode's cadence report in one line; None for an episode without steps."""
        if self.steps == 0:
            return None
        rate = self.rate_hz
        hz = f"{rate:.1f} Hz" if rate is not None else "- Hz"
        parts = [f"{label}: {self.steps} steps in {self.last_t - self.first_t:.1f} s, {hz} "
                 f"(target {self.control_hz:g})"]  # fmt: skip
        parts.append(f"{sum(self.acted.values())} acted" + _counts(self.acted))
        held = sum(self.held.values())
        parts.append(f"{held} held" + _counts(self.held) + (f", last fault: {self.last_reason}" if held and
                                                            self.last_reason else ""))  # fmt: skip
        if self.round_trips:
            p50, p99 = np.percentile(list(self.round_trips.values()), [50, 99])
            parts.append(f"round trip p50 {p50:.0f} ms, p99 {p99:.0f} ms over {len(self.round_trips)} chunks")
        else:
            parts.append("no chunk")
        return "; ".join(parts)


def _counts(counts: Counter[str]) -> str:
    return f" ({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})" if counts else ""


class Cadence:
    """Transitions and the episode's accounting, thread-safe: ``add`` each step, ``end`` each episode."""

    def __init__(self, control_hz: float, min_interval: float = LOG_INTERVAL_S) -> None:
        self._lock = threading.Lock()
        self.transitions = Transitions(min_interval)
        self.episode = EpisodeStats(control_hz)
        self.episodes = 0  # episodes reported so far

    def add(self, record: StepRecord, now: float) -> tuple[str, str] | None:
        """Count the step; (level, message) to log when the state changed (Transitions.update)."""
        with self._lock:
            self.episode.add(record)
            return self.transitions.update(record, now)

    def end(self, why: str) -> str | None:
        """The ending episode's report line, "episode N (why): ..." (None without steps: nothing to report);
        the next episode starts from nothing."""
        with self._lock:
            line = self.episode.line(f"episode {self.episodes + 1} ({why})")
            self.episodes += line is not None
            self.episode.reset()
            self.transitions.reset()
            return line
