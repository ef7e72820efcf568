"""Pick the arm and gripper backends for ``use_sim``, and the device parameters they take."""

from __future__ import annotations

from typing import Any

from aubo_bridge import arcs_config, ctag_gripper
from aubo_bridge.backend import ArmBackend, GripperBackend
from aubo_bridge.config import ArmConfig
from libero_workcell.node_params import prefixed

# ArcsConfig fields the arm driver owns: the controller must interpolate over the
# driver's servo period and age state like the driver does, so they are not
# separate parameters that could disagree.
_FROM_ARM_CONFIG = ("servo_hz", "state_stale_after")
ARCS_PARAMS = {k: v for k, v in arcs_config.parameter_defaults().items() if k not in _FROM_ARM_CONFIG}
GRIPPER_PARAMS = ctag_gripper.parameter_defaults()
# Every device parameter under its prefix (arcs.*, gripper.*), for declaring and documenting.
DEVICE_PARAMS = prefixed("arcs", ARCS_PARAMS) | prefixed("gripper", GRIPPER_PARAMS)


def make_backends(
    use_sim: bool, sim_link: str, arm_config: ArmConfig, arcs: dict[str, Any], gripper: dict[str, Any]
) -> tuple[ArmBackend, GripperBackend]:
    """Connected backends, or an exception that says what is wrong (the node exits with it)."""
    if use_sim:
        from aubo_bridge.sim_backend import SimArmBackend, SimGripperBackend
        from sim_bridge.link import SimLink

        link = SimLink.attach(sim_link)
        stale = arm_config.state_stale_after
        return SimArmBackend(link, stale_after=stale), SimGripperBackend(link, stale_after=stale)
    from aubo_bridge.arcs_backend import ArcsArmBackend

    arm_values = {**arcs, **{k: getattr(arm_config, k) for k in _FROM_ARM_CONFIG}}
    arm = ArcsArmBackend(arcs_config.ArcsConfig.from_mapping(arm_values))
    arm.connect()
    try:
        grip = ctag_gripper.CtagGripperBackend(ctag_gripper.CtagConfig.from_mapping(gripper))
    except BaseException:
        arm.close()
        raise
    return arm, grip
