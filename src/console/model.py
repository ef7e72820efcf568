"""What the console shows, as plain data: the graph's state as its topics last said it, the faults and their history.

Why a model of its own: the node (ROS callbacks on its executor) writes it and the web server (its own thread)
reads it, and the same model serves a page without a graph (the evaluation's progress). Every input is parsed
here from what a topic carried, defensively: a malformed status message is counted and ignored, never shown as
state and never the reason the page stops.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from libero_workcell import faults as fault_table

HISTORY: Final = 200  # fault events kept for the page (the session log keeps everything)
ROUND_TRIPS: Final = 200  # chunks whose round trip the deployment panel's percentiles cover
ARM_SOURCE: Final = "arm"


@dataclass
class FaultEvent:
    """A fault raised or cleared: ``source`` (arm, a diagnostics name, policy, recorder), its text, its code."""

    t: float
    source: str
    text: str
    code: str
    state: str  # "raised" or "cleared"

    def as_dict(self) -> dict[str, Any]:
        return {"t": self.t, "source": self.source, "text": self.text, "code": self.code, "state": self.state}


@dataclass
class ActiveFault:
    source: str
    text: str
    since: float
    code: str = ""
    meaning: str = ""
    recovery: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "text": self.text, "since": self.since, "code": self.code,
                "meaning": self.meaning, "recovery": self.recovery}  # fmt: skip


def _classified(source: str, text: str, since: float, devices: tuple[str, ...] | None) -> ActiveFault:
    known = fault_table.classify(text, devices)
    if known is None:
        return ActiveFault(source, text, since)
    return ActiveFault(source, text, since, known.code, known.meaning, known.recovery)


def _finite(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))]


@dataclass
class DeploymentFigures:
    """The policy panel's running figures: chunks, round trips, holds and why, the last server error."""

    round_trips: deque[float] = field(default_factory=lambda: deque(maxlen=ROUND_TRIPS))
    chunks_seen: set[int] = field(default_factory=set)
    holds: Counter[str] = field(default_factory=Counter)
    last_hold_reason: str = ""
    last_server_error: str = ""
    server_answered_since: bool = False  # an action came after the last server error: it is history, not now
    steps: int = 0

    def server_error(self, text: str) -> None:
        """The policy's last server error (its status repeats it: only a new text, or a lost server, is news)."""
        if text != self.last_server_error:
            self.last_server_error = text
            self.server_answered_since = False

    def add(self, step: Mapping[str, Any]) -> None:
        self.steps += 1
        chunk, rtt = step.get("chunk"), _finite(step.get("round_trip_ms"))
        if isinstance(chunk, int) and rtt is not None and chunk not in self.chunks_seen:
            self.chunks_seen.add(chunk)
            self.round_trips.append(rtt)
            if len(self.chunks_seen) > 4 * ROUND_TRIPS:
                self.chunks_seen = set(sorted(self.chunks_seen)[-ROUND_TRIPS:])
        reason = str(step.get("reason") or "")
        if step.get("action") is not None:
            self.server_answered_since = True
        elif reason:
            self.holds[str(step.get("kind", "?"))] += 1
            self.last_hold_reason = reason
            if step.get("kind") == "server_lost":
                self.server_error(reason)
                self.server_answered_since = False

    def as_dict(self) -> dict[str, Any]:
        rtts = list(self.round_trips)
        return {"steps": self.steps, "chunks": len(self.chunks_seen), "round_trip_p50_ms": _percentile(rtts, 50),
                "round_trip_p99_ms": _percentile(rtts, 99), "holds": dict(self.holds),
                "last_hold_reason": self.last_hold_reason, "last_server_error": self.last_server_error,
                "server_answered_since": self.server_answered_since}  # fmt: skip


