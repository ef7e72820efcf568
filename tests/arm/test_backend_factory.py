"""make_backends as the aubo_bridge node calls it, on the real profile against the ARCS emulator."""

from __future__ import annotations

import os

import pytest
from conftest import wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.factory import ARCS_PARAMS, GRIPPER_PATH_PARAMS, make_backends
from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import HOME_Q
from aubo_bridge.process.arcs_hosted import HostedArcsArm
from gripper.ctag.hosted import HostedToolGripper

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def emulator():
    with ArcsEmulator(q0=[float(v) for v in HOME_Q], boot_delay=0.02) as emu:
        yield emu


def _arcs(emu: ArcsEmulator) -> dict:
    return {**ARCS_PARAMS, "ip": emu.host, "rpc_port": emu.port}


def test_tool_path_gives_the_arm_and_the_tool_gripper_on_one_controller(emulator) -> None:
    arm, gripper = make_backends(
        use_sim=False,
        sim_link="",
        arm_config=ArmConfig(),
        arcs=_arcs(emulator),
        gripper=GRIPPER_PATH_PARAMS,
        gripper_path="tool",
    )
    try:
        # Each SDK device in a process of its own: the SDK never holds the node's GIL.
        assert isinstance(arm, HostedArcsArm) and isinstance(gripper, HostedToolGripper)
        assert os.getpid() not in arm.pids.values() and None not in arm.pids.values()
        assert wait_for(lambda: arm.read().ready and gripper.read().fault is None, 5.0), (arm.read(), gripper.read())
        gripper.command(1.0)
        assert wait_for(lambda: gripper.read().coord > 0.99, 5.0), gripper.read()  # no object: fully closed
    finally:
        gripper.close()
        arm.close()


@pytest.mark.parametrize(
    ("change", "refused"),
    [({"gripper_path": "bluetooth"}, "gripper_path"), ({"gripper_model": "robotiq2f85"}, "known: ctag2f90d")],
)
def test_unknown_gripper_path_or_model_is_refused_before_anything_is_contacted(emulator, change, refused) -> None:
    kwargs = {"gripper_path": "modbus", **change}
    with pytest.raises(ValueError, match=refused):
        make_backends(
            use_sim=False, sim_link="", arm_config=ArmConfig(), arcs=_arcs(emulator), gripper=GRIPPER_PATH_PARAMS,
            **kwargs,
        )  # fmt: skip
