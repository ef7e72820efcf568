"""Arm bridge configuration: every limit the driver enforces, validated once.

Defaults come from the contract, the workcell layout and the AUBO-i5H
description; the node fills this from ROS parameters and a bad value fails
at start-up with a message that names it, never later while moving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_VELOCITY_LIMITS, TOOL_OFFSET
from aubo_bridge.model.kinematics import HOME_Q
from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SIM_SERVO_HZ_DEFAULT, WATCHDOG_PERIODS_DEFAULT
from libero_workcell.layout import WORKSPACE_MAX, WORKSPACE_MIN


class ConfigError(ValueError):
    pass


# The allowed range of every scalar limit, checked at start-up: (low, high, unit); low is
# exclusive, high inclusive. docs/interfaces.md lists the same ranges (a test compares them).
RANGES: dict[str, tuple[float, float, str]] = {
    "control_hz": (0.0, 500.0, "Hz"),
    "servo_hz": (0.0, 1000.0, "Hz"),
    "watchdog_timeout": (0.0, 1.0, "s"),
    "max_tcp_speed": (0.0, 2.0, "m/s"),  # full-scale goal-delta actions at 20 Hz ask for 1 m/s
    "max_tcp_rot_speed": (0.0, 12.0, "rad/s"),  # three wrist joints at their 4.136 rad/s limit
    "joint_speed_fraction": (0.0, 1.0, ""),
    "max_tracking_error": (0.0, 0.3, "m"),
    "state_stale_after": (0.0, 5.0, "s"),
    "max_following_error": (0.0, 1.0, "rad"),
    "ik_pos_tol": (0.0, 1e-3, "m"),  # IK accepting more than a millimetre of error is not IK
    "ik_rot_tol": (0.0, 1e-2, "rad"),
}
# What an action means (docs/interfaces.md, "Action response"):
#   libero     - robosuite OSC_POSE's response (LIBERO's simulator): the goal is the reference pose
#                + the scaled delta, tracked by robosuite's law on the Panda; ~1/4 of the offset per step.
#   goal_delta - the goal moves by the scaled delta and is reached within the control period.
RESPONSE_LIBERO: Final = "libero"
RESPONSE_GOAL_DELTA: Final = "goal_delta"
ACTION_RESPONSES: Final = (RESPONSE_LIBERO, RESPONSE_GOAL_DELTA)
WORKSPACE_BOUNDS: Final = (np.array([-1.5, -1.5, -1.0]), np.array([1.5, 1.5, 1.5]))  # m, base frame
MAX_TOOL_OFFSET: Final = 0.5  # m, flange to grip_site


def check_range(name: str, value: Any, low: float, high: float, unit: str) -> None:
    """Raise a ConfigError naming ``name`` and its range unless low < value <= high."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and low < value <= high
    if not ok:  # NaN fails the comparison too
        unit_text = f" {unit}" if unit else ""
        raise ConfigError(f"{name} must be in ({low:g}, {high:g}]{unit_text}, got {value!r}")


def _arr(values: Any, n: int, name: str) -> np.ndarray:
    a = np.asarray(values, dtype=float)
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ConfigError(f"{name} must be {n} finite numbers, got {values!r}")
    return a


