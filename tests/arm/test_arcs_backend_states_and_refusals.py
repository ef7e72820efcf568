"""ArcsArmBackend branches the mutation run found no test pinning down (real pyaubo_sdk, ARCS emulator).

Safety classification of every controller state, the last checks before the controller, the
servo-mode bookkeeping after a refusal, the queue-full retry budget, refused holds and unlocks,
the reset paths after each kind of stop (for the session that recovers and the one that must
not), and a closed backend staying closed. docs/mutation.md lists what is left alive and why.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import numpy as np
import pytest
from arcs_rigs import connected_arm as make_backend
from conftest import wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.arcs import ArcsArmBackend, classify
from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.model.description import JOINT_LIMITS
from aubo_bridge.model.kinematics import HOME_Q
from transports.errors import BackendError

HOST = "127.0.0.1"


@pytest.fixture
def backend(emu: ArcsEmulator) -> Iterator[ArcsArmBackend]:
    b = make_backend(emu)
    yield b
    b.close()


def count(emu: ArcsEmulator, method: str) -> int:
    return sum(n for m, n in emu.state()["counts"].items() if m.endswith(method))


# ----------------------------------------------------------------- classification
@pytest.mark.parametrize(
    "mode, safety, collided, expected",
    [
        (8, 1, False, (True, None)),
        (8, 2, False, (True, None)),
        (8, 3, False, (False, None)),  # Recovery: not a fault, not ready for this stack
        (5, 1, False, (False, None)),  # Idle
        (3, 1, False, (False, None)),  # PowerOff
        (8, 1, True, (False, "collision detected (isCollisionOccurred)")),
        (8, 5, True, (False, "collision detected (isCollisionOccurred)")),
        (8, 4, False, (False, "safety mode Violation")),
        (8, 5, False, (False, "safety mode ProtectiveStop")),
        (8, 6, False, (False, "safety mode SafeguardStop")),
        (3, 7, False, (False, "safety mode SystemEmergencyStop")),
        (3, 8, False, (False, "safety mode RobotEmergencyStop")),
        (3, 9, False, (False, "safety mode Fault")),
        (10, 1, False, (False, "robot mode Error")),
        (10, 5, False, (False, "safety mode ProtectiveStop")),  # the safety stop says more than Error
        (-1, 1, False, (False, "robot mode NoController: controller has no link to the arm")),
        (0, 1, False, (False, "robot mode Disconnected: controller has no link to the arm")),
    ],
)
def test_every_controller_state_is_classified(mode: int, safety: int, collided: bool, expected) -> None:
    assert classify(mode, safety, collided) == expected


def test_read_is_stamped_by_the_backend_clock(emu: ArcsEmulator) -> None:
    clock = iter(np.arange(1000.0, 2000.0, 1.0))
    b = ArcsArmBackend(ArcsConfig(ip=HOST, rpc_port=emu.port), clock=lambda: float(next(clock)))
    b.connect()
    try:
        first, second = b.read().stamp, b.read().stamp
        assert 1000.0 <= first < second < 2000.0
    finally:
        b.close()


# ----------------------------------------------------------------- the last checks before the controller
@pytest.mark.parametrize("joint, side", [(0, 0), (3, 1)], ids=["below-lower", "above-upper"])
def test_targets_past_either_joint_limit_are_refused(emu: ArcsEmulator, backend, joint: int, side: int) -> None:
    backend.servo(HOME_Q)
    q = HOME_Q.copy()
    q[joint] = JOINT_LIMITS[joint, side] + (0.01 if side else -0.01)
    with pytest.raises(BackendError) as err:
        backend.servo(q)
    assert str(err.value) == f"refusing servo target {np.round(q, 4).tolist()}: outside the joint limits"


def test_a_target_exactly_on_a_joint_limit_is_allowed(emu: ArcsEmulator, backend) -> None:
    q = HOME_Q.copy()
    q[5] = JOINT_LIMITS[5, 1]
    backend.servo(q)  # inclusive limits: no refusal here (the arm is far from it; the emulator only moves)
    q[5] = JOINT_LIMITS[5, 0]
    backend.servo(q)


def test_servo_and_reset_on_a_closed_backend_refuse_clearly(emu: ArcsEmulator) -> None:
    b = make_backend(emu)
    b.close()
    with pytest.raises(BackendError, match=r"^ARCS backend not connected$"):
        b.servo(HOME_Q)
    with pytest.raises(BackendError, match=r"^ARCS backend not connected$"):
        b.acknowledge_fault()  # a reset never reconnects a closed backend
    assert b.read().fault == "closed"
    b.close()  # idempotent
    assert count(emu, "__login__") == 1


def test_a_refused_servo_mode_is_an_error_with_the_controller_code(emu: ArcsEmulator, backend) -> None:
    backend.servo(HOME_Q)
    backend.hold()  # servo mode must be selected again before the next target
    emu.protective_stop()  # ... which the controller refuses in a safety stop
    with pytest.raises(BackendError) as err:
        backend.servo(HOME_Q)
    assert str(err.value) == "setServoModeSelect(1) refused: -1 (bad state (robot not Running or in a safety stop))"


def test_after_not_in_servo_mode_the_next_target_selects_it_again(emu: ArcsEmulator, backend) -> None:
    backend.servo(HOME_Q)
    emu.protective_stop()  # the controller leaves servo mode by itself
    with pytest.raises(BackendError, match=r"-13 \(not in servo mode\)"):
        backend.servo(HOME_Q)
    emu.clear_cause()
    backend.acknowledge_fault()
    before = count(emu, "setServoModeSelect")
    backend.servo(HOME_Q)  # re-selects instead of streaming into -13 again
    assert count(emu, "setServoModeSelect") == before + 1
    assert emu.state()["servo_mode"] == 1


def test_queue_full_is_retried_exactly_the_configured_number_of_times(emu: ArcsEmulator) -> None:
    b = make_backend(emu, queue_full_retries=1)  # two attempts, 5 ms apart: well inside the 10 ms budget
    try:
        b.servo(HOME_Q)
        emu.queue_full(100)
        before = count(emu, "servoJoint")
        with pytest.raises(BackendError, match=r"^servoJoint queue full after 2 attempts within one servo period$"):
            b.servo(HOME_Q + 0.01)
        assert count(emu, "servoJoint") - before == 2
    finally:
        emu.queue_full(0)
        b.close()


def test_queue_full_gives_up_when_the_servo_period_is_spent(emu: ArcsEmulator) -> None:
    """Slow queue-full answers use up the period before the retries do: it must raise, not return."""
    b = make_backend(emu, queue_full_retries=10, request_timeout=0.05, state_stale_after=1.0)
    try:
        b.servo(HOME_Q)
        emu.queue_full(100)
        emu.slow_replies(0.006)
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=r"queue full after [1-3] attempts"):
            b.servo(HOME_Q + 0.01)
        assert time.monotonic() - t0 < 0.1
    finally:
        emu.slow_replies(0.0)
        emu.queue_full(0)
        b.close()


def test_a_refused_hold_raises_with_the_controller_code(emu: ArcsEmulator, backend) -> None:
    backend.servo(HOME_Q)
    emu.refuse_next("stopJoint", -1)
    with pytest.raises(BackendError) as err:
        backend.hold()
    assert str(err.value) == "stopJoint refused: -1 (bad state (robot not Running or in a safety stop))"
    backend.hold()  # the next one goes through


# ----------------------------------------------------------------- operator resets
def test_a_refused_unlock_names_the_stop_and_what_to_do(emu: ArcsEmulator, backend) -> None:
    emu.protective_stop()
    assert wait_for(lambda: backend.read().fault == "safety mode ProtectiveStop")
    with pytest.raises(BackendError) as err:
        backend.acknowledge_fault()  # the obstacle is still there
    assert str(err.value) == (
        "controller refused to unlock the ProtectiveStop stop: -1 (bad state (robot not Running or in a safety stop)); "
        "remove its cause (obstacle, safeguard input), then reset again"
    )
    emu.clear_cause()
    backend.acknowledge_fault()
    assert backend.read().fault is None


def test_a_refused_collision_unlock_says_collision(emu: ArcsEmulator, backend) -> None:
    emu.collision()
    assert wait_for(lambda: backend.read().fault == "collision detected (isCollisionOccurred)")
    with pytest.raises(BackendError, match=r"^controller refused to unlock the collision stop: -1 "):
        backend.acknowledge_fault()


def test_a_lost_link_reads_as_that_at_once(emu: ArcsEmulator, backend) -> None:
    emu.disconnect(refuse=True)
    assert wait_for(lambda: backend.read().fault is not None, 2.0)
    fault = backend.read().fault
    # the poll that failed mid-request, or the next one finding the socket gone: the link error itself
    assert fault == f"connection to ARCS controller at {HOST}:{emu.port} lost" or fault.startswith(
        "state poll failed: "
    ), fault
    emu.accept_connections()


def test_state_recovers_by_itself_when_a_slow_controller_answers_again(emu: ArcsEmulator, backend) -> None:
    """The poller backs off after failures but keeps polling: fresh state returns with no operator reset
    (the driver's fault stays latched until the operator resets: that is the driver's job, not this one's)."""
    emu.slow_replies(0.3)  # beyond the 0.1 s request timeout: each poll fails
    assert wait_for(lambda: backend.read().fault is not None, 2.0)
    emu.slow_replies(0.0)
    assert wait_for(lambda: backend.read().fault is None, 3.0)


def test_joint_speeds_and_the_poll_count_are_what_the_controller_reports(emu: ArcsEmulator, backend) -> None:
    """The speeds are the controller's; ``polls`` counts the polls the controller answered in full (each ends
    with its collision flag), not a rate measured here (a loaded machine's scheduler decides that)."""
    backend.servo(HOME_Q)
    polls0 = backend.polls
    backend.servo(HOME_Q + 0.3)  # the emulated arm moves toward it at 2 rad/s
    assert wait_for(lambda: np.max(np.abs(backend.read().qd)) > 1.0, 2.0)
    qd = backend.read().qd
    assert qd.shape == (6,) and qd.dtype == float

    def answered() -> int:  # the last call of a poll, as the controller counted it
        return sum(n for method, n in emu.state()["counts"].items() if method.endswith("isCollisionOccurred"))

    assert backend.polls > polls0
    assert wait_for(lambda: answered() - backend.polls in (0, 1), 2.0), (answered(), backend.polls)  # 1: in flight


@pytest.mark.parametrize("model", ["refuse", "relatch"])
def test_an_estop_still_pressed_is_reported_whichever_way_the_board_answers(model: str) -> None:
    with ArcsEmulator(boot_delay=0.05, estop_restart_pressed=model) as emu:
        b = make_backend(emu)
        try:
            emu.emergency_stop()
            assert wait_for(lambda: b.read().fault == "safety mode RobotEmergencyStop")
            with pytest.raises(BackendError) as err:
                b.acknowledge_fault()
            assert str(err.value) == (
                "safety mode RobotEmergencyStop: the emergency stop (pendant or control box button) is engaged: "
                "release it, then reset again"
            )
            assert count(emu, "poweron") == 1  # never tried to power on into a pressed e-stop
        finally:
            b.close()


def test_the_released_estop_recovers_through_the_startup_path_and_says_so(emu: ArcsEmulator, backend, caplog) -> None:
    emu.emergency_stop(system=True)
    assert wait_for(lambda: backend.read().fault == "safety mode SystemEmergencyStop")
    emu.clear_cause()
    with caplog.at_level(logging.WARNING, logger="aubo_bridge.backends.arcs"):
        backend.acknowledge_fault()
    warnings = [r.getMessage() for r in caplog.records if r.name == "aubo_bridge.backends.arcs"]
    assert warnings == [f"{HOST}:{emu.port}: arm not Running after the reset: powering on and releasing brakes"]
    state = emu.state()
    assert (state["mode"], state["safety"]) == ("Running", "Normal")
    assert count(emu, "restartInterfaceBoard") == 1 and count(emu, "poweron") == 2


def test_the_session_that_does_not_recover_never_powers_the_arm_on(emu: ArcsEmulator, backend) -> None:
    """The hosted arm's streaming session: it re-attaches, the state session does the start-up."""
    streaming = make_backend(emu, recovers=False, startup=False)
    try:
        emu.emergency_stop()
        assert wait_for(lambda: streaming.read().fault == "safety mode RobotEmergencyStop")
        emu.clear_cause()
        with pytest.raises(BackendError, match="release it, then reset again"):
            streaming.acknowledge_fault()  # it may not restart the safety board either
        assert count(emu, "restartInterfaceBoard") == 0
        backend._manage.restartInterfaceBoard()  # the released e-stop cleared elsewhere (the state session)
        assert wait_for(lambda: streaming.read().fault is None)
        streaming.acknowledge_fault()
        assert emu.state()["mode"] == "PowerOff" and count(emu, "poweron") == 1
        backend.acknowledge_fault()  # the recovering session does power on
        assert emu.state()["mode"] == "Running"
    finally:
        streaming.close()


@pytest.mark.parametrize("inject, hint", [("violation", "confirm safety on the teach pendant"),
                                          ("controller_fault", "clear it on the teach pendant")])  # fmt: skip
def test_a_violation_or_fault_sends_nothing_until_confirmed_at_the_pendant(emu, backend, inject, hint) -> None:
    getattr(emu, inject)()
    assert wait_for(lambda: backend.read().fault is not None)
    for _ in range(2):
        with pytest.raises(BackendError, match=hint):
            backend.acknowledge_fault()
    counts = emu.state()["counts"]
    assert not any(m.endswith(("setUnlockProtectiveStop", "restartInterfaceBoard")) for m in counts)
    emu.clear_cause()  # confirmed on the pendant
    backend.acknowledge_fault()
    assert emu.state()["mode"] == "Running"


# ----------------------------------------------------------------- before connecting, start-up, pose parsing
def test_a_backend_never_connected_reads_not_connected_and_refuses_motion(emu: ArcsEmulator) -> None:
    backend = ArcsArmBackend(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port}))
    meas = backend.read()
    assert meas.fault == "not connected" and meas.ready is False
    np.testing.assert_array_equal(meas.q, np.zeros(6))
    np.testing.assert_array_equal(meas.qd, np.zeros(6))
    with pytest.raises(BackendError, match="not connected"):
        backend.servo(HOME_Q)
    assert count(emu, "servoJoint") == 0 and count(emu, "setServoModeSelect") == 0