class ConsoleModel:
    """The graph as the console last heard it. ``update_*`` from the node's callbacks; :meth:`snapshot` for the
    page. Thread-safe; times are wall clock (the operator's), ``clock`` injectable for tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.arm: dict[str, Any] = {"mode": None, "fault": "", "active_source": None, "tcp": None, "gripper": None,
                                    "updated": None}  # fmt: skip
        self.conveyor: dict[str, Any] = {"position": None, "speed": None, "updated": None, "diagnostic": None}
        self.recorder: dict[str, Any] | None = None
        self.teleop: dict[str, Any] | None = None
        self.policy: dict[str, Any] | None = None
        self.deployment = DeploymentFigures()
        self.replay: dict[str, Any] | None = None
        self.episode: dict[str, Any] | None = None
        self.evaluation: dict[str, Any] | None = None
        self.diagnostics: dict[str, dict[str, Any]] = {}  # name -> {level, message, t}
        self.active: dict[str, ActiveFault] = {}
        self.history: deque[FaultEvent] = deque(maxlen=HISTORY)
        self.bad_messages: Counter[str] = Counter()  # input -> malformed messages ignored
        self.notices: deque[dict[str, Any]] = deque(maxlen=50)  # results of the page's controls
        self._state_asked = -float("inf")  # when a page last asked for the state (snapshot)

    # ------------------------------------------------------------------ faults
    def _set_fault(self, source: str, text: str, devices: tuple[str, ...] | None = None) -> None:
        """Raise (non-empty ``text``) or clear the fault of ``source``; a changed text is a new fault."""
        now = self._clock()
        current = self.active.get(source)
        if text and (current is None or current.text != text):
            fault = _classified(source, text, now, devices)
            self.active[source] = fault
            self.history.append(FaultEvent(now, source, text, fault.code, "raised"))
        elif not text and current is not None:
            del self.active[source]
            self.history.append(FaultEvent(now, source, current.text, current.code, "cleared"))

    def _bad(self, what: str) -> None:
        self.bad_messages[what] += 1

    # ------------------------------------------------------------------ inputs
    def update_arm_mode(self, data: Any) -> None:
        """``/aubo/mode``: {"mode", "fault"}."""
        with self._lock:
            if not isinstance(data, dict) or not isinstance(data.get("mode"), str):
                return self._bad("arm_mode")
            fault = data.get("fault") or ""
            self.arm["mode"], self.arm["fault"] = data["mode"], str(fault)
            self._set_fault(ARM_SOURCE, str(fault), (fault_table.ARM, fault_table.GRIPPER))

    def update_active_source(self, source: str) -> None:
        with self._lock:
            self.arm["active_source"] = str(source)[:64]

    def update_tcp(self, position: tuple[float, float, float], quat_xyzw: tuple[float, float, float, float]) -> None:
        values = [_finite(v) for v in (*position, *quat_xyzw)]
        with self._lock:
            if any(v is None for v in values) or sum(v * v for v in values[3:]) < 1e-12:  # type: ignore[operator]
                return self._bad("tcp_pose")
            self.arm["tcp"] = {"position": values[:3], "quat_xyzw": values[3:], "t": self._clock()}
            self.arm["updated"] = self._clock()

    def update_gripper(self, coord: float) -> None:
        with self._lock:
            value = _finite(coord)
            if value is None:
                return self._bad("gripper")
            self.arm["gripper"] = value

    def update_conveyor(self, position: float, speed: float) -> None:
        with self._lock:
            pos, vel = _finite(position), _finite(speed)
            if pos is None or vel is None:
                return self._bad("conveyor")
            self.conveyor.update(position=pos, speed=vel, updated=self._clock())

    def update_json(self, key: str, data: Any) -> None:
        """A JSON status topic: ``recorder``, ``teleop``, ``policy``, ``replay``, ``episode`` (sim)."""
        with self._lock:
            if not isinstance(data, dict):
                return self._bad(key)
            if key == "recorder":
                self.recorder = data
                self._set_fault("recorder", str(data.get("error") or ""), (fault_table.RECORDER,))
            elif key == "teleop":
                self.teleop = data
            elif key == "policy":
                self._update_policy(data)
            elif key == "replay":
                self.replay = data
            elif key == "episode":
                self.episode = data
            else:
                self._bad(key)

    def _update_policy(self, data: dict[str, Any]) -> None:
        step = data.get("step")
        if isinstance(step, dict):
            self.deployment.add(step)
        if data.get("last_error"):
            self.deployment.server_error(str(data["last_error"]))
        self.policy = {**(self.policy or {}), **data}
        lost = isinstance(step, dict) and step.get("kind") == "server_lost"
        self._set_fault("policy", str(step.get("reason") or "policy server lost") if lost else "",
                        (fault_table.POLICY,))  # fmt: skip

    def update_diagnostic(self, name: str, level: int, message: str) -> None:
        """One ``/diagnostics`` status. ERROR and STALE are faults; the arm's own come through ``/aubo/mode``."""
        with self._lock:
            self.diagnostics[name] = {"level": int(level), "message": str(message)[:500], "t": self._clock()}
            if "conveyor" in name:
                self.conveyor["diagnostic"] = self.diagnostics[name]
            if "aubo_bridge" in name:
                return
            self._set_fault(f"diag:{name}", str(message) if level >= 2 else "", fault_table.diagnostic_devices(name))

    def update_evaluation(self, data: dict[str, Any]) -> None:
        """The evaluation's progress: total, done, rows (each trial's line of results.jsonl)."""
        with self._lock:
            self.evaluation = data

    def notice(self, command: str, ok: bool, message: str) -> None:
        with self._lock:
            self.notices.append({"t": self._clock(), "command": command, "ok": bool(ok), "message": message})

    # ------------------------------------------------------------------ output
    def _arm_view(self) -> dict[str, Any]:
        """The arm as the page shows it: the pose's roll/pitch/yaw worked out here, when a page asks, not at each
        of the pose's 50 messages a second."""
        arm = dict(self.arm)
        if arm["tcp"] is not None:
            tcp = dict(arm["tcp"])
            tcp["rpy_deg"] = _rpy_deg(*tcp.pop("quat_xyzw"))
            arm["tcp"] = tcp
        return arm

    def state_watched(self, within: float) -> bool:
        """Whether a page asked for the state in the last ``within`` s (the node follows the arm's and the belt's
        fast topics only then)."""
        with self._lock:
            return self._clock() - self._state_asked <= within

    def forget_motion(self) -> None:
        """The TCP, gripper and belt are no longer followed (no page): shown as unknown, never as a stale value."""
        with self._lock:
            self.arm["tcp"] = self.arm["gripper"] = None
            self.conveyor.update(position=None, speed=None)

    def snapshot(self) -> dict[str, Any]:
        """Everything the page shows, JSON-ready."""
        with self._lock:
            self._state_asked = self._clock()
            panels = (("collection", self.recorder), ("deployment", self.policy), ("replay", self.replay),
                      ("evaluation", self.evaluation))
            jobs = [name for name, seen in panels if seen]
            return {
                "t": self._clock(),
                "jobs": jobs,
                "arm": self._arm_view(),
                "conveyor": dict(self.conveyor),
                "recorder": self.recorder,
                "teleop": self.teleop,
                "policy": self.policy,
                "deployment": self.deployment.as_dict() if self.policy else None,
                "replay": self.replay,
                "episode": self.episode,
                "evaluation": self.evaluation,
                "faults": [f.as_dict() for f in self.active.values()],
                "fault_history": [e.as_dict() for e in self.history],
                "diagnostics": dict(self.diagnostics),
                "bad_messages": dict(self.bad_messages),
                "notices": list(self.notices)[-10:],
            }


def _rpy_deg(x: float, y: float, z: float, w: float) -> list[float]:
    """Roll, pitch, yaw (degrees, fixed x-y-z) of a quaternion: what an operator reads off a teach pendant."""
    import warnings

    from scipy.spatial.transform import Rotation

    with warnings.catch_warnings():  # at +-90 deg pitch scipy warns and sets yaw to zero: a fine answer here
        warnings.simplefilter("ignore", UserWarning)
        return [float(a) for a in Rotation.from_quat([x, y, z, w]).as_euler("xyz", degrees=True)]
