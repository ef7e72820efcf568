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

from dataclasses import dataclass
from typing import Final

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

    def age(self, now: float) -> float:
        """Age of the oldest part: a request is only as fresh as that."""
        return now - min(self.state_stamp, self.external_stamp, self.wrist_stamp)
