"""The arm driver in a process of its own (aubo_bridge.process.driver_host) on the real ARCS path, against the emulator.

The node talks to a child that runs the whole ArmDriver and its servo loop; the child's SDK
sessions (pyaubo_sdk, hosted again in their own processes) talk to the ARCS emulator on
loopback. What must hold there as in the node: nothing moves on an unvalidated command, a hold
supersedes the targets before it, the watchdog holds a stalled stream, a dead or hung driver
process reads as a fault at once or within ``state_stale_after``, a dead node or a dead driver
process leaves the arm stopped, and the operator's reset restarts a dead driver process without
powering the arm on again.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import children_of_a_killed_node, process_alive, wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.arbiter import ArbiterError
from aubo_bridge.backends.factory import ARCS_PARAMS, GRIPPER_PATH_PARAMS
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmMode
from aubo_bridge.model.kinematics import HOME_Q
from aubo_bridge.process.driver_host import DriverSpec, HostedDriver
from libero_workcell import ros_msgs
from libero_workcell.contract import SOURCE_POLICY, SOURCE_TELEOP
from transports.errors import BackendError

pytestmark = pytest.mark.slow
HOST = "127.0.0.1"
REPO = Path(__file__).resolve().parents[2]
MOVE_X = np.array([0.1, 0, 0, 0, 0, 0, -1.0])  # goal_delta: 5 mm per action


def spec(port: int, **arcs: object) -> DriverSpec:
    config = ArmConfig.from_mapping({"action_response": "goal_delta"})  # exact displacements
    arcs_values = {**ARCS_PARAMS, "ip": HOST, "rpc_port": port, **arcs}
    return DriverSpec(
        config=config, use_sim=False, sim_link="", arcs=arcs_values, gripper=GRIPPER_PATH_PARAMS,
        gripper_path="tool", active_source=SOURCE_POLICY,
    )  # fmt: skip


@pytest.fixture
def driver(emu: ArcsEmulator) -> Iterator[HostedDriver]:
    d = HostedDriver(spec(emu.port))
    d.start()
    yield d
    d.close()


def count(emu: ArcsEmulator, suffix: str) -> int:
    return sum(n for m, n in emu.state()["counts"].items() if m.endswith(suffix))


def stream(d: HostedDriver, action: np.ndarray, n: int, hz: float = 20.0) -> list[bool]:
    """``n`` actions as the policy, started for them (a turn of their own: docs/operator.md)."""
    accepted, turn = [], ros_msgs.new_turn()
    for _ in range(n):
        accepted.append(d.submit_action(action, SOURCE_POLICY, turn).accepted)
        time.sleep(1.0 / hz)
    return accepted


def enabled(d: HostedDriver) -> None:
    ok, message = d.enable()
    assert ok, message


def still(emu: ArcsEmulator, seconds: float = 0.2) -> bool:
    q = emu.q()
    time.sleep(seconds)
    return bool(np.allclose(emu.q(), q, atol=1e-9))


def test_the_driver_runs_in_its_own_process_and_moves_the_arm_by_the_action(
    emu: ArcsEmulator, driver: HostedDriver
) -> None:
    pids = driver.pids
    assert pids["driver"] not in (None, os.getpid())
    assert {"servo", "state", "tool"} <= set(pids) and len(set(pids.values())) == 4  # each its own process
    assert driver.enable()[0] and driver.mode is ArmMode.ENABLED
    x0 = driver.status().tcp_pos[0]
    emu.servo_arrivals()
    assert all(stream(driver, MOVE_X, 10))
    assert wait_for(lambda: abs(driver.status().tcp_pos[0] - x0 - 0.05) < 0.5e-3, 3.0), driver.status().tcp_pos
    arrivals = np.diff(emu.servo_arrivals())
    assert arrivals.size >= 40 and np.median(arrivals) == pytest.approx(0.01, abs=1e-3)  # the child's 100 Hz
    loop = driver.loop_stats()
    assert loop.alive and loop.errors == 0


def test_nothing_moves_on_a_command_the_driver_did_not_validate(emu: ArcsEmulator, driver: HostedDriver) -> None:
    enabled(driver)
    servo_before = count(emu, "servoJoint")
    for bad, why in (
        ([np.nan, 0, 0, 0, 0, 0, -1], "finite"),
        ([1.5, 0, 0, 0, 0, 0, -1], "out of range"),
        ([0.1, 0, 0], "shape"),
        ("forward", "rejected action"),
    ):
        result = driver.submit_action(bad, SOURCE_POLICY)
        assert not result.accepted and why in result.reason, (bad, result.reason)
    foreign = driver.submit_action(MOVE_X, SOURCE_TELEOP)
    assert not foreign.accepted and "may not drive" in foreign.reason
    undecodable = driver.reject_message(SOURCE_POLICY, "no field 'x'")
    assert not undecodable.accepted and "no field 'x'" in undecodable.reason
    assert still(emu)
    assert np.allclose(emu.q(), HOME_Q, atol=1e-6)
    status = driver.status()
    assert status.counters["rejected_invalid"] == 5 and status.counters["rejected_source"] == 1
    assert count(emu, "servoJoint") >= servo_before  # holding still is a stream of the same target


def test_a_stop_supersedes_the_targets_before_it_and_the_watchdog_holds(
    emu: ArcsEmulator, driver: HostedDriver
) -> None:
    enabled(driver)
    stream(driver, MOVE_X, 3)
    stops = count(emu, "stopJoint")
    assert driver.stop() == (True, "stopped")
    assert count(emu, "stopJoint") > stops
    assert still(emu), "a target queued before the stop moved the arm after it"
    assert not driver.submit_action(MOVE_X, SOURCE_POLICY).accepted  # disabled until enabled again

    enabled(driver)
    stream(driver, MOVE_X, 3)  # then nothing: the child's watchdog, not the node, holds

    def held() -> bool:
        status = driver.status()
        return status.mode is ArmMode.HOLDING and status.counters.get("watchdog_holds", 0) >= 1

    assert wait_for(held, 2.0)
    assert still(emu)


def test_source_switches_go_through_the_driver(driver: HostedDriver) -> None:
    driver.select_source(SOURCE_TELEOP)
    assert driver.active_source == SOURCE_TELEOP
    with pytest.raises(ArbiterError, match="joystick"):
        driver.select_source("joystick")
    assert driver.active_source == SOURCE_TELEOP


def test_a_killed_driver_process_is_a_fault_at_once_the_arm_stops_and_reset_restarts_it(
    emu: ArcsEmulator, driver: HostedDriver
) -> None:
    enabled(driver)
    stream(driver, MOVE_X, 2)
    sdk = [driver.pids[k] for k in ("servo", "state", "tool")]
    stops, powerons = count(emu, "stopJoint"), count(emu, "poweron")
    os.kill(driver.pid, signal.SIGKILL)
    assert wait_for(lambda: driver.mode is ArmMode.FAULT, 2.0)
    status = driver.status()
    assert "arm-driver process exited" in status.fault and not status.hold_confirmed
    assert not driver.loop_stats().alive
    assert not driver.submit_action(MOVE_X, SOURCE_POLICY).accepted
    assert not driver.enable()[0]
    assert wait_for(lambda: not any(process_alive(p) for p in sdk), 10.0), "the SDK processes outlived their driver"
    assert count(emu, "stopJoint") > stops and emu.state()["servo_mode"] == 0  # they held the arm as they exited
    assert still(emu)

    ok, message = driver.reset_fault()
    assert ok, message
    assert driver.mode is ArmMode.DISABLED and driver.pid not in (None, *sdk)
    assert count(emu, "poweron") == powerons  # re-attached, not powered on again
    enabled(driver)
    assert all(stream(driver, MOVE_X, 2))


def test_a_hung_driver_process_goes_stale_and_refuses_within_its_deadline(
    emu: ArcsEmulator, driver: HostedDriver
) -> None:
    enabled(driver)
    os.kill(driver.pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: driver.mode is ArmMode.FAULT, 2.0)
        assert "no state from the arm-driver process" in driver.status().fault
        t0 = time.monotonic()
        result = driver.submit_action(MOVE_X, SOURCE_POLICY)
        assert not result.accepted and "gave no answer" in result.reason
        assert time.monotonic() - t0 < 2.0
    finally:
        os.kill(driver.pid, signal.SIGCONT)


def test_start_up_errors_keep_their_text(emu: ArcsEmulator) -> None:
    emu.reject_logins()
    d = HostedDriver(spec(emu.port, connect_timeout=1.0))
    with pytest.raises(BackendError, match="login"):
        d.start()
    assert d.pid is None or not process_alive(d.pid)


_ORPHAN = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import numpy as np
    sys.path.insert(0, "tests")
    from test_driver_host import MOVE_X, enabled, spec
    from aubo_bridge.process.driver_host import HostedDriver
    d = HostedDriver(spec(int(sys.argv[1])))
    d.start()
    enabled(d)
    for _ in range(3):
        d.submit_action(MOVE_X, "policy")
        time.sleep(0.05)
    print(json.dumps(d.pids), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_vanished_node_leaves_the_arm_stopped_and_every_child_gone(emu: ArcsEmulator) -> None:
    children = children_of_a_killed_node(_ORPHAN, str(emu.port))
    assert wait_for(lambda: not any(process_alive(p) for p in children), 10.0), "the driver outlived its node"
    assert count(emu, "stopJoint") >= 1 and emu.state()["servo_mode"] == 0
    assert still(emu), "the arm kept moving after its node vanished"



def test_a_silent_rtde_controller_stops_the_start_with_the_reason_and_leaves_no_process(emu: ArcsEmulator) -> None:
    emu.rtde_no_greeting()
    d = HostedDriver(spec(emu.port, state_source="rtde", rtde_port=emu.rtde_port, connect_timeout=0.5))
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="sent no greeting"):
        d.start()
    assert time.monotonic() - t0 < 15.0  # never the SDK's endless connect()
    assert d.pid is None or not process_alive(d.pid)
    assert count(emu, "servoJoint") == 0


def test_the_driver_process_reads_the_rtde_stream_at_its_rate(emu: ArcsEmulator) -> None:
    d = HostedDriver(spec(emu.port, state_source="rtde", rtde_port=emu.rtde_port))
    d.start()
    try:
        def pushed() -> int:
            return sum(emu.rtde_state()["pushed"].values())

        n0, p0 = d.state_stats()["updates"], pushed()
        time.sleep(1.0)
        n1, p1 = d.state_stats()["updates"], pushed()
        assert p1 - p0 > 300  # the emulator's stream at (nearly) the 500 Hz asked
        assert n1 - n0 >= 0.9 * (p1 - p0)  # every frame is passed on to the driver, not one per poll period
        enabled(d)
        emu.protective_stop()  # the modes come by RTDE: the driver faults within frames
        assert wait_for(lambda: "ProtectiveStop" in (d.status().fault or ""), 0.5), d.status()
    finally:
        d.close()


def test_a_killed_servo_process_is_a_fault_and_the_state_session_stops_the_arm(
    emu: ArcsEmulator, driver: HostedDriver
) -> None:
    enabled(driver)
    stream(driver, MOVE_X, 2)
    stops = count(emu, "stopJoint")
    os.kill(driver.pids["servo"], signal.SIGKILL)  # no orphan hold from it: it is simply gone
    assert wait_for(lambda: driver.mode is ArmMode.FAULT, 2.0)
    status = driver.status()
    assert "arcs-arm-servo process" in status.fault  # exited (read) or gone (the next target), whichever is first
    assert wait_for(lambda: count(emu, "stopJoint") > stops, 2.0)  # sent by the other logged-in session
    assert wait_for(lambda: driver.status().hold_confirmed, 1.0)  # the hold landed: nothing left to retry
    assert still(emu)
    ok, message = driver.reset_fault()  # restarts the servo process
    assert ok, message
    enabled(driver)
    assert all(stream(driver, MOVE_X, 2))
