"""The arm's faults carry a code and what to do (issue 35, item 8), against the ARCS emulator through the real
pyaubo_sdk: a controller that answers servoJoint later than `arcs.request_timeout` makes the SDK raise `RPC
request timeout.`, and the arm driver latches `servo command refused: ARCS <ip:port>: RPC request timeout.`.
That text showed in `workcell status` with no code and no recovery; it is ARM-RPC now, on the arm in this
process and on the arm in its SDK processes (what the node runs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from arcs_rigs import HOST, connected_arm
from conftest import wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.process.arcs_hosted import HostedArcsArm
from gripper.base import GripperMeasurement
from libero_workcell import faults
from libero_workcell.contract import SOURCE_POLICY
from workcell.operator_cli import format_status


class NoGripper:
    def read(self) -> GripperMeasurement:
        return GripperMeasurement(time.monotonic(), 0.0, None)

    def command(self, coord: float) -> None:
        pass

    def acknowledge_fault(self) -> None:
        pass

    def close(self) -> None:
        pass


def arm_backend(emu: ArcsEmulator, hosted: bool) -> Any:
    if not hosted:
        return connected_arm(emu)
    arm = HostedArcsArm(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port}))
    arm.connect(startup=True)
    return arm


@pytest.fixture(params=[False, True], ids=["in process", "in its SDK processes"])
def driver(request: pytest.FixtureRequest, emu: ArcsEmulator) -> Iterator[ArmDriver]:
    """The arm driver on the ARCS arm, its servo loop ticking on a thread as the node's does."""
    backend = arm_backend(emu, request.param)
    drv = ArmDriver(ArmConfig(servo_hz=100.0, action_response="goal_delta"), backend, NoGripper(),
                    active_source=SOURCE_POLICY)  # fmt: skip
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            drv.tick()
            stop.wait(drv.config.servo_period)

    loop = threading.Thread(target=run, daemon=True)
    loop.start()
    yield drv
    stop.set()
    loop.join(timeout=5.0)
    backend.close()


def test_an_rpc_the_controller_answers_too_late_is_a_fault_with_its_code_and_recovery(
    emu: ArcsEmulator, driver: ArmDriver
) -> None:
    assert driver.enable()[0]
    assert driver.submit_action(np.array([0.2, 0, 0, 0, 0, 0, -1.0]), SOURCE_POLICY).accepted
    emu.slow_replies(0.5, method="servoJoint", jitter=False)  # past the 0.1 s request timeout, every time
    assert wait_for(lambda: driver.mode is ArmMode.FAULT, 10.0), driver.status()
    fault = driver.status().fault or ""
    assert fault.startswith("servo command refused: ARCS ") and fault.endswith("RPC request timeout."), fault
    code = faults.classify(fault, (faults.ARM, faults.GRIPPER))
    assert code is not None and code.code == "ARM-RPC", fault
    assert "arcs.request_timeout" in code.meaning and code.recovery.endswith(".")
    # as `workcell status` shows it: the code beside the fault, and what to do
    text = format_status({"arm": {"mode": "fault", "fault": fault}, "source": SOURCE_POLICY}, 42)
    assert f"fault {fault} [ARM-RPC]" in text
    assert f"ARM-RPC: {code.recovery}" in text.split("what to do:\n")[1]
    emu.slow_replies(0.0, method="servoJoint")
