"""The arm-and-gripper driver: 7-D actions in, validated servo targets out.

All safety lives here, identical in sim and on hardware:

* an action is accepted only from the arbiter's active source, only when the
  arm is enabled and fault-free, and only if it passes the contract
  (shape, finite, within [-1, 1]); anything else is rejected with a reason
  and the arm holds;
* the TCP goal moves by the scaled action, clipped to the TCP speed limits
  and the workspace box, and is turned into joints by IK seeded on the
  current servo target; an unreachable goal or a joint step faster than the
  joint speed limit is rejected;
* between actions, a servo loop streams joint targets interpolated over one
  control period at the arm's servo rate;
* a watchdog holds the arm when no action arrived for ``watchdog_timeout``;
* any backend fault latches FAULT: the arm refuses motion until an operator
  calls :meth:`reset_fault` — it never resumes by itself.

Every call returns what was really done (the applied action after clipping),
so recordings never lie.
"""

from __future__ import annotations

import enum
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.backend import ArmBackend, ArmMeasurement, BackendError, GripperBackend, GripperMeasurement
from aubo_bridge.config import ArmConfig
from aubo_bridge.kinematics import fk, ik
from libero_workcell.arbiter import SourceArbiter
from libero_workcell.contract import (
    ACTION_POS_SCALE,
    ACTION_ROT_SCALE,
    SOURCE_NONE,
    ContractError,
    action_to_delta,
    gripper_command_to_coord,
    make_state,
    validate_action,
)

# One control step's goal is millimetres from the previous one: IK from the
# previous goal's joints converges in 2-3 iterations. A goal that needs more
# is unreachable in practice, and the lock the servo tick needs is held meanwhile.
IK_MAX_ITERATIONS = 15


class ArmMode(enum.Enum):
    DISABLED = "disabled"  # powered but not accepting actions (start-up, after stop)
    ENABLED = "enabled"  # tracking actions
    HOLDING = "holding"  # enabled, but the action stream stalled: holding position
    HOMING = "homing"  # moving to the home configuration
    FAULT = "fault"  # refused motion until reset_fault()


@dataclass(frozen=True)
class ActionResult:
    accepted: bool
    reason: str  # "ok" or why it was rejected
    applied: np.ndarray | None = None  # the action actually executed, after clipping (7,)


@dataclass(frozen=True)
class ArmStatus:
    mode: ArmMode
    fault: str | None
    last_error: str | None
    active_source: str
    q: np.ndarray
    tcp_pos: np.ndarray
    tcp_rotvec: np.ndarray
    gripper: float
    goal_pos: np.ndarray
    servo_target: np.ndarray
    measurement_stamp: float
    last_action_stamp: float | None
    counters: dict[str, int]

    @property
    def state7(self) -> np.ndarray:
        """The contract's 7-D state."""
        return make_state(self.tcp_pos, self.tcp_rotvec, self.gripper)


