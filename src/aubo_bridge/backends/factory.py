"""Pick the arm and gripper backends for ``use_sim``, and the device parameters they take.

The gripper is whichever model the registry (:mod:`gripper.registry`) has under the node's ``gripper_model``,
wired on ``gripper_path``; nothing here names a model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aubo_bridge.backends import arcs_config
from aubo_bridge.backends.base import ArmBackend
from aubo_bridge.config import ArmConfig
from gripper import registry
from gripper.base import GripperBackend
from gripper.model import TOOL_SESSION_FIELDS
from libero_workcell.node_params import prefixed
from libero_workcell.rate import CONTROL_PRIORITY

# ArcsConfig fields the arm driver owns: the controller must interpolate over the
# driver's servo period and age state like the driver does, so they are not
# separate parameters that could disagree.
_FROM_ARM_CONFIG = ("servo_hz", "state_stale_after")
ARCS_PARAMS = {k: v for k, v in arcs_config.ArcsConfig.parameter_defaults().items() if k not in _FROM_ARM_CONFIG}
# Every gripper model's parameters per path, by prefix (the CTAG2F90D's: gripper.*, gripper_tool.*).
GRIPPER_PATH_PARAMS = registry.path_parameters()
_DEFAULT_GRIPPER = registry.default_model()
GRIPPER_PARAMS = dict(_DEFAULT_GRIPPER.path("modbus").defaults)  # gripper.* (the default model on its own RS-485)
GRIPPER_TOOL_PARAMS = dict(_DEFAULT_GRIPPER.path("tool").defaults)  # gripper_tool.* (on the arm's tool flange)
# Every device parameter under its prefix (arcs.*, gripper.*, gripper_tool.*), for declaring and documenting.
DEVICE_PARAMS = prefixed("arcs", ARCS_PARAMS) | {
    name: v for prefix, defaults in GRIPPER_PATH_PARAMS.items() for name, v in prefixed(prefix, defaults).items()
}


def make_backends(
    use_sim: bool,
    sim_link: str,
    arm_config: ArmConfig,
    arcs: dict[str, Any],
    gripper: Mapping[str, dict[str, Any]],
    gripper_path: str = "modbus",
    gripper_model: str = registry.DEFAULT_MODEL,
    startup: bool = True,
    sim_clock: Callable[[], float] | None = None,
) -> tuple[ArmBackend, GripperBackend]:
    """Connected backends, or an exception that says what is wrong (the node exits with it).

    ``gripper``: the gripper parameters by prefix ({prefix: {field: value}}, as GRIPPER_PATH_PARAMS); the
    model's path takes those under its own prefix (a prefix not given: its defaults).
    ``startup=False`` re-attaches to the arm without powering it on (a restarted driver process).
    ``sim_clock``: the simulated world is the clock (lockstep): measurements are stamped with it, and the
    world's state is never stale (it waits for the driver).
    """
    model = registry.model(gripper_model)
    if use_sim:
        from aubo_bridge.backends.sim import SimArmBackend
        from gripper.sim_backend import SimGripperBackend
        from transports.sim_link import SimLink

        link = SimLink.attach(sim_link)
        if sim_clock is not None:
            return SimArmBackend(link, sim_clock, None), SimGripperBackend(link, sim_clock, None)
        stale = arm_config.state_stale_after
        return SimArmBackend(link, stale_after=stale), SimGripperBackend(link, stale_after=stale)
    path = model.path(gripper_path)
    params = dict(gripper.get(path.prefix, path.defaults))
    if gripper_path == "tool":  # the gripper's controller session is the arm's
        params |= {k: arcs[k] for k in TOOL_SESSION_FIELDS}
    from aubo_bridge.process.arcs_hosted import HostedArcsArm

    # The SDK holds the GIL for every RPC: each SDK device runs in a process of its own (sdk_host).
    arm_values = {**arcs, **{k: getattr(arm_config, k) for k in _FROM_ARM_CONFIG}}
    arm = HostedArcsArm(arcs_config.ArcsConfig.from_mapping(arm_values), priority=CONTROL_PRIORITY)
    arm.connect(startup=startup)
    try:
        grip = path.build(params)
    except BaseException:
        arm.close()
        raise
    return arm, grip
