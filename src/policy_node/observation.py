"""The openpi observation the policy node sends, built from the workcell's topics.

Keys as openpi's LIBERO client sends them: ``observation/image`` and ``observation/wrist_image`` (the camera
frame as the checkpoint was trained to see it, ``libero_workcell.image_convention.policy_image``, the same
call the training export makes; then openpi's own ``image_tools.resize_with_pad`` to 224 and uint8),
``observation/state`` and ``prompt``.

State: ``contract`` (default) is the workcell's 7-D state (TCP position, axis-angle, gripper coordinate),
what this workcell's demos and their LeRobot export hold (the seed's policy interface). ``libero`` is
LIBERO's 8-D state for a checkpoint trained on LIBERO's own data: TCP position, axis-angle, and two Panda
finger positions, made from the gripper coordinate (open 0.04 m each, closed 0; the right finger's joint is
negative), an approximation: the CTAG2F90D has no Panda fingers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from openpi_client import image_tools

from libero_workcell.contract import POLICY_IMAGE_SIZE, STATE_DIM, format_prompt
from libero_workcell.image_convention import policy_image

STATE_CONTRACT: Final = "contract"
STATE_LIBERO: Final = "libero"
STATE_FORMATS: Final = (STATE_CONTRACT, STATE_LIBERO)
PANDA_FINGER_OPEN: Final = 0.04  # m, one finger joint of robosuite's Panda gripper fully open


def state_vector(state7: np.ndarray, fmt: str) -> np.ndarray:
    """The ``observation/state`` for ``fmt``, float32."""
    s = np.asarray(state7, dtype=np.float64)
    if s.shape != (STATE_DIM,) or not np.all(np.isfinite(s)):
        raise ValueError(f"the robot state must be {STATE_DIM} finite numbers, got {state7!r}")
    if fmt == STATE_CONTRACT:
        return s.astype(np.float32)
    if fmt == STATE_LIBERO:
        finger = PANDA_FINGER_OPEN * (1.0 - float(np.clip(s[6], 0.0, 1.0)))
        return np.concatenate([s[:6], [finger, -finger]]).astype(np.float32)
    raise ValueError(f"state format must be one of {list(STATE_FORMATS)}, got {fmt!r}")


def camera_input(frame: np.ndarray, view: str, size: int = POLICY_IMAGE_SIZE) -> np.ndarray:
    """One upright camera frame as the policy gets it: its view, then openpi's resize-with-pad, uint8."""
    img = policy_image(np.asarray(frame), view)
    return image_tools.convert_to_uint8(image_tools.resize_with_pad(img, size, size))


@dataclass(frozen=True)
class Snapshot:
    """The newest inputs, each with its stamp (wall seconds): what one request is built from."""

    state7: np.ndarray
    state_stamp: float
    external: np.ndarray
    external_stamp: float
    wrist: np.ndarray
    wrist_stamp: float

    def age(self, now: float) -> float:
        """Age of the oldest part: a request is only as fresh as that."""
        return now - min(self.state_stamp, self.external_stamp, self.wrist_stamp)


# Sim lockstep only: the sim clock (ns) of the observation, so a simulated policy server that reads the world
# (sim_bridge.expert_policy) sees it at that moment; openpi's input transforms take only the keys they know.
SIM_CLOCK_KEY = "sim_clock_ns"


def openpi_observation(snap: Snapshot, view: str, state_format: str, task: str, preference: str = "") -> dict[str, Any]:
    """The request's dict (numpy arrays and a string: what msgpack-numpy sends)."""
    return {
        "observation/image": camera_input(snap.external, view),
        "observation/wrist_image": camera_input(snap.wrist, view),
        "observation/state": state_vector(snap.state7, state_format),
        "prompt": format_prompt(task, preference or None),
    }
