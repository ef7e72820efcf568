"""The ARCS SDK hosted in a child process (transports.process_host.host / arcs_hosted) against the emulator.

What the node relies on: the SDK never holds the node's GIL, every call has a deadline,
a child that dies or hangs reads as a fault at once or within ``state_stale_after`` and
never as a frozen good state, the operator's reset restarts a dead child, and a child
whose node vanished stops the arm and logs out by itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import children_of_a_killed_node, process_alive, wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.model.kinematics import HOME_Q
from aubo_bridge.process.arcs_hosted import HostedArcsArm
from transports.errors import BackendError

pytestmark = pytest.mark.slow
HOST = "127.0.0.1"
CTAG_ENABLE_REGISTER = 0x0100  # HARDWARE.md (CTAG2F90D map): a second write would re-run the init stroke
REPO = Path(__file__).resolve().parents[2]


def hosted(emu: ArcsEmulator, **kw: object) -> HostedArcsArm:
    arm = HostedArcsArm(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port, **kw}))
    arm.connect()
    return arm


@pytest.fixture
def arm(emu: ArcsEmulator) -> Iterator[HostedArcsArm]:
    a = hosted(emu)
    yield a
    a.close()


def test_runs_in_its_own_process_and_streams(emu: ArcsEmulator, arm: HostedArcsArm) -> None:
    pids = set(arm.pids.values())  # a servo session and a state session, each its own process
    assert len(pids) == 2 and None not in pids and os.getpid() not in pids
    assert arm.read().ready and arm.read().fault is None
    target = HOME_Q + 0.05
    for _ in range(30):
        arm.servo(target)
        time.sleep(0.01)
    assert wait_for(lambda: np.allclose(emu.q(), target, atol=1e-6), 3.0), emu.q()
    assert wait_for(lambda: np.allclose(arm.read().q, target, atol=1e-6), 3.0)  # state pushed back
    assert arm.ping() > 0


def test_start_up_errors_keep_their_text(emu: ArcsEmulator) -> None:
    emu.reject_logins()
    with pytest.raises(BackendError, match="rejected"):
        hosted(emu, request_timeout=1.0)  # a loaded CI machine must not turn the reply into a timeout
    with pytest.raises(BackendError, match="not configured"):
        HostedArcsArm(ArcsConfig()).connect()


def servo_error(arm: HostedArcsArm, q: np.ndarray, ticks: int = 100) -> BackendError | None:
    """Stream ``q`` at 100 Hz until servo() raises (a refused target surfaces at a later tick)."""
    for _ in range(ticks):
        try:
            arm.servo(q)
        except BackendError as exc:
            return exc
        time.sleep(0.01)
    return None


def test_device_refusal_reaches_the_node_as_the_same_error(emu: ArcsEmulator, arm: HostedArcsArm) -> None:
    emu.protective_stop()
    assert wait_for(lambda: arm.read().fault == "safety mode ProtectiveStop", 3.0), arm.read()
    assert not arm.read().ready
    error = servo_error(arm, HOME_Q, ticks=3)  # the target is handed over; its refusal comes one tick later
    assert error is not None and "bad state" in str(error), error
    with pytest.raises(BackendError, match="remove its cause"):
        arm.acknowledge_fault()
    emu.clear_cause()
    arm.acknowledge_fault()
    assert arm.read().fault is None and arm.read().ready  # the reset's outcome is visible at once


def test_a_hold_supersedes_refusals_of_earlier_targets(emu: ArcsEmulator, arm: HostedArcsArm) -> None:
    emu.protective_stop()
    assert wait_for(lambda: not arm.read().ready, 3.0)
    with contextlib.suppress(BackendError):  # refused in the child (bad state), said at once or with the next call
        arm.servo(HOME_Q)
    arm.hold()  # ... but the hold comes after it and supersedes it
    emu.clear_cause()
    arm.acknowledge_fault()
    assert servo_error(arm, HOME_Q + 0.01, ticks=20) is None  # a fresh stream starts clean
    assert wait_for(lambda: np.allclose(emu.q(), HOME_Q + 0.01, atol=1e-6), 3.0)


def _spin_rate_during(call: Callable[[], object]) -> tuple[float, float]:
    """Iterations/s of a pure-Python loop on another thread: with nothing else running, then during ``call``."""
    count, stop = [0], threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    rates = []
    for fn in (lambda: time.sleep(0.3), call):
        n0, t0 = count[0], time.monotonic()
        fn()
        rates.append((count[0] - n0) / (time.monotonic() - t0))
    stop.set()
    thread.join()
    return rates[0], rates[1]


def test_a_slow_controller_does_not_freeze_the_node_process(emu: ArcsEmulator) -> None:
    arm = hosted(emu, request_timeout=1.0, state_stale_after=3.0)
    try:
        emu.slow_replies(0.3)  # in-process, pyaubo_sdk would keep this process's GIL for each reply
        rtt: list[float] = []
        free, during = _spin_rate_during(lambda: rtt.append(arm.ping()))  # a call that waits for its reply
        emu.slow_replies(0.0)
    finally:
        arm.close()
    assert rtt[0] >= 0.25  # the node really waited on the slow controller ...
    assert during > 0.25 * free, (free, during)  # ... and its other threads ran meanwhile


@pytest.mark.parametrize("which", ["servo", "state"])
def test_a_killed_child_is_a_fault_at_once_and_reset_restarts_it(
    emu: ArcsEmulator, arm: HostedArcsArm, which: str
) -> None:
    first = arm.pids[which]
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: arm.read().fault is not None, 2.0)
    assert f"arcs-arm-{which} process exited" in arm.read().fault and not arm.read().ready
    if which == "servo":
        with pytest.raises(BackendError, match="exited"):
            arm.servo(HOME_Q)
    logins = emu.state()["counts"]["__login__"]
    arm.acknowledge_fault()
    assert arm.pids[which] != first and arm.read().fault is None and arm.read().ready
    assert emu.state()["counts"]["__login__"] == logins + 1  # only the dead one logged in again
    assert servo_error(arm, HOME_Q + 0.01, ticks=20) is None  # streams again (after the driver re-enables)
    assert wait_for(lambda: np.allclose(emu.q(), HOME_Q + 0.01, atol=1e-6), 3.0)


def test_a_hung_state_process_goes_stale(emu: ArcsEmulator, arm: HostedArcsArm) -> None:
    pid = arm.pids["state"]
    os.kill(pid, signal.SIGSTOP)
    try:
        assert wait_for(lambda: arm.read().fault is not None, 2.0)
        assert "no state from the arcs-arm-state process" in arm.read().fault and not arm.read().ready
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_for(lambda: arm.read().fault is None, 2.0), arm.read()


def test_a_hung_servo_process_fails_the_stream_and_late_replies_are_dropped(
    emu: ArcsEmulator, arm: HostedArcsArm
) -> None:
    pid = arm.pids["servo"]
    os.kill(pid, signal.SIGSTOP)
    try:
        error = servo_error(arm, HOME_Q + 0.01)
        assert error is not None and "no answer to servo" in str(error), error
        with pytest.raises(BackendError, match="no answer to hold"):
            arm.hold()
    finally:
        os.kill(pid, signal.SIGCONT)
    arm.hold()  # the late answers to the timed-out calls are skipped, not taken for this one
    assert arm.ping() > 0


def test_a_terminated_servo_process_stops_the_arm_before_it_exits(emu: ArcsEmulator, arm: HostedArcsArm) -> None:
    arm.servo(arm.read().q + 1.0)  # a far target: the arm is moving when SIGTERM arrives
    time.sleep(0.05)
    os.kill(arm.pids["servo"], signal.SIGTERM)
    assert wait_for(lambda: arm.read().fault is not None, 5.0)
    assert "arcs-arm-servo process exited" in arm.read().fault
    stops = sum(n for m, n in emu.state()["counts"].items() if m.endswith("stopJoint"))
    assert stops >= 1 and emu.state()["servo_mode"] == 0
    q = emu.q()
    assert np.max(np.abs(q - HOME_Q)) < 0.9
    time.sleep(0.2)
    assert np.allclose(emu.q(), q), "the arm kept moving"


_ORPHAN = textwrap.dedent(
    """
    import json, os, signal, sys, time
    import numpy as np
    from aubo_bridge.backends.arcs_config import ArcsConfig
    from aubo_bridge.process.arcs_hosted import HostedArcsArm
    arm = HostedArcsArm(ArcsConfig(ip="127.0.0.1", rpc_port=int(sys.argv[1])))
    arm.connect()
    arm.servo(arm.read().q + 1.0)  # a far target: the arm is still moving when this process dies
    print(json.dumps(arm.pids), flush=True)
    time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def test_a_vanished_node_leaves_the_arm_stopped_and_logged_out(emu: ArcsEmulator) -> None:
    children = children_of_a_killed_node(_ORPHAN, str(emu.port))
    assert wait_for(lambda: not any(process_alive(p) for p in children), 10.0), "the hosted SDK outlived its node"
    state = emu.state()
    assert sum(n for m, n in state["counts"].items() if m.endswith("stopJoint")) >= 1  # held first ...
    assert state["servo_mode"] == 0  # ... then left servo mode and logged out
    q = emu.q()
    assert np.max(np.abs(q - HOME_Q)) < 0.9, "the arm ran on to the far target"
    time.sleep(0.2)
    assert np.allclose(emu.q(), q), "the arm kept moving after its node vanished"


