"""Pick the arm and gripper backends for ``use_sim``, and the device parameters they take."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aubo_bridge.backends import arcs_config
from aubo_bridge.backends.base import ArmBackend
from aubo_bridge.config import ArmConfig
from gripper.base import GripperBackend
from gripper.ctag import modbus_backend as ctag_gripper
from gripper.ctag import tool_backend as ctag_tool_backend
from libero_workcell.node_params import prefixed
from libero_workcell.rate import CONTROL_PRIORITY

# ArcsConfig fields the arm driver owns: the controller must interpolate over the
# driver's servo period and age state like the driver does, so they are not
# separate parameters that could disagree.
_FROM_ARM_CONFIG = ("servo_hz", "state_stale_after")
ARCS_PARAMS = {k: v for k, v in arcs_config.ArcsConfig.parameter_defaults().items() if k not in _FROM_ARM_CONFIG}
GRIPPER_PARAMS = ctag_gripper.CtagConfig.parameter_defaults()
# The tool-flange gripper talks to the same controller as the arm: its session settings are the arm's.
_TOOL_FROM_ARCS = ("ip", "rpc_port", "user", "password", "connect_timeout", "request_timeout")
GRIPPER_TOOL_PARAMS = {
    k: v for k, v in ctag_tool_backend.CtagToolConfig.parameter_defaults().items() if k not in _TOOL_FROM_ARCS
}
GRIPPER_PATHS = ("modbus", "tool")  # CTAG2F90D on its own RS-485 adapter, or on the arm's tool flange
# Every device parameter under its prefix (arcs.*, gripper.*, gripper_tool.*), for declaring and documenting.
DEVICE_PARAMS = (
    prefixed("arcs", ARCS_PARAMS) | prefixed("gripper", GRIPPER_PARAMS) | prefixed("gripper_tool", GRIPPER_TOOL_PARAMS)
)


def make_backends(
    use_sim: bool,
    sim_link: str,
    arm_config: ArmConfig,
    arcs: dict[str, Any],
    gripper: dict[str, Any],
    gripper_path: str = "modbus",
    gripper_tool: dict[str, Any] | None = None,
    startup: bool = True,
    sim_clock: Callable[[], float] | None = None,
) -> tuple[ArmBackend, GripperBackend]:
    """Connected backends, or an exception that says what is wrong (the node exits with it).

    ``startup=False`` re-attaches to the arm without powering it on (a restarted driver process).
    ``sim_clock``: the simulated world is the clock (lockstep): measurements are stamped with it, and the
    world's state is never stale (it waits for the driver).
    """
    if use_sim:
        from aubo_bridge.backends.sim import SimArmBackend, SimGripperBackend
        from transports.sim_link import SimLink

        link = SimLink.attach(sim_link)
        if sim_clock is not None:
            return SimArmBackend(link, sim_clock, None), SimGripperBackend(link, sim_clock, None)
        stale = arm_config.state_stale_after
        return SimArmBackend(link, stale_after=stale), SimGripperBackend(link, stale_after=stale)
    if gripper_path not in GRIPPER_PATHS:
        raise ValueError(f"gripper_path must be one of {GRIPPER_PATHS}, got {gripper_path!r}")
    from aubo_bridge.process.arcs_hosted import HostedArcsArm, HostedToolGripper

    # The SDK holds the GIL for every RPC: each SDK device runs in a process of its own (sdk_host).
    arm_values = {**arcs, **{k: getattr(arm_config, k) for k in _FROM_ARM_CONFIG}}
    arm = HostedArcsArm(arcs_config.ArcsConfig.from_mapping(arm_values), priority=CONTROL_PRIORITY)
    arm.connect(startup=startup)
    try:
        grip: GripperBackend
        if gripper_path == "tool":
            tool = {**(gripper_tool or {}), **{k: arcs[k] for k in _TOOL_FROM_ARCS}}
            hosted = HostedToolGripper(ctag_tool_backend.CtagToolConfig.from_mapping(tool))
            hosted.connect()
            grip = hosted
        else:
            grip = ctag_gripper.CtagGripperBackend(ctag_gripper.CtagConfig.from_mapping(gripper))
    except BaseException:
        arm.close()
        raise
    return arm, grip
