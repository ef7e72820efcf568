"""The real AUBO-i5H arm backend: the ARCS controller's JSON-RPC port through ``pyaubo_sdk``.

State comes from RPC polling of the state getters on a background thread (``state_source: rpc``,
:class:`transports.arcs.poller.Poller`: ``state_hz`` on a schedule, a back-off after a failure) or from the
controller's RTDE stream (``rtde``: :mod:`transports.arcs.rtde`, the controller pushes it at ``rtde_hz``; a
background thread then only watches the link). ``read()`` only returns the latest cached measurement, so the
driver's 100 Hz tick never waits on the network. A poll that fails, a stream that drops or a frame that does
not parse, or no fresh state for ``state_stale_after``, is a fault: a silent stream never reads as a frozen
pose.

SDK behaviour this relies on (pyaubo_sdk 0.24.1, verified against the loopback emulator):

* every RPC keeps the Python GIL until the reply (or the request timeout): other threads
  freeze meanwhile, so the request timeout is kept short and a failing link is polled
  with back-off;
* ``connect()`` returns -8 (refused) / -15 (interface version mismatch); ``login()``
  returns 0 whatever the reply and raises ``AuboException`` from its own follow-up
  ``getRobotNames`` when the controller rejected the credentials;
* enum getters return pybind enums (the controller sends names such as "Running");
  ``int()`` gives the ``type_def.h`` value;
* after the controller drops the socket, ``hasConnected()`` is False and the same
  client reconnects with ``connect()`` + ``login()``.

Safety stays in the driver; this backend reports faults and never resumes motion itself.
The aubo_bridge node runs it in child processes (``arcs_hosted``), never in its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.backends.base import ArmMeasurement
from aubo_bridge.model.description import JOINT_LIMITS
from transports.arcs.poller import Poller, backoff_for
from transports.arcs.rtde import RtdeFrame, RtdeState
from transports.arcs.session import ArcsSession, code_meaning
from transports.errors import BackendError

log = logging.getLogger(__name__)

# RobotModeType / SafetyModeType values (ARCS type_def.h)
MODE_RUNNING, MODE_ERROR = 8, 10
MODE_NO_LINK = {-1: "NoController", 0: "Disconnected"}
SAFETY_READY = {1, 2}  # Normal, ReducedMode
SAFETY_FAULTS = {
    4: "Violation",
    5: "ProtectiveStop",
    6: "SafeguardStop",
    7: "SystemEmergencyStop",
    8: "RobotEmergencyStop",
    9: "Fault",
}
# What this stack may clear on an operator reset: setUnlockProtectiveStop ("clear protective
# stop, including collision stop", robot_manage.h). Everything else needs the operator at the
# controller first (OPERATOR_ACTION), and then the arm comes back only through the full
# start-up path (poweron, startup, Running), as after power-up.
SAFETY_UNLOCKABLE = {5, 6}  # ProtectiveStop, SafeguardStop (and a collision stop)
SAFETY_ESTOP = {7, 8}  # latched by the safety interface board: restartInterfaceBoard after release
OPERATOR_ACTION = {
    4: "a safety limit was violated: confirm safety on the teach pendant, then reset again",
    7: "the system emergency stop (external e-stop input) is engaged: release it, then reset again",
    8: "the emergency stop (pendant or control box button) is engaged: release it, then reset again",
    9: "the controller reports a hardware or system fault: clear it on the teach pendant, then reset again",
}

def pose_to_tcp(pose: Sequence[float], convention: str) -> tuple[np.ndarray, np.ndarray]:
    """getTcpPose [x, y, z, rx, ry, rz] -> (position m, quaternion x, y, z, w).

    The one place the orientation convention is interpreted: ``zyx_euler`` (ARCS docs:
    R = Rz(rz) Ry(ry) Rx(rx)) or ``rotvec`` (what the RTDE recipe text suggests).
    """
    p = np.asarray(pose, dtype=float)
    if p.shape != (6,):
        raise BackendError(f"getTcpPose returned {list(pose)!r}, expected 6 numbers")
    rot = Rotation.from_euler("ZYX", [p[5], p[4], p[3]]) if convention == "zyx_euler" else Rotation.from_rotvec(p[3:])
    return p[:3].copy(), rot.as_quat()


def classify(mode: int, safety: int, collided: bool) -> tuple[bool, str | None]:
    """(ready for motion, fault) from the controller's robot mode, safety mode and collision flag."""
    fault: str | None = None
    if collided:
        fault = "collision detected (isCollisionOccurred)"
    elif safety in SAFETY_FAULTS:
        fault = f"safety mode {SAFETY_FAULTS[safety]}"
    elif mode == MODE_ERROR:
        fault = "robot mode Error"
    elif mode in MODE_NO_LINK:
        fault = f"robot mode {MODE_NO_LINK[mode]}: controller has no link to the arm"
    ready = fault is None and mode == MODE_RUNNING and safety in SAFETY_READY
    return ready, fault