@pytest.mark.parametrize("step", ["poweron", "startup"])
def test_a_refused_startup_step_is_an_error_naming_it_and_the_code(emu: ArcsEmulator, step: str) -> None:
    emu.refuse_next(step, -5)
    backend = ArcsArmBackend(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port}))
    try:
        with pytest.raises(BackendError) as info:
            backend.connect()
        assert str(info.value).startswith(f"{step} refused by {HOST}:{emu.port}: -5 (")
    finally:
        backend.close()


def test_an_arm_that_never_reaches_running_is_an_error_naming_its_mode() -> None:
    with ArcsEmulator(boot_delay=60.0) as emu:  # powers on, starts up, then releases its brakes for a minute
        backend = ArcsArmBackend(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port, "startup_timeout": 0.3}))
        try:
            t0 = time.monotonic()
            with pytest.raises(BackendError, match=r"not Running after 0.3 s \(mode: BrakeReleasing\)"):
                backend.connect()
            assert time.monotonic() - t0 < 3.0
        finally:
            backend.close()


def test_a_malformed_tcp_pose_is_an_error_that_shows_it() -> None:
    from aubo_bridge.backends.arcs import pose_to_tcp

    with pytest.raises(BackendError) as info:
        pose_to_tcp([1, 2, 3], "rotvec")
    assert str(info.value) == "getTcpPose returned [1, 2, 3], expected 6 numbers"
    pos, quat = pose_to_tcp([0, 0, 1, 0, 0, 0], "rotvec")  # integers from the SDK are numbers too
    assert pos.dtype == float and pos.tolist() == [0.0, 0.0, 1.0]
    np.testing.assert_allclose(quat, [0.0, 0.0, 0.0, 1.0])


