"""Arm bridge configuration: every limit the driver enforces, validated once.

Defaults come from the contract, the workcell layout and the AUBO-i5H
description; the node fills this from ROS parameters and a bad value fails
at start-up with a message that names it, never later while moving.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aubo_bridge.description import JOINT_LIMITS, JOINT_VELOCITY_LIMITS, TOOL_OFFSET
from aubo_bridge.kinematics import HOME_Q
from libero_workcell.config_base import MappedConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SIM_SERVO_HZ_DEFAULT, WATCHDOG_PERIODS_DEFAULT
from libero_workcell.layout import WORKSPACE_MAX, WORKSPACE_MIN


class ConfigError(ValueError):
    pass


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
    max_tcp_speed: float = 0.5  # m/s: goal translation per step is clipped to this / control_hz
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

    def __post_init__(self) -> None:
        for name in (
            "control_hz",
            "servo_hz",
            "watchdog_timeout",
            "max_tcp_speed",
            "max_tcp_rot_speed",
            "joint_speed_fraction",
            "max_tracking_error",
            "home_joint_speed",
            "state_stale_after",
        ):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and np.isfinite(value) and value > 0):
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if self.servo_hz < self.control_hz:
            raise ConfigError(f"servo_hz ({self.servo_hz}) must be >= control_hz ({self.control_hz})")
        if self.joint_speed_fraction > 1.0:
            raise ConfigError("joint_speed_fraction must be <= 1 (a fraction of the arm's joint velocity limits)")
        for name, n in (("workspace_min", 3), ("workspace_max", 3), ("tool_offset", 3), ("home_q", 6)):
            object.__setattr__(self, name, _arr(getattr(self, name), n, name))
        if np.any(self.workspace_min >= self.workspace_max):
            raise ConfigError(f"workspace_min {self.workspace_min} must be below workspace_max {self.workspace_max}")
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
