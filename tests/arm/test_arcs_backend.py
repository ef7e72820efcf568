"""ArcsArmBackend through the real pyaubo_sdk client against the loopback ARCS emulator.

Everything runs on 127.0.0.1: the emulator binds an ephemeral loopback port and the
backend is configured with exactly that address.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from arcs_rigs import connected_arm as make_backend
from conftest import wait_for
from emulators.arcs_emulator import VERSION_CODE_INCOMPATIBLE, ArcsEmulator
from scipy.spatial.transform import Rotation

from aubo_bridge.backends.arcs import ArcsArmBackend, pose_to_tcp
from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.config import ArmConfig, ConfigError
from aubo_bridge.driver import ArmDriver, ArmMode
from aubo_bridge.model.kinematics import HOME_Q, fk
from gripper.base import GripperMeasurement
from libero_workcell.contract import SOURCE_POLICY
from libero_workcell.loopback import free_port
from transports.errors import BackendError

HOST = "127.0.0.1"



@pytest.fixture
def backend(emu: ArcsEmulator) -> Iterator[ArcsArmBackend]:
    b = make_backend(emu)
    yield b
    b.close()


class NullGripper:
    def read(self) -> GripperMeasurement:
        return GripperMeasurement(time.monotonic(), 0.0, None)

    def command(self, coord: float) -> None:
        pass

    def acknowledge_fault(self) -> None:
        pass

    def close(self) -> None:
        pass


class TickedDriver:
    """An ArmDriver on the ARCS backend with its servo loop ticking at servo_hz on a thread (as the node does)."""

    def __init__(self, backend: ArcsArmBackend) -> None:
        # goal_delta: one action moves the TCP by exactly its amount, whatever the thread timing, so the
        # emulated arm's motion is checkable to the tenth of a millimetre (the libero response is the
        # driver's own, tested in test_action_response.py; the backend only carries its targets).
        cfg = ArmConfig(servo_hz=100.0, action_response="goal_delta")
        self.driver = ArmDriver(cfg, backend, NullGripper(), active_source=SOURCE_POLICY)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        period = self.driver.config.servo_period
        next_t = time.monotonic()
        while not self._stop.is_set():
            self.driver.tick()
            next_t += period
            self._stop.wait(max(0.0, next_t - time.monotonic()))

    def act(self, dx: float = 0.0, dy: float = 0.0, turn: int = 0) -> bool:
        """One action of the policy's stream ``turn`` (a source started again takes a new one: docs/operator.md)."""
        return self.driver.submit_action(np.array([dx, dy, 0, 0, 0, 0, -1.0]), SOURCE_POLICY, turn).accepted

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)


@pytest.fixture
def rig(emu: ArcsEmulator, backend: ArcsArmBackend) -> Iterator[TickedDriver]:
    r = TickedDriver(backend)
    yield r
    r.stop()


# --------------------------------------------------------------------- config
def test_config_validation() -> None:
    with pytest.raises(ConfigError, match="unknown"):
        ArcsConfig.from_mapping({"ipaddr": HOST})
    for bad in ({"lookahead_time": 0.5}, {"gain": 50.0}, {"servo_hz": 50.0}, {"tcp_orientation": "xyz"}):
        with pytest.raises(ConfigError):
            ArcsConfig.from_mapping(bad)
    defaults = ArcsConfig.parameter_defaults()
    assert defaults["rpc_port"] == 30004 and defaults["user"] == "aubo" and defaults["servo_hz"] == 100.0
    assert all(isinstance(v, (str, int, float)) for v in defaults.values())
    assert ArcsConfig.from_mapping(defaults) == ArcsConfig()


def test_unconfigured_ip_contacts_nothing() -> None:
    with pytest.raises(BackendError, match="ip is not configured"):
        ArcsArmBackend(ArcsConfig()).connect()


# ------------------------------------------------------------------ start-up
def test_connect_refused_is_clear_and_fast() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(BackendError, match=f"{HOST}:{port} refused"):
        ArcsArmBackend(ArcsConfig(ip=HOST, rpc_port=port)).connect()
    assert time.monotonic() - t0 < 1.0


def test_wrong_credentials(emu: ArcsEmulator) -> None:
    with pytest.raises(BackendError, match="wrong user or password"):
        make_backend(emu, password="not-the-password")