@dataclass(frozen=True)
class ArmConfig(MappedConfig):
    error = ConfigError
    label = "arm"

    control_hz: float = CONTROL_HZ_DEFAULT  # action rate the sources publish at
    servo_hz: float = SIM_SERVO_HZ_DEFAULT  # servo-target rate sent to the arm
    watchdog_timeout: float = WATCHDOG_PERIODS_DEFAULT / CONTROL_HZ_DEFAULT  # s without an action -> hold
    workspace_min: np.ndarray = field(default_factory=lambda: WORKSPACE_MIN.copy())  # m, TCP goal box
    workspace_max: np.ndarray = field(default_factory=lambda: WORKSPACE_MAX.copy())
    max_tcp_speed: float = 0.5  # m/s: every servo step (and a goal_delta step, per control period)
    max_tcp_rot_speed: float = 2.0  # rad/s
    joint_speed_fraction: float = 0.6  # of the i5H joint velocity limits, for servo targets
    # m: the goal re-anchors on the measured TCP when the arm lags it by more (windup guard).
    # Must exceed max_tcp_speed x the controller's tracking delay (AUBO servo lookahead ~0.1 s).
    max_tracking_error: float = 0.08
    tool_offset: np.ndarray = field(default_factory=lambda: TOOL_OFFSET.copy())  # flange -> grip_site
    home_q: np.ndarray = field(default_factory=lambda: HOME_Q.copy())
    home_joint_speed: float = 0.6  # rad/s, homing moves
    state_stale_after: float = 0.5  # s without fresh arm state -> fault
    max_following_error: float = 0.35  # rad between servo target and measured joints -> fault
    ik_pos_tol: float = 1e-5  # m
    ik_rot_tol: float = 1e-4  # rad
    action_response: str = RESPONSE_LIBERO  # what an action means: see ACTION_RESPONSES

    def __post_init__(self) -> None:
        if self.action_response not in ACTION_RESPONSES:
            raise ConfigError(f"action_response must be one of {list(ACTION_RESPONSES)}, got {self.action_response!r}")
        for name, (low, high, unit) in RANGES.items():
            check_range(name, getattr(self, name), low, high, unit)
        if self.servo_hz < self.control_hz:
            raise ConfigError(f"servo_hz ({self.servo_hz}) must be >= control_hz ({self.control_hz})")
        if self.watchdog_timeout < self.control_period:
            raise ConfigError(
                f"watchdog_timeout ({self.watchdog_timeout} s) must be at least one control period "
                f"({self.control_period} s): a shorter one holds the arm between every two actions"
            )
        if self.max_tracking_error <= self.max_tcp_speed * self.control_period:
            raise ConfigError(
                f"max_tracking_error ({self.max_tracking_error} m) must exceed one control step at max_tcp_speed "
                f"({self.max_tcp_speed * self.control_period:.4f} m), or every step re-anchors the goal"
            )
        if self.state_stale_after < 2 * self.servo_period:
            raise ConfigError(f"state_stale_after ({self.state_stale_after} s) must be at least two servo periods")
        # Homing goes through the same per-tick joint clamp; a faster setting would be a lie.
        slowest = float(np.min(self.max_joint_speed))
        check_range("home_joint_speed", self.home_joint_speed, 0.0, round(slowest, 3), "rad/s (the joint clamp)")
        for name, n in (("workspace_min", 3), ("workspace_max", 3), ("tool_offset", 3), ("home_q", 6)):
            object.__setattr__(self, name, _arr(getattr(self, name), n, name))
        for name in ("workspace_min", "workspace_max"):
            box = getattr(self, name)
            if np.any(box < WORKSPACE_BOUNDS[0]) or np.any(box > WORKSPACE_BOUNDS[1]):
                raise ConfigError(
                    f"{name} must lie within {WORKSPACE_BOUNDS[0].tolist()} .. {WORKSPACE_BOUNDS[1].tolist()} m "
                    f"(beyond the i5H's reach), got {box.tolist()}"
                )
        if np.any(self.workspace_min >= self.workspace_max):
            raise ConfigError(f"workspace_min {self.workspace_min} must be below workspace_max {self.workspace_max}")
        if np.linalg.norm(self.tool_offset) > MAX_TOOL_OFFSET:
            raise ConfigError(f"tool_offset must be at most {MAX_TOOL_OFFSET} m long, got {self.tool_offset.tolist()}")
        if np.any(self.home_q < JOINT_LIMITS[:, 0]) or np.any(self.home_q > JOINT_LIMITS[:, 1]):
            raise ConfigError(f"home_q {self.home_q} is outside the joint limits")

    @property
    def control_period(self) -> float:
        return 1.0 / self.control_hz

    @property
    def servo_period(self) -> float:
        return 1.0 / self.servo_hz

    @property
    def max_joint_speed(self) -> np.ndarray:
        return JOINT_VELOCITY_LIMITS * self.joint_speed_fraction