class ArmDriver:
    def __init__(
        self,
        config: ArmConfig,
        arm: ArmBackend,
        gripper: GripperBackend,
        clock: Callable[[], float] = time.monotonic,
        active_source: str = SOURCE_NONE,
    ) -> None:
        self.config = config
        self._arm = arm
        self._gripper = gripper
        self._clock = clock
        self._lock = threading.RLock()  # driver state
        self._io_lock = threading.Lock()  # orders commands to the arm (servo targets vs holds)
        self._generation = 0  # bumped by every hold: targets computed before it are not sent
        self.arbiter = SourceArbiter(active_source, on_switch=self._on_source_switch)
        self._mode = ArmMode.DISABLED
        self._fault: str | None = None
        self._last_error: str | None = None
        self.counters: Counter[str] = Counter()
        self._meas: ArmMeasurement = arm.read()
        self._grip_meas: GripperMeasurement = gripper.read()
        self._target = self._meas.q.copy()  # last servo target sent (or to send)
        self._seg_start = self._target.copy()  # interpolation segment: start joints
        self._seg_goal = self._target.copy()  # ... and goal joints
        self._seg_t0 = clock()
        self._goal_pos, self._goal_R = fk(self._target, config.tool_offset)
        self._last_action_t: float | None = None
        self._gripper_coord_cmd: float | None = None
        self._epoch = self._meas.epoch

    # ------------------------------------------------------------------ state
    def status(self) -> ArmStatus:
        with self._lock:
            pos, R = fk(self._meas.q, self.config.tool_offset)
            return ArmStatus(
                mode=self._mode,
                fault=self._fault,
                last_error=self._last_error,
                active_source=self.arbiter.active,
                q=self._meas.q.copy(),
                tcp_pos=pos,
                tcp_rotvec=Rotation.from_matrix(R).as_rotvec(),
                gripper=self._grip_meas.coord,
                goal_pos=self._goal_pos.copy(),
                servo_target=self._target.copy(),
                measurement_stamp=self._meas.stamp,
                last_action_stamp=self._last_action_t,
                counters=dict(self.counters),
            )

    @property
    def mode(self) -> ArmMode:
        return self._mode

    # --------------------------------------------------------------- commands
    def enable(self) -> tuple[bool, str]:
        with self._lock:
            if self._mode is ArmMode.FAULT:
                return False, f"in fault ({self._fault}): call reset_fault first"
            self._refresh()
            if self._fault is not None:
                return False, f"cannot enable: {self._fault}"
            if not self._meas.ready:
                return False, "arm controller is not ready for motion"
            self._hold_here()
            self._mode = ArmMode.ENABLED
            return True, "enabled"

    def stop(self) -> tuple[bool, str]:
        """Hold at once and stop accepting actions until enabled again."""
        with self._lock:
            if self._mode is not ArmMode.FAULT:
                self._mode = ArmMode.DISABLED
            self._safe_hold()
            return True, "stopped"

    def close(self) -> None:
        """Hold, then release the devices (leave servo mode, disconnect). The driver is done after this."""
        with self._lock:
            self.stop()
            for device in (self._arm, self._gripper):
                try:
                    device.close()
                except Exception as exc:  # closing must reach every device
                    self._last_error = f"close failed: {exc}"

    def home(self) -> tuple[bool, str]:
        with self._lock:
            if self._mode in (ArmMode.FAULT, ArmMode.DISABLED):
                return False, f"cannot home while {self._mode.value}: enable first"
            self._hold_here()
            self._mode = ArmMode.HOMING
            return True, "homing"

    def reset_fault(self) -> tuple[bool, str]:
        """Operator acknowledgement. Leaves the arm DISABLED: motion needs an explicit enable."""
        with self._lock:
            try:
                self._arm.acknowledge_fault()
                self._gripper.acknowledge_fault()
            except BackendError as exc:
                return False, f"device refused the reset: {exc}"
            self._refresh()
            if self._meas.fault is not None or self._grip_meas.fault is not None:
                return False, f"fault still present: {self._meas.fault or self._grip_meas.fault}"
            self._fault = None
            self._mode = ArmMode.DISABLED
            self._hold_here()
            return True, "fault cleared; arm disabled until enabled"

    def submit_action(self, action: object, source: str) -> ActionResult:
        """Validate and apply one 7-D action from ``source``."""
        with self._lock:
            if not self.arbiter.permits(source):
                return self._reject(
                    "source", f"source {source!r} may not drive (active: {self.arbiter.active!r})", hold=False
                )
            try:
                a = validate_action(action)
            except ContractError as exc:
                return self._reject("invalid", f"rejected action: {exc}")
            if self._mode is ArmMode.FAULT:
                return self._reject("fault", f"arm in fault: {self._fault}", hold=False)
            if self._mode in (ArmMode.DISABLED, ArmMode.HOMING):
                return self._reject("mode", f"arm is {self._mode.value}: not accepting actions", hold=False)
            return self._apply(a)

    # ------------------------------------------------------------- servo loop
    def tick(self) -> None:
        """One servo period: read state, check faults and watchdog, send a target.

        Never raises: an unexpected error latches a fault (and is reported),
        so the servo loop cannot die and leave the arm on a stale target.
        """
        with self._lock:
            try:
                target = self._tick()
            except Exception as exc:
                self._enter_fault(f"servo tick failed: {type(exc).__name__}: {exc}")
                return
            generation = self._generation
        if target is None:
            return
        # The command goes out without the state lock: a slow device round trip must not
        # block actions. The I/O lock orders it against holds; a stop or fault that came
        # after this target was computed (generation changed) means it is never sent.
        error = None
        with self._io_lock:
            if generation != self._generation:
                return
            try:
                self._arm.servo(target)
            except Exception as exc:
                error = f"servo command refused: {type(exc).__name__}: {exc}"
        if error is not None:
            with self._lock:
                self._enter_fault(error)

    def _tick(self) -> np.ndarray | None:
        """Update the state machine; return the servo target to send this period, or None."""
        self._refresh()
        now = self._clock()
        if self._mode is ArmMode.FAULT or self._mode is ArmMode.DISABLED:
            return None
        if (
            self._mode is ArmMode.ENABLED
            and self._last_action_t is not None
            and now - self._last_action_t >= self.config.watchdog_timeout
        ):
            self.counters["watchdog_holds"] += 1
            self._last_error = f"no action for {now - self._last_action_t:.3f} s: holding"
            self._hold_here(keep_target=True)
            self._mode = ArmMode.HOLDING
        if self._mode is ArmMode.HOMING:
            self._step_home()
        elif self._mode is ArmMode.ENABLED:
            # A servo target is where the arm should be when the next one is due
            # (AUBO servoJoint's t = the call interval): interpolate to now + one servo period.
            frac = min(1.0, (now + self.config.servo_period - self._seg_t0) / self.config.control_period)
            desired = self._seg_start + (self._seg_goal - self._seg_start) * frac
            # Hard joint-velocity limit on the stream itself: however actions bunch up
            # in time, no servo target moves a joint faster than max_joint_speed.
            max_step = self.config.max_joint_speed * self.config.servo_period
            self._target = self._target + np.clip(desired - self._target, -max_step, max_step)
        return self._target.copy()

    # -------------------------------------------------------------- internals
    def _apply(self, a: np.ndarray) -> ActionResult:
        cfg = self.config
        now = self._clock()
        if self._tracking_error() > cfg.max_tracking_error:
            self._hold_here()  # the arm could not follow (blocked, stalled): re-anchor on the measured pose
        elif self._mode is ArmMode.HOLDING:
            self._hold_here(keep_target=True)  # resume from where the arm was told to hold
        dpos, drot, grip = action_to_delta(a)
        max_d = cfg.max_tcp_speed * cfg.control_period
        if np.linalg.norm(dpos) > max_d:
            dpos = dpos * (max_d / np.linalg.norm(dpos))
        max_r = cfg.max_tcp_rot_speed * cfg.control_period
        if np.linalg.norm(drot) > max_r:
            drot = drot * (max_r / np.linalg.norm(drot))
        new_pos = np.clip(self._goal_pos + dpos, cfg.workspace_min, cfg.workspace_max)
        new_R = Rotation.from_rotvec(drot).as_matrix() @ self._goal_R
        sol = ik(
            new_pos,
            new_R,
            self._seg_goal,
            cfg.tool_offset,
            pos_tol=cfg.ik_pos_tol,
            rot_tol=cfg.ik_rot_tol,
            max_iterations=IK_MAX_ITERATIONS,
        )
        if not sol.converged:
            return self._reject(
                "ik",
                f"goal {np.round(new_pos, 4).tolist()} unreachable (IK error "
                f"{sol.pos_error * 1e3:.2f} mm, {np.degrees(sol.rot_error):.2f} deg)",
            )
        # The step this action asks for, from the previous goal's joints; how fast the
        # servo stream then really moves is bounded separately, per tick, in _tick.
        joint_speed = np.abs(sol.q - self._seg_goal) / cfg.control_period
        if np.any(joint_speed > cfg.max_joint_speed):
            j = int(np.argmax(joint_speed / cfg.max_joint_speed))
            return self._reject(
                "joint_speed",
                f"joint {j + 1} would move at {joint_speed[j]:.2f} rad/s "
                f"(limit {cfg.max_joint_speed[j]:.2f}): step too large or near a singularity",
            )
        applied = np.concatenate(
            [
                (new_pos - self._goal_pos) / ACTION_POS_SCALE,
                Rotation.from_matrix(new_R @ self._goal_R.T).as_rotvec() / ACTION_ROT_SCALE,
                [grip],
            ]
        )
        self._goal_pos, self._goal_R = new_pos, new_R
        self._seg_start, self._seg_goal, self._seg_t0 = self._target.copy(), sol.q, now
        self._last_action_t = now
        if self._mode is ArmMode.HOLDING:
            self._mode = ArmMode.ENABLED
        coord = gripper_command_to_coord(grip)
        if coord != self._gripper_coord_cmd:
            try:
                self._gripper.command(coord)
                self._gripper_coord_cmd = coord
            except BackendError as exc:
                self._enter_fault(f"gripper: {exc}")
                return ActionResult(False, self._fault or "gripper fault")
        self.counters["accepted"] += 1
        return ActionResult(True, "ok", applied)

    def _reject(self, kind: str, reason: str, hold: bool = True) -> ActionResult:
        self.counters[f"rejected_{kind}"] += 1
        self._last_error = reason
        if hold and self._mode is ArmMode.ENABLED:
            self._hold_here(keep_target=True)
            self._mode = ArmMode.HOLDING
        return ActionResult(False, reason)

    def _refresh(self) -> None:
        try:
            self._meas = self._arm.read()
            self._grip_meas = self._gripper.read()
        except BackendError as exc:
            self._enter_fault(f"state read failed: {exc}")
            return
        if self._meas.epoch != self._epoch:  # the arm was put somewhere else (sim reset): start from there
            self._epoch = self._meas.epoch
            self.counters["resyncs"] += 1
            self._hold_here()
            if self._mode is ArmMode.ENABLED:
                self._mode = ArmMode.HOLDING
        fault = self._meas.fault or (f"gripper: {self._grip_meas.fault}" if self._grip_meas.fault else None)
        if fault is None and self._mode in (ArmMode.ENABLED, ArmMode.HOLDING, ArmMode.HOMING):
            lag = np.abs(self._target - self._meas.q)
            if np.max(lag) > self.config.max_following_error:
                j = int(np.argmax(lag))
                fault = f"following error: joint {j + 1} is {lag[j]:.3f} rad from its servo target"
        if fault is None and not self._meas.ready and self._mode not in (ArmMode.DISABLED, ArmMode.FAULT):
            fault = "arm controller left the ready state"
        if fault is not None and self._mode is not ArmMode.FAULT:
            self._enter_fault(fault)

    def _enter_fault(self, reason: str) -> None:
        self._mode = ArmMode.FAULT
        self._fault = reason
        self._last_error = reason
        self.counters["faults"] += 1
        self._safe_hold()

    def _safe_hold(self) -> None:
        self._generation += 1  # any target computed before this hold is void
        with self._io_lock:
            try:
                self._arm.hold()
            except BackendError as exc:  # nothing more we can do from here; report it
                self._last_error = f"hold failed: {exc}"
        self._target = self._meas.q.copy()
        self._seg_start = self._seg_goal = self._target.copy()

    def _hold_here(self, keep_target: bool = False) -> None:
        """Freeze the servo stream and re-anchor the Cartesian goal.

        keep_target: hold at the last target sent (smooth stop from motion),
        else at the measured joints (after a stop, fault or homing).
        """
        if not keep_target:
            self._target = self._meas.q.copy()
        self._seg_start = self._seg_goal = self._target.copy()
        self._seg_t0 = self._clock()
        self._goal_pos, self._goal_R = fk(self._target, self.config.tool_offset)

    def _tracking_error(self) -> float:
        pos, _ = fk(self._meas.q, self.config.tool_offset)
        return float(np.linalg.norm(pos - self._goal_pos))

    def _step_home(self) -> None:
        step = self.config.home_joint_speed * self.config.servo_period
        delta = self.config.home_q - self._target
        self._target = self._target + np.clip(delta, -step, step)
        if np.all(np.abs(self.config.home_q - self._target) < 1e-9):
            self._hold_here(keep_target=True)
            self._mode = ArmMode.ENABLED
            self._last_action_t = None

    def _on_source_switch(self, previous: str, new: str) -> None:
        with self._lock:
            self.counters["source_switches"] += 1
            if self._mode is ArmMode.ENABLED:
                self._hold_here(keep_target=True)
                self._mode = ArmMode.HOLDING