def test_hosted_tool_gripper_dies_to_a_fault_and_reset_restarts_it(emu: ArcsEmulator) -> None:
    from gripper.ctag.hosted import HostedToolGripper
    from gripper.ctag.tool_backend import CtagToolConfig

    gripper = HostedToolGripper(CtagToolConfig(ip=HOST, rpc_port=emu.port))
    gripper.connect()
    try:
        assert wait_for(lambda: gripper.read().fault is None, 3.0), gripper.read()
        gripper.command(1.0)
        assert wait_for(lambda: gripper.read().coord > 0.99, 5.0), gripper.read()
        first = gripper.pids["tool"]
        os.kill(first, signal.SIGKILL)
        assert wait_for(lambda: gripper.read().fault is not None, 2.0)
        assert "arcs-tool-gripper process exited" in gripper.read().fault
        with pytest.raises(BackendError, match="exited"):
            gripper.command(0.0)
        enables = sum(1 for address, _ in emu.tool()["writes"] if address == CTAG_ENABLE_REGISTER)
        assert enables >= 1  # the first start enabled it
        gripper.acknowledge_fault()
        assert gripper.pids["tool"] != first and gripper.read().fault is None
        assert gripper.read().coord > 0.99  # the reset did not move the fingers ...
        assert sum(1 for a, _ in emu.tool()["writes"] if a == CTAG_ENABLE_REGISTER) == enables  # ... nor re-enable
        gripper.command(0.0)
        assert wait_for(lambda: gripper.read().coord < 0.01, 5.0), gripper.read()
    finally:
        gripper.close()


def test_the_hosted_arm_takes_its_state_from_rtde_and_a_dead_stream_is_a_fault(emu: ArcsEmulator) -> None:
    """arcs.state_source: rtde through the node's path: the state process subscribes, the node reads."""
    a = hosted(emu, state_source="rtde", rtde_port=emu.rtde_port)
    try:
        assert wait_for(lambda: a.read().ready and a.read().fault is None, 2.0)
        target = HOME_Q + 0.03
        for _ in range(30):
            a.servo(target)
            time.sleep(0.01)
        assert wait_for(lambda: np.allclose(a.read().q, target, atol=1e-6), 3.0)  # streamed back by RTDE
        assert emu.rtde_state()["pushed"]["0"] > 100
        emu.rtde_drop()
        # named as the stream's loss, in its own words; how soon is test_arcs_rtde.py's (a realtime module): this
        # one runs beside graphs, where 2 s was once not enough (ci44)
        assert wait_for(lambda: "RTDE stream" in (a.read().fault or ""), 10.0), a.read().fault
    finally:
        a.close()
