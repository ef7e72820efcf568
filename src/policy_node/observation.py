"""The stack's observation, as every policy protocol gets it: the newest inputs with their stamps, and the
robot state in the layout the checkpoint was trained on. The wire form is each protocol's adapter
(policy_node.clients; openpi's: policy_node.clients.openpi_ws.adapter).

State: ``contract`` (default) is the workcell's 7-D state (TCP position, axis-angle, gripper coordinate),
what this workcell's demos and their LeRobot export hold (the seed's policy interface). ``libero`` is
LIBERO's 8-D state for a checkpoint trained on LIBERO's own data: TCP position, axis-angle, and two Panda
finger positions, made from the gripper coordinate (open 0.04 m each, closed 0; the right finger's joint is
negative), an approximation: the CTAG2F90D has no Panda fingers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from libero_workcell.contract import STATE_DIM

STATE_CONTRACT: Final = "contract"
STATE_LIBERO: Final = "libero"
STATE_FORMATS: Final = (STATE_CONTRACT, STATE_LIBERO)
PANDA_FINGER_OPEN: Final = 0.04  # m, one finger joint of robosuite's Panda gripper fully open


def state_vector(state7: np.ndarray, fmt: str) -> np.ndarray:
    """The robot state in format ``fmt``, float32."""
    s = np.asarray(state7, dtype=np.float64)
    if s.shape != (STATE_DIM,) or not np.all(np.isfinite(s)):
        raise ValueError(f"the robot state must be {STATE_DIM} finite numbers, got {state7!r}")
    if fmt == STATE_CONTRACT:
        return s.astype(np.float32)
    if fmt == STATE_LIBERO:
        finger = PANDA_FINGER_OPEN * (1.0 - float(np.clip(s[6], 0.0, 1.0)))
        return np.concatenate([s[:6], [finger, -finger]]).astype(np.float32)
    raise ValueError(f"state format must be one of {list(STATE_FORMATS)}, got {fmt!r}")


@dataclass(frozen=True)
class Snapshot:
    """The newest inputs, each with its stamp (wall seconds): what one request is built from."""

    state7: np.ndarray
    state_stamp: float
    external: np.ndarray
    external_stamp: float
    wrist: np.ndarray
    wrist_stamp: float
    # each frame as the policy gets it (the protocol's transform, made when the frame arrived: FrameInput), with
    # the view it was made for; None: the adapter transforms the raw frame itself
    external_input: Any = None
    wrist_input: Any = None
    input_view: str = ""

    def exposure(self) -> float:
        """When the oldest camera frame was taken (its stamp: exposure, or the world's render time in sim)."""
        return min(self.external_stamp, self.wrist_stamp)

    def age(self, now: float) -> float:
        """Age of the oldest part: a request is only as fresh as that."""
        return now - min(self.state_stamp, self.external_stamp, self.wrist_stamp)


@dataclass(frozen=True)
class FrameInput:
    """One camera frame as it arrived (its stamp, the raw rgb) and as the policy gets it (``policy``: the
    protocol's transform for ``view``, made on arrival, off the control tick; None when the protocol has
    none). Made and stored as one: a snapshot never pairs a preprocessed frame with another frame's stamp."""

    stamp: float
    raw: np.ndarray
    policy: Any = None
    view: str = ""


def frame_input(stamp: float, raw: np.ndarray, prepare: Callable[[np.ndarray, str], Any] | None,
                view: str) -> FrameInput:  # fmt: skip
    """The frame with its policy input made now (in the image callback), if the protocol has a transform."""
    return FrameInput(stamp, raw, None if prepare is None else prepare(raw, view), view)


def snapshot_of(state7: np.ndarray, state_stamp: float, external: FrameInput, wrist: FrameInput) -> Snapshot:
    """What one request is built from: the state and the two frames, each with its own stamp."""
    view = external.view if external.view == wrist.view and external.policy is not None \
        and wrist.policy is not None else ""  # fmt: skip
    return Snapshot(state7, state_stamp, external.raw, external.stamp, wrist.raw, wrist.stamp,
                    external.policy if view else None, wrist.policy if view else None, view)  # fmt: skip


class LatestInputs:
    """The newest state and camera frames (wall clock), each stored with its stamp in one assignment under a
    lock: the image callbacks put (preprocessing there, :func:`frame_input`), the control tick takes a
    :meth:`snapshot` and only assembles."""

    def __init__(self, cameras: tuple[str, ...], prepare: Callable[[np.ndarray, str], Any] | None = None,
                 view: str = "") -> None:  # fmt: skip
        self.cameras = tuple(cameras)
        self._prepare = prepare
        self._view = view
        self._lock = threading.Lock()
        self._state: tuple[float, np.ndarray] | None = None
        self._frames: dict[str, FrameInput] = {}

    def frame(self, stamp: float, raw: np.ndarray, prepare: bool = True) -> FrameInput:
        """A frame made ready for the policy (its transform runs here, outside the lock); with ``prepare`` False
        kept raw (no step may use it soon: a request that does transforms it then, to the same bytes)."""
        return frame_input(stamp, raw, self._prepare if prepare else None, self._view)

    def put_state(self, stamp: float, state7: np.ndarray) -> None:
        with self._lock:
            self._state = (stamp, state7)

    def put_frame(self, camera: str, frame: FrameInput) -> None:
        with self._lock:
            self._frames[camera] = frame

    def snapshot(self) -> Snapshot | None:
        """The newest of everything, or None until there is a state and a frame of every camera."""
        with self._lock:
            state, frames = self._state, dict(self._frames)
        if state is None or set(frames) != set(self.cameras):
            return None
        external, wrist = self.cameras
        return snapshot_of(state[1], state[0], frames[external], frames[wrist])
