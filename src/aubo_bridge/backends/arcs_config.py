"""Settings of the real AUBO-i5H backend (ARCS controller SDK), validated once at start-up.

A bad value fails when the node starts, naming the parameter, never later while moving.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from aubo_bridge.config import ConfigError
from libero_workcell.config_base import MappedConfig

TCP_ORIENTATIONS = ("zyx_euler", "rotvec")
STATE_SOURCES = ("rpc", "rtde")  # RPC polling of the state getters, or the RTDE subscription (arcs_rtde)


@dataclass(frozen=True)
class ArcsConfig(MappedConfig):
    error = ConfigError
    label = "ARCS"

    ip: str = ""  # controller address; must be set (nothing is contacted by default)
    rpc_port: int = 30004
    user: str = "aubo"
    password: str = "123456"
    connect_timeout: float = 2.0  # s, TCP reachability probe and each reply of the log-in (transports.arcs.session)
    # s per RPC. The SDK keeps the GIL while it waits for a reply, so a slow controller freezes
    # the SDK's process (not the node: see sdk_host) for up to this long, and a servo target's
    # deadline is made of it: keep it a few servo periods, not seconds.
    request_timeout: float = 0.1
    startup_timeout: float = 30.0  # s from poweron/startup to RobotMode Running
    startup_poll_interval: float = 0.1  # s
    servo_hz: float = 100.0  # servoJoint call rate; t = 1 / servo_hz
    servo_mode: int = 1  # setServoModeSelect: 1 planned, 2 pass-through direct, 3 pass-through buffered
    servo_acc: float = 0.2  # servoJoint a, v: passed as AUBO's ROS 2 driver does (unused by ARCS)
    servo_vel: float = 0.2
    lookahead_time: float = 0.1  # s, in [0.03, 0.2]
    gain: float = 200.0  # in [100, 200]
    queue_full_retries: int = 3  # servoJoint returned 2: retries within one servo period
    state_source: str = "rpc"  # "rpc": polling the state getters; "rtde": the controller pushes it (arcs_rtde)
    rtde_port: int = 30010
    rtde_hz: float = 500.0  # RTDE frame rate asked of the controller (AUBO's ROS 2 driver: 500)
    state_hz: float = 100.0  # RPC state polling rate (background thread); under rtde, how often the link is checked
    state_stale_after: float = 0.25  # s without a successful poll -> fault
    hold_acc: float = 3.0  # rad/s^2, stopJoint deceleration
    steady_timeout: float = 1.0  # s to wait for isSteady before leaving servo mode on close
    tcp_orientation: str = "zyx_euler"  # getTcpPose rx, ry, rz: "zyx_euler" (documented) or "rotvec"

    def __post_init__(self) -> None:
        for name in (
            "connect_timeout",
            "request_timeout",
            "startup_timeout",
            "startup_poll_interval",
            "servo_hz",
            "servo_acc",
            "servo_vel",
            "state_hz",
            "rtde_hz",
            "state_stale_after",
            "hold_acc",
            "steady_timeout",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConfigError(f"{name} must be a positive number, got {value!r}")
        if not isinstance(self.ip, str):
            raise ConfigError(f"ip must be a string, got {self.ip!r}")
        if not isinstance(self.rpc_port, int) or not 0 < self.rpc_port < 65536:
            raise ConfigError(f"rpc_port must be a TCP port, got {self.rpc_port!r}")
        if self.servo_hz < 100.0:
            raise ConfigError(f"servo_hz must be >= 100 (the driver's servo rate), got {self.servo_hz}")
        if self.servo_mode not in (1, 2, 3):
            raise ConfigError(f"servo_mode must be 1, 2 or 3 (setServoModeSelect), got {self.servo_mode!r}")
        if not 0.03 <= self.lookahead_time <= 0.2:
            raise ConfigError(f"lookahead_time must be in [0.03, 0.2] s, got {self.lookahead_time}")
        if not 100.0 <= self.gain <= 200.0:
            raise ConfigError(f"gain must be in [100, 200], got {self.gain}")
        if not isinstance(self.queue_full_retries, int) or self.queue_full_retries < 0:
            raise ConfigError(f"queue_full_retries must be a non-negative integer, got {self.queue_full_retries!r}")
        if self.tcp_orientation not in TCP_ORIENTATIONS:
            raise ConfigError(f"tcp_orientation must be one of {TCP_ORIENTATIONS}, got {self.tcp_orientation!r}")
        if self.state_stale_after <= 1.0 / self.state_hz:
            raise ConfigError("state_stale_after must exceed one state poll period")
        if self.state_source not in STATE_SOURCES:
            raise ConfigError(f"state_source must be one of {STATE_SOURCES}, got {self.state_source!r}")
        if not isinstance(self.rtde_port, int) or not 0 < self.rtde_port < 65536:
            raise ConfigError(f"rtde_port must be a TCP port, got {self.rtde_port!r}")
        if self.state_source == "rtde" and self.state_stale_after <= 2.0 / self.rtde_hz:
            raise ConfigError("state_stale_after must exceed two RTDE frame periods")

    @property
    def servo_period(self) -> float:
        return 1.0 / self.servo_hz