class ArcsArmBackend:
    """ArmBackend on an ARCS controller. Call :meth:`connect` before handing it to the driver."""

    def __init__(self, config: ArcsConfig, clock: Callable[[], float] = time.monotonic, recovers: bool = True) -> None:
        """``recovers``: an operator reset on this session may restart the safety board and run the
        start-up path (one session per arm does: the hosted arm's state session)."""
        self.config = config
        self._clock = clock
        self._recovers = recovers
        # One authenticated session; every SDK call goes through its one lock (see ArcsSession).
        self._session = ArcsSession(
            config.ip, config.rpc_port, config.user, config.password, config.connect_timeout, config.request_timeout
        )
        self._lock = self._session.lock
        self._opened = False
        self._robot: Any = None
        self._state: Any = None
        self._motion: Any = None
        self._manage: Any = None
        self._servo_on = False  # servo mode selected and not since ended by a hold or a stop
        self._servo_used = False  # servo mode selected at least once this session: leave it on close
        self._closed = False
        zeros = np.zeros(6)
        self._latest = ArmMeasurement(clock(), zeros, zeros, ready=False, fault="not connected")
        self._last_ok = -np.inf
        self._modes: tuple[int, int, bool] = (0, 0, False)  # robot mode, safety mode, collided: last poll
        self._link_error: str | None = "not connected"
        self._poller: Poller | None = None  # state_source rpc: the state poll (transports.arcs.poller)
        self._stop = threading.Event()  # ends the RTDE link watch
        self._watcher: threading.Thread | None = None  # state_source rtde: the stream's link watch
        self.polls = 0  # successful state polls (RTDE: frames taken), for rate measurements
        self._rtde: RtdeState | None = None
        # Called after every poll attempt on the poller thread (the process host pushes read() then).
        self.on_update: Callable[[], None] | None = None

    @property
    def _where(self) -> str:
        return self._session.where

    # ------------------------------------------------------------- connection
    def connect(self, startup: bool = True, poll: bool = True) -> None:
        """Connect, log in, power on and start up the arm, wait for Running, start state polling.

        ``startup=False`` (re-attaching after an operator reset) only connects and polls: an arm
        that is not Running then reads as not ready instead of being powered on.
        ``poll=False``: no polling thread, for a session that only streams (its ``read()`` is
        then not kept fresh; the state comes from another session).
        """
        self._open_session()
        self._opened = True
        try:
            if startup:
                self._startup()
            self._poll_once()
        except BackendError:
            self._session.close()  # leave no half-open session behind a failed start-up
            raise
        if poll and self.config.state_source == "rtde":
            self._open_rtde()
            self._watcher = threading.Thread(target=self._watch_rtde, name="arcs-rtde-watch", daemon=True)
            self._watcher.start()
        elif poll:
            self._poller = Poller(
                self._poll_once, 1.0 / self.config.state_hz, backoff=backoff_for(self.config.request_timeout),
                on_error=self._lose_link, what=f"state poll of {self._where}", name="arcs-state-poll",
                on_attempt=self._notify,
            )  # fmt: skip
            self._poller.start()

    # -------------------------------------------------------------- RTDE state
    def _open_rtde(self) -> None:
        """Subscribe the RTDE stream (again after a drop: the controller forgets the recipe)."""
        if self._rtde is not None:
            self._rtde.close()
        c = self.config
        self._rtde = RtdeState(c.ip, c.rtde_port, c.user, c.password, c.rtde_hz, c.connect_timeout, self._on_rtde)
        try:
            self._rtde.open()
        except BackendError:
            self._session.close()
            raise

    def _on_rtde(self, frame: RtdeFrame) -> None:
        """One RTDE frame (on the SDK's thread): the latest measurement."""
        pos, quat = pose_to_tcp(frame.pose, self.config.tcp_orientation)
        ready, fault = classify(frame.mode, frame.safety, False)  # a collision stop shows as ProtectiveStop
        self._modes = (frame.mode, frame.safety, False)
        self._latest = ArmMeasurement(stamp=self._clock(), q=frame.q, qd=frame.qd, ready=ready, fault=fault,
                                      tcp_pos=pos, tcp_quat=quat)  # fmt: skip
        self._last_ok = frame.arrived
        rtde = self._rtde
        if self._link_error is not None and rtde is not None and rtde.connected() and rtde.error is None:
            self._link_error = None  # the stream is back (after an operator reset reopened it)
        self.polls += 1
        self._notify()  # every frame: hosted, the driver sees the stream at its own rate

    def _watch_rtde(self) -> None:
        """The link, at state_hz: a dropped stream or a frame that did not parse is a fault at once (a silent
        one is, by its age, in read())."""
        period = 1.0 / self.config.state_hz
        while not self._stop.wait(period):
            rtde = self._rtde
            if rtde is None:
                continue
            if not rtde.connected():
                self._link_error = f"RTDE stream from {rtde.where} lost"
                self._notify()
            elif rtde.error is not None:
                self._link_error = rtde.error
                self._notify()

    def _open_session(self) -> None:
        """Connect and log in (ArcsSession), then look up the arm's interfaces."""
        with self._lock:
            self._robot = self._session.open()
            self._state = self._robot.getRobotState()
            self._motion = self._robot.getMotionControl()
            self._manage = self._robot.getRobotManage()
            self._servo_on = False

    def _startup(self) -> None:
        """poweron + startup (as AUBO's example_startup.py), then wait for RobotMode Running."""
        if int(self._call(self._state.getRobotModeType)) == MODE_RUNNING:
            return
        for step in ("poweron", "startup"):
            ret = self._call(getattr(self._manage, step))
            if ret != 0:
                raise BackendError(f"{step} refused by {self._where}: {code_meaning(ret)}")
        deadline = time.monotonic() + self.config.startup_timeout
        mode: Any = None
        while time.monotonic() < deadline:
            mode = self._call(self._state.getRobotModeType)
            if int(mode) == MODE_RUNNING:
                return
            time.sleep(self.config.startup_poll_interval)
        name = getattr(mode, "name", mode)
        raise BackendError(f"arm at {self._where} not Running after {self.config.startup_timeout} s (mode: {name})")

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One RPC under the session lock, SDK exceptions turned into BackendError."""
        return self._session.call(fn, *args)

    def _connected(self) -> bool:
        return self._session.connected()

    # -------------------------------------------------------------- state poll
    def _poll_once(self) -> ArmMeasurement:
        """Fetch the state getters once and cache the measurement."""

        if not self._connected():
            raise BackendError(f"connection to ARCS controller at {self._where} lost")
        st = self._state
        try:  # the lock per RPC, not per poll: a servo call waits for one reply at most
            q = self._call(st.getJointPositions)
            qd = self._call(st.getJointSpeeds)
            pose = self._call(st.getTcpPose)
            mode = int(self._call(st.getRobotModeType))
            safety = int(self._call(st.getSafetyModeType))
            collided = bool(self._call(st.isCollisionOccurred))
        except BackendError as exc:
            raise BackendError(f"state poll failed: {exc}") from exc
        pos, quat = pose_to_tcp(pose, self.config.tcp_orientation)
        ready, fault = classify(mode, safety, collided)
        self._modes = (mode, safety, collided)
        meas = ArmMeasurement(
            stamp=self._clock(),
            q=np.asarray(q, dtype=float),
            qd=np.asarray(qd, dtype=float),
            ready=ready,
            fault=fault,
            tcp_pos=pos,
            tcp_quat=quat,
        )
        self._latest, self._last_ok, self._link_error = meas, time.monotonic(), None
        self.polls += 1
        return meas

    def _lose_link(self, error: str) -> None:
        """A failed state poll (on the poller's thread): read() reports it until a poll succeeds."""
        self._link_error = error

    def _notify(self) -> None:
        if self.on_update is not None:
            self.on_update()

    def ping(self) -> float:
        """Round-trip time (s) of one RPC (getRobotModeType), for latency checks and the bench."""
        if self._state is None:
            raise BackendError("ARCS backend not connected")
        t0 = time.perf_counter()
        self._call(self._state.getRobotModeType)
        return time.perf_counter() - t0

    def read(self) -> ArmMeasurement:
        """The latest polled state (never blocks on the network); stale or lost link -> fault."""
        meas = self._latest
        age = time.monotonic() - self._last_ok
        fault = meas.fault
        if self._link_error is not None:
            fault = self._link_error
        elif age > self.config.state_stale_after:
            fault = f"state from {self._where} stale: no reply for {age:.2f} s"
        return replace(meas, stamp=self._clock(), fault=fault, ready=meas.ready and fault is None)

    # ----------------------------------------------------------------- motion
    def servo(self, q: np.ndarray) -> None:
        """One servoJoint target; enters servo mode first; retries a full queue within one period.

        The driver validated it; a non-finite or out-of-limit target is still refused here,
        the last check before the controller.
        """
        cfg = self.config
        if self._motion is None:
            raise BackendError("ARCS backend not connected")
        # Checked before anything reaches the controller, mode changes included.
        target_q = np.asarray(q, dtype=float)
        if target_q.shape != (6,) or not np.all(np.isfinite(target_q)):
            raise BackendError(f"refusing servo target {target_q.tolist()!r}: expected 6 finite joint angles")
        if np.any(target_q < JOINT_LIMITS[:, 0]) or np.any(target_q > JOINT_LIMITS[:, 1]):
            raise BackendError(f"refusing servo target {np.round(target_q, 4).tolist()}: outside the joint limits")
        if not self._servo_on:
            ret = self._call(self._motion.setServoModeSelect, cfg.servo_mode)
            if ret != 0:
                raise BackendError(f"setServoModeSelect({cfg.servo_mode}) refused: {code_meaning(ret)}")
            self._servo_on = self._servo_used = True
        target = [float(v) for v in target_q]
        t0: float | None = None  # first queue-full reply: the retry budget is one servo period from there
        attempts = 0
        while attempts <= cfg.queue_full_retries:
            attempts += 1
            ret = self._call(
                self._motion.servoJoint, target, cfg.servo_acc, cfg.servo_vel, cfg.servo_period,
                cfg.lookahead_time, cfg.gain,
            )  # fmt: skip
            if ret == 0:
                return
            if ret != 2:
                if ret == -13:
                    self._servo_on = False  # the controller left servo mode (e.g. a safety stop)
                raise BackendError(f"servoJoint refused: {code_meaning(ret)}")
            if t0 is None:
                t0 = time.monotonic()
            remaining = cfg.servo_period - (time.monotonic() - t0)
            if remaining <= 0:
                break
            time.sleep(min(remaining, cfg.servo_period / (cfg.queue_full_retries + 1)))
        raise BackendError(f"servoJoint queue full after {attempts} attempts within one servo period")

    def hold(self) -> None:
        """stopJoint now; the next servo() re-selects servo mode from the measured joints."""
        if self._motion is None:
            return
        self._servo_on = False  # stopJoint may end servo mode on the controller: re-select before streaming
        ret = self._call(self._motion.stopJoint, self.config.hold_acc)
        if ret != 0:
            raise BackendError(f"stopJoint refused: {code_meaning(ret)}")

    def acknowledge_fault(self) -> None:
        """Operator reset: reconnect a lost link, unlock a protective or safeguard stop; after an
        e-stop, violation or fault only what the operator already cleared at the controller, then
        the full start-up path. Never starts motion. Raises BackendError saying what is left to do.
        """
        if not self._opened or self._closed:
            raise BackendError("ARCS backend not connected")
        if not self._connected():
            self._open_session()
        if self._rtde is not None and (not self._rtde.connected() or self._rtde.error is not None):
            self._open_rtde()  # a new client and the recipe sent again
        self._poll_once()
        mode, safety, collided = self._modes
        if collided or safety in SAFETY_UNLOCKABLE:
            ret = self._call(self._manage.setUnlockProtectiveStop)
            if ret != 0:
                stop = "collision" if collided else SAFETY_FAULTS[safety]
                raise BackendError(
                    f"controller refused to unlock the {stop} stop: "
                    f"{code_meaning(ret)}; remove its cause (obstacle, safeguard input), then reset again"
                )
        elif safety in OPERATOR_ACTION:
            if not (self._recovers and safety in SAFETY_ESTOP):
                raise BackendError(f"safety mode {SAFETY_FAULTS[safety]}: {OPERATOR_ACTION[safety]}")
            # A released e-stop stays latched on the safety interface board until it restarts;
            # with the button still pressed the controller refuses (or latches again).
            ret = self._call(self._manage.restartInterfaceBoard)
            self._poll_once()
            if ret != 0 or self._modes[1] in OPERATOR_ACTION:
                raise BackendError(f"safety mode {SAFETY_FAULTS[safety]}: {OPERATOR_ACTION[safety]}")
        self._poll_once()
        mode, safety, _ = self._modes
        if self._recovers and mode != MODE_RUNNING and safety in SAFETY_READY:
            log.warning("%s: arm not Running after the reset: powering on and releasing brakes", self._where)
            self._startup()  # the full start-up path, as at power-up
            self._poll_once()
        if self._poller is not None:
            self._poller.wake()  # the link works again: end the poller's back-off now

    def close(self) -> None:
        """Stop polling, leave servo mode once the arm is steady, log out. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._poller is not None:
            self._poller.stop(timeout=2.0)
        if self._watcher is not None:
            self._watcher.join(timeout=2.0)
        if self._rtde is not None:
            self._rtde.close()
        with self._lock:  # a servo tick may still be running on the driver's thread
            self._close_session()

    def _close_session(self) -> None:
        def leave_servo_mode() -> None:
            if self._servo_used:  # also after a hold: whether stopJoint ended servo mode is unverified
                deadline = time.monotonic() + self.config.steady_timeout
                while time.monotonic() < deadline and not self._state.isSteady():
                    time.sleep(0.01)
                self._motion.setServoModeSelect(0)

        self._session.close(before_logout=leave_servo_mode)
        self._servo_on = self._servo_used = False
        self._link_error = "closed"
        self._robot = self._state = self._motion = self._manage = None
