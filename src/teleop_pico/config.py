"""Teleoperation settings, validated once at start-up (a bad value names itself there, not mid-run).

The node fills this from ROS parameters (``parameter_defaults()`` declares them; ``from_mapping`` refuses
unknown keys, so a typo in a launch file cannot fall back to a default without a word).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar, Final

import numpy as np

from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.tracking_law import TRACKING_GAIN

# The XRoboToolkit teleop sample's headset-to-base rotation (row-major): OpenXR's frame (x right, y up,
# -z forward) onto a ROS base frame (x forward, y left, z up). HARDWARE.md, "PICO teleoperation".
HEADSET_TO_BASE: Final = (0.0, 0.0, -1.0, -1.0, 0.0, 0.0, 0.0, 1.0, 0.0)


class TeleopConfigError(ValueError):
    pass


@dataclass(frozen=True)
class TeleopConfig(MappedConfig):
    error: ClassVar[type[ValueError]] = TeleopConfigError
    label: ClassVar[str] = "teleop"

    # Row-major rotation taking headset-frame vectors into the robot base frame (mount-specific: measure it).
    headset_to_base: tuple[float, ...] = field(default=HEADSET_TO_BASE)
    pos_scale: float = 1.0  # TCP metres per controller metre while the clutch is held
    rot_scale: float = 1.0  # TCP radians per controller radian
    clutch_engage: float = 0.9  # grip above this engages the clutch (the sample's 0.9) ...
    clutch_release: float = 0.8  # ... and below this releases it (hysteresis: a wavering grip does not chatter)
    trigger_close: float = 0.5  # trigger at or above this closes the gripper
    stale_timeout: float = 0.1  # s: a controller stream whose timestamp has not advanced this long is frozen
    max_jump: float = 0.05  # m the controller may move between two samples; more is a tracking glitch (release)
    # rad the controller may turn between two samples (10 rad/s at 20 Hz; a hand turning a part stays far below,
    # the scripted session under 0.02): more is a tracking glitch, as a flipped orientation estimate is (release)
    max_rot_jump: float = 0.5
    gain: float = TRACKING_GAIN  # k of the tracking law (libero_workcell.tracking_law)
    control_hz: float = CONTROL_HZ_DEFAULT

    def __post_init__(self) -> None:
        R = np.asarray(self.headset_to_base, float)
        if R.shape != (9,) or not np.all(np.isfinite(R)):
            raise TeleopConfigError(
                f"headset_to_base must be 9 finite numbers (row-major 3x3): {self.headset_to_base!r}"
            )
        M = R.reshape(3, 3)
        if not np.allclose(M @ M.T, np.eye(3), atol=1e-6) or abs(np.linalg.det(M) - 1.0) > 1e-6:
            raise TeleopConfigError(f"headset_to_base must be a rotation (orthonormal, det +1): {M.round(4).tolist()}")
        object.__setattr__(self, "headset_to_base", tuple(float(v) for v in R))
        for name in ("pos_scale", "rot_scale", "stale_timeout", "max_jump", "max_rot_jump", "gain", "control_hz"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
                raise TeleopConfigError(f"{name} must be a positive number, got {v!r}")
            object.__setattr__(self, name, float(v))
        for name in ("clutch_engage", "clutch_release", "trigger_close"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 < v <= 1.0:
                raise TeleopConfigError(f"{name} must be in (0, 1], got {v!r}")
        if self.clutch_release > self.clutch_engage:
            raise TeleopConfigError(
                f"clutch_release ({self.clutch_release}) must not exceed clutch_engage ({self.clutch_engage})"
            )
        if self.stale_timeout < 1.0 / self.control_hz:
            raise TeleopConfigError(
                f"stale_timeout ({self.stale_timeout} s) must be at least one control period "
                f"({1.0 / self.control_hz} s)"
            )

    @property
    def rotation(self) -> np.ndarray:
        return np.asarray(self.headset_to_base, float).reshape(3, 3)
