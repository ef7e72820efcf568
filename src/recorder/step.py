"""One recorded control step: the observation, the action issued for it, and the timing that proves it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np

from libero_workcell.contract import ACTION_DIM


@dataclass(frozen=True)
class RecordedStep:
    """Observation t and the action issued after it (LIBERO's pairing).

    Times are seconds on one clock (the node's ROS clock): ``stamp`` is when the step's observation was
    taken (the robot state's stamp), ``image_stamps`` each camera frame's stamp, ``action_time`` when the
    action left. ``stale`` names the cameras whose frame was older than the recorder's limit (the last frame
    was kept, the gap is counted): recording continues through a stalled camera.
    """

    stamp: float
    ee_pos: np.ndarray  # (3,) m, base frame
    ee_ori: np.ndarray  # (3,) axis-angle, rad
    gripper: float  # the gripper coordinate, 0 open .. 1 closed
    joints: np.ndarray  # (n,) rad
    action: np.ndarray  # (7,)
    action_time: float
    images: dict[str, np.ndarray]  # image key (agentview_rgb, eye_in_hand_rgb) -> (H, W, 3) uint8
    image_stamps: dict[str, float]
    stale: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if np.asarray(self.action).shape != (ACTION_DIM,) or not np.all(np.isfinite(self.action)):
            raise ValueError(f"a recorded action must be {ACTION_DIM} finite numbers, got {self.action!r}")
        for key, img in self.images.items():
            if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
                raise ValueError(f"{key}: images are (H, W, 3) uint8, got {img.shape} {img.dtype}")
            if key not in self.image_stamps:
                raise ValueError(f"{key}: no stamp for its image")

    @property
    def action_latency(self) -> float:
        return self.action_time - self.stamp

    def frame_age(self, key: str) -> float:
        return self.stamp - self.image_stamps[key]


@dataclass(frozen=True)
class ArmReport:
    """What the arm driver did with one recorded action (its report on Topics.ACTION_RESULT): a recording
    stores what the arm did beside what it was asked, so training data never holds a refused action."""

    accepted: bool
    applied: np.ndarray | None = None  # (7,) the action the driver applied (after clipping); None if refused
    servo_tick: int | None = None  # accepted: the servo tick it took effect on


ACCEPTED_STEPS: Final = "arm_accepted_steps"  # a demo's attribute: steps whose action the arm accepted
REFUSED_STEPS: Final = "arm_refused_steps"  # ... and refused (the rest: no report came)
FAULT_DURING: Final = "arm_fault"  # a demo's attribute: the arm's first fault while it was recorded (absent: none)


def arm_counts(accepted: np.ndarray) -> dict[str, int]:
    """A demo's ``action_accepted`` (1, 0 refused, -1 no report) summed up as its two attributes."""
    accepted = np.asarray(accepted)
    return {ACCEPTED_STEPS: int(np.count_nonzero(accepted == 1)), REFUSED_STEPS: int(np.count_nonzero(accepted == 0))}
