"""Where controller samples come from, behind one interface: the PICO headset or a scripted file.

:class:`HeadsetSource` reads the right controller through ``xrobotoolkit-sdk`` (its PC service must run
with the headset connected). :class:`ScriptedSource` plays a session file of controller keyframes and
button events, so the whole collection flow runs on the simulated workcell and in tests without a headset.
A source returns None when it has nothing to give (failed, closed, finished): the core then holds the arm.

Session file (JSON)::

    {"format": "libero_workcell.teleop_session/1", "description": "...",
     "keyframes": [{"t": 0.0, "pose": [x, y, z, qx, qy, qz, qw], "grip": 0.0, "trigger": 0.0}, ...],
     "buttons": [{"t": 0.5, "button": "A"}, ...],
     "task": {...}}   (optional: the task configuration a scripted demonstration was made for)

Poses are in the headset frame (as the SDK gives them), times in seconds from the session's start;
between keyframes position and grip/trigger are interpolated linearly and the rotation by slerp; a
button event presses it for 0.15 s (a loop sampling at 20 Hz with jitter sees it).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Final, Protocol

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from teleop_pico.mapping import ControllerSample

SESSION_FORMAT: Final = "libero_workcell.teleop_session/1"
BUTTON_PRESS: Final = 0.15  # s a scripted button stays pressed (three control periods at 20 Hz, as a finger would)
log = logging.getLogger(__name__)


class SessionFileError(ValueError):
    pass


class ControllerSource(Protocol):
    def read(self) -> ControllerSample | None: ...

    def close(self) -> None: ...


class HeadsetSource:
    """The right controller through ``xrobotoolkit_sdk`` (``sdk``: that module, or one with its API)."""

    def __init__(self, sdk: ModuleType | None = None) -> None:
        if sdk is None:
            import xrobotoolkit_sdk as sdk  # the real one: only when a headset is asked for
        self._sdk = sdk
        self._open = False
        self._sdk.init()
        self._open = True

    def read(self) -> ControllerSample | None:
        if not self._open:
            return None
        sdk = self._sdk
        try:
            stamp = int(sdk.get_time_stamp_ns())  # first: the data read after it is at least this fresh
            pose = tuple(float(v) for v in sdk.get_right_controller_pose())
            return ControllerSample(
                stamp, pose, float(sdk.get_right_trigger()), float(sdk.get_right_grip()),
                bool(sdk.get_A_button()), bool(sdk.get_B_button()),
            )  # fmt: skip
        except Exception as exc:  # whatever the binding raises, the arm holds
            log.warning("headset read failed: %s", exc)
            return None

    def close(self) -> None:
        if self._open:
            self._open = False
            self._sdk.close()


@dataclass(frozen=True)
class SessionScript:
    times: np.ndarray  # (n,) s, increasing
    pos: np.ndarray  # (n, 3) headset frame
    quat: np.ndarray  # (n, 4) x, y, z, w
    grip: np.ndarray  # (n,)
    trigger: np.ndarray  # (n,)
    buttons: tuple[tuple[float, str], ...]  # (t, "A" | "B")
    description: str = ""
    task: dict | None = None  # the task configuration the session was made for (a scripted demo's world)

    @property
    def duration(self) -> float:
        return float(self.times[-1])

    def to_json(self) -> dict:
        return {
            "format": SESSION_FORMAT,
            "description": self.description,
            "keyframes": [
                {"t": float(t), "pose": [*map(float, p), *map(float, q)], "grip": float(g), "trigger": float(tr)}
                for t, p, q, g, tr in zip(self.times, self.pos, self.quat, self.grip, self.trigger, strict=True)
            ],
            "buttons": [{"t": float(t), "button": b} for t, b in self.buttons],
            **({"task": self.task} if self.task is not None else {}),
        }


def load_session(path: str | Path) -> SessionScript:
    """A session file, checked: a clear error naming what is wrong, never a half-read session."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SessionFileError(f"{path}: cannot read a teleop session: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != SESSION_FORMAT:
        raise SessionFileError(f"{path}: not a teleop session (format must be {SESSION_FORMAT!r})")
    frames = raw.get("keyframes")
    if not isinstance(frames, list) or len(frames) < 2:
        raise SessionFileError(f"{path}: a session needs at least 2 keyframes")
    try:
        times = np.array([float(f["t"]) for f in frames])
        pose_rows = [[float(v) for v in f["pose"]] for f in frames]
        if any(len(row) != 7 for row in pose_rows):
            raise SessionFileError(f"{path}: every keyframe pose must be 7 finite numbers (x y z qx qy qz qw)")
        poses = np.array(pose_rows)
        grip = np.array([float(f.get("grip", 0.0)) for f in frames])
        trigger = np.array([float(f.get("trigger", 0.0)) for f in frames])
        buttons = tuple(sorted((float(b["t"]), str(b["button"])) for b in raw.get("buttons", [])))
    except (KeyError, TypeError, ValueError) as exc:
        raise SessionFileError(f"{path}: malformed keyframe or button: {exc}") from None
    if poses.shape != (len(frames), 7) or not np.all(np.isfinite(poses)):
        raise SessionFileError(f"{path}: every keyframe pose must be 7 finite numbers (x y z qx qy qz qw)")
    if np.any(np.diff(times) <= 0) or times[0] < 0:
        raise SessionFileError(f"{path}: keyframe times must start at >= 0 and increase")
    if np.any(np.abs(np.linalg.norm(poses[:, 3:], axis=1) - 1.0) > 1e-3):
        raise SessionFileError(f"{path}: every keyframe quaternion must have unit norm")
    for name, v in (("grip", grip), ("trigger", trigger)):
        if np.any((v < 0) | (v > 1)):
            raise SessionFileError(f"{path}: {name} must be in [0, 1]")
    if any(b not in ("A", "B") for _, b in buttons):
        raise SessionFileError(f"{path}: buttons must be 'A' or 'B'")
    task = raw.get("task")
    if task is not None and not isinstance(task, dict):
        raise SessionFileError(f"{path}: 'task' must be an object (a task configuration)")
    return SessionScript(
        times, poses[:, :3], poses[:, 3:], grip, trigger, buttons, str(raw.get("description", "")), task
    )


class ScriptedSource:
    """Plays a :class:`SessionScript` against ``clock`` (s, monotonic), from the first read on."""

    def __init__(self, script: SessionScript, clock: Callable[[], float] = time.monotonic) -> None:
        self.script = script
        self._clock = clock
        self._t0: float | None = None
        self._slerp = Slerp(script.times, Rotation.from_quat(script.quat))
        self._closed = False

    @property
    def finished(self) -> bool:
        return self._t0 is not None and self._clock() - self._t0 > self.script.duration

    def read(self) -> ControllerSample | None:
        if self._closed:
            return None
        now = self._clock()
        if self._t0 is None:
            self._t0 = now
        t = now - self._t0
        s = self.script
        if t > s.duration:
            return None  # the session is over: the arm holds
        pos = np.array([np.interp(t, s.times, s.pos[:, i]) for i in range(3)])
        quat = self._slerp([t]).as_quat()[0]
        down = {b for tb, b in s.buttons if tb <= t < tb + BUTTON_PRESS}
        return ControllerSample(
            round(t * 1e9), (*map(float, pos), *map(float, quat)),
            float(np.interp(t, s.times, s.trigger)), float(np.interp(t, s.times, s.grip)), "A" in down, "B" in down,
        )  # fmt: skip

    def close(self) -> None:
        self._closed = True