def test_version_mismatch() -> None:
    with ArcsEmulator(version_code=VERSION_CODE_INCOMPATIBLE) as emu, pytest.raises(BackendError, match="version"):
        make_backend(emu)


def test_startup_reaches_running(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    meas = backend.read()
    assert meas.ready and meas.fault is None
    state = emu.state()
    assert state["mode"] == "Running" and state["safety"] == "Normal"
    assert state["counts"]["rob1.RobotManage.poweron"] == 1 and state["counts"]["rob1.RobotManage.startup"] == 1
    np.testing.assert_allclose(meas.q, HOME_Q, atol=1e-9)


def test_startup_timeout_names_last_mode() -> None:
    expected = r"not Running after 0.3 s \(mode: BrakeReleasing\)"
    with ArcsEmulator(boot_delay=30.0) as emu, pytest.raises(BackendError, match=expected):
        make_backend(emu, startup_timeout=0.3)


def test_close_is_idempotent_and_leaves_servo_mode(emu: ArcsEmulator) -> None:
    b = make_backend(emu)
    b.servo(HOME_Q)
    assert emu.state()["servo_mode"] == 1
    b.close()
    b.close()
    assert emu.state()["servo_mode"] == 0
    assert b.read().fault is not None


def test_close_after_a_hold_still_leaves_servo_mode(emu: ArcsEmulator) -> None:
    """The driver always holds before closing; whether stopJoint ends servo mode is unverified."""
    b = make_backend(emu)
    b.servo(HOME_Q)
    b.hold()
    b.close()
    assert emu.state()["servo_mode"] == 0


# -------------------------------------------------------------------- motion
def test_servo_stream_moves_arm(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    goal = HOME_Q + np.array([0.1, -0.05, 0.05, 0.1, -0.1, 0.2])
    for s in np.linspace(0.0, 1.0, 50):
        backend.servo(HOME_Q + s * (goal - HOME_Q))
        time.sleep(0.01)
    assert wait_for(lambda: np.allclose(emu.q(), goal, atol=1e-6))
    assert wait_for(lambda: np.allclose(backend.read().q, goal, atol=1e-6))
    assert emu.state()["counts"]["rob1.MotionControl.setServoModeSelect"] == 1  # entered once


@pytest.mark.parametrize(
    "bad", [[float("nan")] * 6, [0.0] * 5, [7.0, 0, 0, 0, 0, 0]], ids=["nan", "five-joints", "past-limit"]
)
def test_invalid_targets_never_reach_the_controller(emu: ArcsEmulator, backend: ArcsArmBackend, bad: list) -> None:
    backend.servo(HOME_Q)  # servo mode on, one good target
    sent = sum(n for m, n in emu.state()["counts"].items() if m.endswith("servoJoint"))
    with pytest.raises(BackendError, match="refusing servo target"):
        backend.servo(np.array(bad))
    assert sum(n for m, n in emu.state()["counts"].items() if m.endswith("servoJoint")) == sent


def test_queue_full_retried_then_succeeds(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    backend.servo(HOME_Q)
    emu.queue_full(1)
    backend.servo(HOME_Q + 0.01)  # queue full once, retried and accepted within one period
    assert wait_for(lambda: np.allclose(emu.q(), HOME_Q + 0.01, atol=1e-6))
    assert emu.state()["counts"]["rob1.MotionControl.servoJoint"] == 3


def test_persistent_queue_full_raises(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    backend.servo(HOME_Q)
    emu.queue_full(100)
    t0 = time.monotonic()
    with pytest.raises(BackendError, match="queue full"):
        backend.servo(HOME_Q + 0.01)
    assert time.monotonic() - t0 < 0.2  # gives up after about one servo period (slack: loaded CI)


def test_servo_error_code_meaning(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    backend.servo(HOME_Q)
    emu.protective_stop()  # the controller leaves servo mode
    with pytest.raises(BackendError, match=r"servoJoint refused: -13 \(not in servo mode\)"):
        backend.servo(HOME_Q)


def test_hold_stops_at_measured_joints(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    backend.servo(HOME_Q)
    backend.servo(HOME_Q + 0.5)  # a far target: the emulated arm moves at 2 rad/s
    time.sleep(0.05)
    backend.hold()
    q_hold = emu.q()
    time.sleep(0.2)
    np.testing.assert_allclose(emu.q(), q_hold, atol=1e-9)
    assert np.all(q_hold < HOME_Q + 0.5 - 0.1)
    backend.servo(q_hold)  # streaming resumes (servo mode re-selected) after a hold
    assert emu.state()["servo_mode"] == 1


@pytest.mark.parametrize("convention", ["zyx_euler", "rotvec"])
def test_tcp_orientation_matches_fk(convention: str) -> None:
    q0 = HOME_Q + np.array([0.3, -0.2, 0.1, 0.4, -0.5, 0.7])
    with ArcsEmulator(q0=q0.tolist(), tcp_orientation=convention) as emu:
        b = make_backend(emu, tcp_orientation=convention)
        try:
            meas = b.read()
        finally:
            b.close()
    p, R = fk(q0)
    np.testing.assert_allclose(meas.tcp_pos, p, atol=1e-9)
    err = Rotation.from_quat(meas.tcp_quat) * Rotation.from_matrix(R).inv()
    assert err.magnitude() < 1e-9


def test_wrong_orientation_convention_is_detectably_wrong() -> None:
    """The convention flag matters away from home (at HOME_Q the tool points straight down, a pi
    rotation about x, where ZYX Euler angles and the rotation vector coincide: check on a tilted pose)."""
    p, R = fk(HOME_Q + np.array([0.3, -0.2, 0.1, 0.4, -0.5, 0.7]))
    pose = [*p, *Rotation.from_matrix(R).as_euler("xyz")]
    _, right = pose_to_tcp(pose, "zyx_euler")
    _, wrong = pose_to_tcp(pose, "rotvec")
    assert (Rotation.from_quat(right) * Rotation.from_matrix(R).inv()).magnitude() < 1e-9
    assert (Rotation.from_quat(wrong) * Rotation.from_matrix(R).inv()).magnitude() > 0.1


# ------------------------------------------------------------ driver + faults
def test_action_moves_emulated_tcp(emu: ArcsEmulator, rig: TickedDriver) -> None:
    assert rig.driver.enable()[0]
    p0 = np.array(emu.state()["tcp_pose"][:3])
    assert rig.act(dx=0.2)
    time.sleep(0.5)  # one control period of motion, then the watchdog holds the target
    p1 = np.array(emu.state()["tcp_pose"][:3])
    np.testing.assert_allclose(p1 - p0, [0.01, 0.0, 0.0], atol=2e-4)
    assert rig.driver.mode in (ArmMode.ENABLED, ArmMode.HOLDING)


def _inject(emu: ArcsEmulator, kind: str) -> Callable[[], None]:
    """Inject a fault; return what clears its cause."""
    if kind == "protective_stop":
        emu.protective_stop()
    elif kind == "safeguard_stop":
        emu.safeguard_stop()
    elif kind == "emergency_stop":
        emu.emergency_stop()
    elif kind == "system_emergency_stop":
        emu.emergency_stop(system=True)
    elif kind == "violation":
        emu.violation()
    elif kind == "controller_fault":
        emu.controller_fault()
    elif kind == "collision":
        emu.collision()
    elif kind == "disconnect":
        emu.disconnect(refuse=True)
        return emu.accept_connections
    elif kind == "slow_replies":
        emu.slow_replies(0.3)  # beyond the 0.1 s request timeout
        return lambda: emu.slow_replies(0.0)
    return emu.clear_cause


# What the reset must say while the operator has not yet acted at the controller.
OPERATOR_HINTS = {
    "emergency_stop": "release it",
    "system_emergency_stop": "release it",
    "violation": "confirm safety on the teach pendant",
    "controller_fault": "clear it on the teach pendant",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind",
    [
        "protective_stop",
        "safeguard_stop",
        "emergency_stop",
        "system_emergency_stop",
        "violation",
        "controller_fault",
        "collision",
        "disconnect",
        "slow_replies",
    ],
)
def test_fault_latches_and_needs_operator(kind: str, emu: ArcsEmulator, rig: TickedDriver) -> None:
    drv = rig.driver
    assert drv.enable()[0]
    assert rig.act(dx=0.2)
    time.sleep(0.1)
    clear = _inject(emu, kind)
    assert wait_for(lambda: drv.mode is ArmMode.FAULT, timeout=2.0), drv.status()
    assert drv.status().fault
    q_fault = emu.q()
    assert not rig.act(dx=0.2)  # refused while in fault
    time.sleep(0.3)
    np.testing.assert_allclose(emu.q(), q_fault, atol=1e-9)
    ok, msg = drv.reset_fault()
    assert not ok, msg  # the cause is still there
    assert OPERATOR_HINTS.get(kind, "") in msg  # and the operator is told what to do
    assert drv.mode is ArmMode.FAULT
    clear()
    resets: list[tuple[float, str]] = []  # what each reset said, for the failure's message
    t_clear = time.monotonic()

    def reset() -> bool:
        ok, said = drv.reset_fault()
        resets.append((round(time.monotonic() - t_clear, 3), said))
        return ok

    # the cause is gone: a reset succeeds, whatever the load (the deadline only ends a hung test)
    assert wait_for(reset, timeout=10.0), (resets[:3], resets[-3:], len(resets), drv.status())
    assert drv.mode is ArmMode.DISABLED  # never resumes by itself
    counts = emu.state()["counts"]
    if kind in OPERATOR_HINTS:  # never "unlocked": back only through the start-up path
        assert "rob1.RobotManage.setUnlockProtectiveStop" not in counts
        assert counts["rob1.RobotManage.poweron"] == 2 and counts["rob1.RobotManage.startup"] == 2
        assert emu.state()["mode"] == "Running"
    if "emergency_stop" in kind:
        assert counts["rob1.RobotManage.restartInterfaceBoard"] >= 1
    q_reset = emu.q()
    time.sleep(0.3)
    np.testing.assert_allclose(emu.q(), q_reset, atol=1e-9)
    assert not rig.act(dx=0.2)
    assert drv.enable()[0]  # the operator enables again ...
    assert not rig.act(dx=0.2)  # ... the stream the fault ended stays ended ...
    assert rig.act(dx=0.2, turn=1)  # ... and a source started again drives
    assert wait_for(lambda: np.max(np.abs(emu.q() - q_reset)) > 1e-4)


def test_emergency_stop_powers_the_arm_off_and_no_client_call_clears_it(emu: ArcsEmulator, backend) -> None:
    """The emulator models the real controller here, not what would make a reset pass."""
    emu.emergency_stop()
    state = emu.state()
    assert state["mode"] == "PowerOff" and state["safety"] == "RobotEmergencyStop"
    with pytest.raises(BackendError, match=r"emergency stop .* is engaged: release it"):
        backend.acknowledge_fault()
    assert emu.state()["safety"] == "RobotEmergencyStop"  # nothing the stack sent cleared it
    emu.clear_cause()  # the button is released: still latched until the board restarts
    assert emu.state()["safety"] == "RobotEmergencyStop"
    backend.acknowledge_fault()
    state = emu.state()
    assert state["mode"] == "Running" and state["safety"] == "Normal"
    assert "rob1.RobotManage.setUnlockProtectiveStop" not in state["counts"]


def test_a_refused_target_never_switches_servo_mode(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    assert emu.state()["servo_mode"] == 0  # fresh session: servo mode off
    with pytest.raises(BackendError, match="refusing servo target"):
        backend.servo(np.full(6, np.nan))
    state = emu.state()
    assert state["servo_mode"] == 0
    assert "rob1.MotionControl.setServoModeSelect" not in state["counts"]


def test_stale_state_without_a_link_error_is_a_fault(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    """Every reply arrives within the request timeout, but a whole poll takes longer than
    state_stale_after: no link error, yet the state is too old to steer by."""
    assert backend.read().fault is None
    emu.slow_replies(0.06)  # six getters a poll: ~0.36 s > 0.25 s, each under the 0.1 s timeout
    try:
        stale = []
        assert wait_for(lambda: stale.append(backend.read()) or "stale: no reply for" in (stale[-1].fault or ""), 3.0)
        assert not stale[-1].ready
    finally:
        emu.slow_replies(0.0)
    assert wait_for(lambda: backend.read().fault is None, timeout=3.0)


def test_stale_state_is_a_fault(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    assert backend.read().fault is None
    emu.slow_replies(0.3)
    assert wait_for(lambda: backend.read().fault is not None, timeout=2.0)
    assert not backend.read().ready
    emu.slow_replies(0.0)


def test_robot_mode_error_is_a_fault(emu: ArcsEmulator, backend: ArcsArmBackend) -> None:
    emu.set_mode(10)
    assert wait_for(lambda: backend.read().fault == "robot mode Error")
    emu.set_mode(5)  # Idle: not a fault, but not ready
    assert wait_for(lambda: backend.read().fault is None and not backend.read().ready)