def test_ping_times_one_round_trip_and_needs_a_connection(emu: ArcsEmulator, backend) -> None:
    before = count(emu, "getRobotModeType")
    rtt = backend.ping()
    assert 0.0 < rtt < 1.0 and count(emu, "getRobotModeType") > before
    fresh = ArcsArmBackend(ArcsConfig.from_mapping({"ip": HOST, "rpc_port": emu.port}))
    with pytest.raises(BackendError) as info:
        fresh.ping()
    assert str(info.value) == "ARCS backend not connected"


def test_the_state_poller_is_a_named_daemon_thread(backend) -> None:
    import threading

    pollers = [t for t in threading.enumerate() if t.name == "arcs-state-poll"]
    assert pollers and all(t.daemon for t in pollers)  # never keeps a process alive on its own


def test_a_busy_controller_is_logged_into_within_the_connect_timeout_and_then_held_to_the_request_timeout(
    emu: ArcsEmulator,
) -> None:
    """The SDK's connect() asks the interface version over RPC, under the request timeout: a loaded PC's reply
    later than 0.1 s made it -7 ("Cannot access", seen in a loaded suite). The log-in runs under the connect
    timeout; every call after it under the request timeout; a controller slower than the connect timeout is
    refused saying what it did not answer."""
    from transports.arcs.session import ArcsSession

    emu.slow_replies(0.3)  # past the request timeout, within the connect timeout
    session = ArcsSession(HOST, emu.port, "aubo", "123456", connect_timeout=1.0, request_timeout=0.1)
    robot = session.open()
    try:
        state = robot.getRobotState()
        with pytest.raises(BackendError, match="RPC request timeout"):  # (under the connect timeout: answered)
            session.call(state.getJointPositions)
    finally:
        emu.slow_replies(0.0)
        session.close()
    emu.slow_replies(1.5)
    late = ArcsSession(HOST, emu.port, "aubo", "123456", connect_timeout=1.0, request_timeout=0.1)
    with pytest.raises(BackendError, match=r"no answer to the interface version request within 1 s"):
        late.open()
    emu.slow_replies(0.0)
