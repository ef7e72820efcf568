"""The arm-and-gripper driver: 7-D actions in, validated servo targets out.

All safety lives here, identical in sim and on hardware:

* an action is accepted only from the arbiter's active source, only when the
  arm is enabled and fault-free, and only if it passes the contract
  (shape, finite, within [-1, 1]); anything else is rejected with a reason
  and the arm holds;
* what an action means is ``config.action_response``, one :class:`~aubo_bridge.response.base.Motion`
  chosen when the driver is built (:mod:`aubo_bridge.response`). ``libero`` (the default):
  robosuite OSC_POSE's response: the goal is the reference pose + the scaled delta, and
  robosuite's law on the Panda's dynamics tracks it at the servo rate, as in LIBERO.
  ``goal_delta``: the goal moves by the scaled delta (clipped to the TCP speed limits) and is
  reached, on a straight line, within the control period;
* the goal is kept in the workspace box and must be reachable (IK seeded on
  the current servo target), else the action is rejected; in ``goal_delta``
  a joint step faster than the joint speed limit is rejected too. The box never
  pulls the goal: from a pose outside it (an arm parked anywhere), a zero
  action holds, actions toward the box are accepted and actions further out
  are refused; the reference never leaves the box either;
* a servo loop streams joint targets at the arm's servo rate. Every target,
  homing included, passes one per-tick limiter (joint-velocity clamp, TCP
  translation and rotation speed), whatever bunching of actions or
  re-anchoring came before;
* a watchdog holds the arm when no action arrived for ``watchdog_timeout``;
* any backend fault latches FAULT: the arm refuses motion until an operator
  calls :meth:`reset_fault`, which succeeds only on a fresh measurement that
  shows the cause gone — it never resumes by itself. :meth:`tick` never
  raises: whatever goes wrong latches FAULT and the loop keeps holding.

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

from aubo_bridge.arbiter import SourceArbiter
from aubo_bridge.backends.base import ArmBackend, ArmMeasurement
from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import fk, ik, rotation_error
from aubo_bridge.response import motion_for
from aubo_bridge.response.base import IK_MAX_ITERATIONS, box_step
from gripper.base import GripperBackend, GripperMeasurement
from libero_workcell.contract import (
    ACTION_POS_SCALE,
    ACTION_ROT_SCALE,
    ARM_DISABLED,
    ARM_ENABLED,
    ARM_FAULT,
    ARM_HOLDING,
    ARM_HOMING,
    SOURCE_NONE,
    ContractError,
    action_to_delta,
    gripper_command_to_coord,
    make_state,
    validate_action,
)
from libero_workcell.kernels import compile_kernels
from transports.errors import BackendError

# The per-tick TCP limiter scales a joint step to first order, aiming LIMIT_MARGIN under the
# limit; the curvature of the joint-space chord (a fraction of a percent of a millimetre step)
# then rarely takes it back over, and a second pass does. A step within LIMIT_RTOL of the limit
# counts as on it. Should the passes not get there, the step is halved until it does: the
# limiter never stalls the stream.
LIMITER_PASSES = 4
LIMIT_MARGIN = 1e-4
LIMIT_RTOL = 1e-7
# A refused servo command is often the first sign of the controller's own stop (a protective stop drops servo
# mode; the RPC's refusal can come before the state stream shows the stop): the controller's fault, read this
# soon after, is the cause the operator is told, not the refusal it explains.
REFUSAL_EXPLAINED_S = 0.5


class ArmMode(enum.Enum):
    DISABLED = ARM_DISABLED  # powered but not accepting actions (start-up, after stop)
    ENABLED = ARM_ENABLED  # tracking actions
    HOLDING = ARM_HOLDING  # enabled, but the action stream stalled: holding position
    HOMING = ARM_HOMING  # moving to the home configuration
    FAULT = ARM_FAULT  # refused motion until reset_fault()


@dataclass(frozen=True)
class ActionResult:
    accepted: bool
    reason: str  # "ok" or why it was rejected
    applied: np.ndarray | None = None  # the action actually executed, after clipping (7,)
    # Servo ticks computed before it took effect (accepted actions): it is tracked from the next tick on, so
    # an action held the arm for the difference to its successor's. Through DDS that is 4 or 6 ticks now and
    # then instead of servo_hz / control_hz; a recording stores it so a replay can hold each action as long.
    servo_tick: int | None = None


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
    hold_confirmed: bool = True  # False while a hold the device did not take is being retried

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
        compile_kernels()  # before the first servo tick, which would otherwise wait for them
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
        # The last target the arm was actually sent while streaming (None: no stream since the last hold): every
        # next one is limited from it, so successive commands obey the limits even when the target re-anchors
        # on a measurement one servo period old (home, a tracking-error re-anchor).
        self._sent: np.ndarray | None = None
        self._motion = motion_for(config, self.counters)  # what an action means for the stream
        self._goal_pos, self._goal_R = fk(self._target, config.tool_offset)
        self._motion.anchor(self._target, self._goal_pos, self._goal_R, self._clock())
        self._last_action_t: float | None = None
        self._gripper_coord_cmd: float | None = None
        self._epoch = self._meas.epoch
        self._hold_pending = False  # a hold that failed: retried every tick until it lands
        self._fault_needs_ready = False  # the latched fault was "not ready": a reset needs ready again
        self._refused_at: float | None = None  # the latched fault is a servo refusal, at this time
        self._servo_ticks = 0  # servo periods computed so far (ActionResult.servo_tick)

    # ------------------------------------------------------------------ state
    def status(self) -> ArmStatus:
        with self._lock:  # a consistent copy; the kinematics after, so the servo tick never waits for them
            meas, target = self._meas, self._target.copy()
            fields = dict(
                mode=self._mode,
                fault=self._fault,
                last_error=self._last_error,
                active_source=self.arbiter.active,
                gripper=self._grip_meas.coord,
                goal_pos=self._goal_pos.copy(),
                measurement_stamp=meas.stamp,
                last_action_stamp=self._last_action_t,
                counters=dict(self.counters),
                hold_confirmed=not self._hold_pending,
            )
        pos, R = fk(meas.q, self.config.tool_offset)
        return ArmStatus(q=meas.q.copy(), tcp_pos=pos, tcp_rotvec=Rotation.from_matrix(R).as_rotvec(),
                         servo_target=target, **fields)  # fmt: skip

    @property
    def mode(self) -> ArmMode:
        return self._mode

    def observe(self) -> None:
        """Read the arm and gripper now, outside a servo period: the state :meth:`status` then reports is this
        moment's (a lockstep control step publishes it before its action is computed). Never raises."""
        with self._lock:
            try:
                self._refresh()
            except Exception as exc:
                self._enter_fault(f"state read failed: {_text(exc)}")

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
            # Already streaming (actions or homing): hold at the last target (it may be computed and not yet sent:
            # re-anchoring on the older measurement would send it and then pull the arm back). Else from where the
            # arm is.
            self._hold_here(keep_target=self._mode in (ArmMode.ENABLED, ArmMode.HOLDING, ArmMode.HOMING))
            self._mode = ArmMode.ENABLED
            outside = self._outside_box_text(self._goal_pos)
            if outside:
                return True, f"enabled; TCP {outside}: only actions toward the box are accepted"
            return True, "enabled"

    def stop(self) -> tuple[bool, str]:
        """Hold at once and stop accepting actions until enabled again; every source's turn ends."""
        with self._lock:
            if self._mode is not ArmMode.FAULT:
                self._mode = ArmMode.DISABLED
            self._safe_hold()
            self.arbiter.end_turns("a stop (/aubo/stop)")
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
            self.arbiter.end_turns("homing (/aubo/home)")
            return True, "homing"

    def reset_fault(self) -> tuple[bool, str]:
        """Operator acknowledgement. Succeeds only on a fresh measurement of arm and gripper that
        shows no fault; leaves the arm DISABLED: motion needs an explicit enable."""
        with self._lock:
            try:
                self._arm.acknowledge_fault()
                self._gripper.acknowledge_fault()
            except Exception as exc:  # whatever the device says, the fault stays
                return False, f"device refused the reset: {_text(exc)}"
            try:
                meas, grip = self._arm.read(), self._gripper.read()
            except Exception as exc:
                return False, f"fault kept: cannot read the arm and gripper after the reset: {_text(exc)}"
            fault = meas.fault or (f"gripper: {grip.fault}" if grip.fault else None)
            if fault is None and self._fault_needs_ready and not meas.ready:
                fault = "arm controller is still not ready for motion"
            if fault is not None:
                return False, f"fault still present: {fault}"
            self._meas, self._grip_meas, self._epoch = meas, grip, meas.epoch
            if self._hold_pending:
                self._safe_hold()
                if self._hold_pending:
                    return False, f"fault kept: the arm did not confirm a hold ({self._last_error})"
            self._fault = None
            self._last_error = None  # it was the fault (or a refusal because of it): cleared, it is not current
            self._fault_needs_ready = False
            self._mode = ArmMode.DISABLED
            self._hold_here()
            return True, "fault cleared; arm disabled until enabled"

    def submit_action(self, action: object, source: str, turn: int = 0) -> ActionResult:
        """Validate and apply one 7-D action from ``source``'s stream ``turn`` (aubo_bridge.arbiter: a stream
        that did not start on the enabled arm, or was ended by a stop, a fault, homing or a switch, is dropped
        without disturbing the arm)."""
        with self._lock:
            enabled = self._mode in (ArmMode.ENABLED, ArmMode.HOLDING)
            # every source's turns are seen, active or not: a stream begun while another source drove never drives
            ended = self.arbiter.admit_turn(source, turn, enabled)
            if not self.arbiter.permits(source):
                return self._reject(
                    "source", f"source {source!r} may not drive (active: {self.arbiter.active!r})", hold=False
                )
            # (on an arm that is not enabled the turn ended just now, and the mode's refusal below says why)
            if ended is not None and enabled:
                return self._reject("turn", ended, hold=False)
            try:
                a = validate_action(action)
            except ContractError as exc:
                return self._reject("invalid", f"rejected action: {exc}")
            if self._mode is ArmMode.FAULT:
                return self._reject("fault", f"arm in fault: {self._fault}")
            if self._mode in (ArmMode.DISABLED, ArmMode.HOMING):
                return self._reject("mode", f"arm is {self._mode.value}: not accepting actions")
            return self._apply(a)

    def select_source(self, source: str) -> None:
        """Make ``source`` the one that drives (ArbiterError with the reason if it is not a source)."""
        self.arbiter.select(source)

    def reject_message(self, source: str, reason: str) -> ActionResult:
        """An action message that could not even be decoded (wrong field names, ...): rejected as an
        invalid action of ``source``, so the active source's arm holds and the reason is reported."""
        with self._lock:
            if not self.arbiter.permits(source):
                return self._reject(
                    "source", f"source {source!r} may not drive (active: {self.arbiter.active!r})", hold=False
                )
            return self._reject("invalid", f"rejected action message: {reason}")

    # ------------------------------------------------------------- servo loop
    def tick(self) -> None:
        """One servo period: read state, check faults and watchdog, send a target.

        Never raises: an unexpected error latches a fault (and is reported),
        so the servo loop cannot die and leave the arm on a stale target.
        """
        self.send_tick(self.prepare_tick())

    def prepare_tick(self) -> tuple[np.ndarray, int] | None:
        """The first half of :meth:`tick`: the state machine's period and the target to send (with the hold
        generation it was computed in), or None. A loop may send it a little later, on its deadline
        (:meth:`send_tick`): a hold in between voids it. Never raises."""
        try:
            with self._lock:
                try:
                    target = self._tick()
                except Exception as exc:
                    self._enter_fault(f"servo tick failed: {_text(exc)}")
                    return None
                return None if target is None else (target, self._generation)
        except Exception as exc:  # the last line of defence: even fault handling failed
            self._tick_error(exc)
            return None

    def send_tick(self, prepared: tuple[np.ndarray, int] | None) -> None:
        """The second half of :meth:`tick`: send what :meth:`prepare_tick` computed. Never raises.

        The command goes out without the state lock: a slow device round trip must not
        block actions. The I/O lock orders it against holds; a stop or fault that came
        after this target was computed (generation changed) means it is never sent.
        """
        if prepared is None:
            return
        try:
            target, generation = prepared
            error = None
            with self._io_lock:
                if generation != self._generation:
                    return
                try:
                    self._arm.servo(target)
                    self._sent = target
                except Exception as exc:
                    error = f"servo command refused: {_text(exc)}"
            if error is not None:
                with self._lock:
                    if self._enter_fault(error):
                        self._refused_at = self._clock()
        except Exception as exc:  # the last line of defence: even fault handling failed
            self._tick_error(exc)

    def _tick_error(self, exc: BaseException) -> None:
        self.counters["tick_errors"] += 1
        self._last_error = f"servo tick error: {_text(exc)}"

    def _tick(self) -> np.ndarray | None:
        """Update the state machine; return the servo target to send this period, or None."""
        self._servo_ticks += 1
        if self._hold_pending:
            self._safe_hold()
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
            # A straight line in joint space (every joint arrives together) at home_joint_speed
            # for the joint that has furthest to go, under the same per-tick limits as any motion.
            remaining = self.config.home_q - self._target
            furthest = float(np.max(np.abs(remaining)))
            step = self.config.home_joint_speed * self.config.servo_period
            desired = self.config.home_q if furthest <= step else self._target + remaining * (step / furthest)
            self._target = self._limit_step(desired)
            if np.all(np.abs(self.config.home_q - self._target) < 1e-9):
                self._hold_here(keep_target=True)
                self._mode = ArmMode.ENABLED
                self._last_action_t = None
        elif self._mode is ArmMode.ENABLED:
            desired, error = self._motion.next_point(self._target, self._goal_pos, self._goal_R, now)
            if error is not None:
                self._last_error = error
            self._target = self._limit_step(desired)
        return self._target.copy()

    def _limit_step(self, desired: np.ndarray) -> np.ndarray:
        """The next servo target toward ``desired`` under the per-tick limits every motion obeys.

        Joint velocity (max_joint_speed per joint), then TCP translation and rotation speed
        (max_tcp_speed, max_tcp_rot_speed): however actions bunch up in time, whatever the
        re-anchoring or homing asked for, no servo target moves faster than these. The step
        is only ever shortened, never turned: clipping joints one by one would bend the TCP
        off its line (out of the workspace box, into the table). The step is from the last target sent
        while streaming, where the arm is, not from a target re-anchored on an older measurement.
        """
        cfg = self.config
        base = self._target if self._sent is None else self._sent
        step = desired - base
        if not np.any(step):  # holding still (the common tick): nothing to limit
            return base.copy()
        max_step = cfg.max_joint_speed * cfg.servo_period
        biggest = float(np.max(np.abs(step) / max_step))
        if biggest > 1.0:
            step = step / biggest
        max_d, max_r = cfg.max_tcp_speed * cfg.servo_period, cfg.max_tcp_rot_speed * cfg.servo_period
        p0, R0 = fk(base, cfg.tool_offset)
        for attempt in range(LIMITER_PASSES + 30):
            p1, R1 = fk(base + step, cfg.tool_offset)
            d = float(np.linalg.norm(p1 - p0))
            r = float(np.linalg.norm(rotation_error(R1, R0)))
            if d <= max_d * (1.0 + LIMIT_RTOL) and r <= max_r * (1.0 + LIMIT_RTOL):
                return base + step
            if attempt < LIMITER_PASSES:
                scale = min(max_d / d if d > max_d else 1.0, max_r / r if r > max_r else 1.0)
                step = step * (scale * (1.0 - LIMIT_MARGIN))
            else:
                step = step * 0.5
        return base.copy()  # unreachable in practice (30 halvings): never move faster than the limits

    # -------------------------------------------------------------- internals
    def _apply(self, a: np.ndarray) -> ActionResult:
        cfg = self.config
        now = self._clock()
        if self._tracking_error() > cfg.max_tracking_error:
            self._hold_here()  # the arm could not follow (blocked, stalled): re-anchor on the measured pose
        elif self._mode is ArmMode.HOLDING:
            self._hold_here(keep_target=True)  # resume from where the arm was told to hold
        dpos, drot, grip = action_to_delta(a)
        base_pos, base_R, dpos, drot = self._motion.action_base(self._goal_pos, self._goal_R, dpos, drot)
        new_pos, outward = box_step(base_pos, dpos, cfg.workspace_min, cfg.workspace_max)
        if np.any(outward):
            axes = ", ".join("xyz"[i] for i in np.flatnonzero(outward))
            return self._reject(
                "workspace",
                f"TCP goal {self._outside_box_text(base_pos)}; this action moves it further out "
                f"along {axes}: only actions toward the box are accepted",
            )
        new_R = self._motion.goal_rotation(self._goal_pos, self._goal_R, base_R, dpos, drot)
        sol = ik(
            new_pos,
            new_R,
            self._motion.ik_seed(self._target),
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
        refusal = self._motion.refusal(sol.q)  # goal_delta: a joint step faster than the joint speed limit
        if refusal is not None:
            return self._reject("joint_speed", refusal)
        # The rotation goal is exp(drot) applied to the base (or, under libero with drot = 0, kept): what was
        # applied is drot itself, whatever the box did to the position.
        applied = np.concatenate([(new_pos - base_pos) / ACTION_POS_SCALE, drot / ACTION_ROT_SCALE, [grip]])
        self._goal_pos, self._goal_R = new_pos, new_R
        self._motion.accepted(self._target, sol.q, new_pos, new_R, now)
        self._last_action_t = now
        if self._mode is ArmMode.HOLDING:
            self._mode = ArmMode.ENABLED
        coord = gripper_command_to_coord(grip)
        if coord != self._gripper_coord_cmd:
            try:
                self._gripper.command(coord)
                self._gripper_coord_cmd = coord
            except BackendError as exc:
                reason = f"gripper: {exc}"
                self._enter_fault(reason)
                return ActionResult(False, reason)
        self.counters["accepted"] += 1
        return ActionResult(True, "ok", applied, self._servo_ticks)

    def _reject(self, kind: str, reason: str, hold: bool = True) -> ActionResult:
        """Count and report a rejection; an ENABLED arm holds unless ``hold`` is False (a foreign
        source's action must not disturb the active source's motion)."""
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
            self._sent = None  # the stream restarts from the measurement, not from a target sent before the move
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
            self._fault_needs_ready = True
        if fault is not None and self._mode is not ArmMode.FAULT:
            self._enter_fault(fault)
        elif self._meas.fault and self._refused_at is not None:  # the controller's stop explains the refusal
            if self._clock() - self._refused_at <= REFUSAL_EXPLAINED_S:
                self._fault = self._last_error = self._meas.fault
            self._refused_at = None

    def _enter_fault(self, reason: str) -> bool:
        """Latch FAULT (once: the first cause stays the fault) and hold; whether ``reason`` is the fault now."""
        self._last_error = reason
        if self._mode is ArmMode.FAULT:
            return False
        self._refused_at = None  # a new fault: an earlier refusal explains nothing of it
        self._mode = ArmMode.FAULT
        self._fault = reason
        self.counters["faults"] += 1
        self._safe_hold()
        self.arbiter.end_turns(f"the fault {reason!r}")
        return True

    def _safe_hold(self) -> None:
        """Void every target computed before, and tell the arm to stop; never raises.

        A hold the device did not take is retried on every tick (and before a reset) until it lands.
        """
        self._generation += 1  # any target computed before this hold is void
        with self._io_lock:
            self._sent = None  # the stream ends here: the next one starts from a measurement (enable, reset)
            try:
                self._arm.hold()
                self._hold_pending = False
            except Exception as exc:  # report it, and try again next tick
                self._hold_pending = True
                self.counters["hold_failures"] += 1
                self._last_error = f"hold failed: {_text(exc)}"
        self._target = self._meas.q.copy()  # the goal re-anchors on the way out (enable, reset)

    def _hold_here(self, keep_target: bool = False) -> None:
        """Freeze the servo stream and re-anchor the Cartesian goal.

        keep_target: hold at the last target computed (sent, or in flight: a smooth stop from motion), else
        at the measured joints (enable from standstill, a fault reset, homing, a source switch, an arm that
        lags); a target computed from the old anchor and not yet sent is then void (it would go out, and the
        next target pull the arm back toward the measurement).
        """
        if not keep_target:
            self._generation += 1  # a target computed from the old anchor and not yet sent is void
            self._target = self._meas.q.copy()
        self._goal_pos, self._goal_R = fk(self._target, self.config.tool_offset)
        self._motion.anchor(self._target, self._goal_pos, self._goal_R, self._clock())

    def _tracking_error(self) -> float:
        """How far the measured TCP is from where it was told to be (libero: the reference; else the goal)."""
        pos, _ = fk(self._meas.q, self.config.tool_offset)
        return float(np.linalg.norm(pos - self._motion.tracked_pos(self._goal_pos)))

    def _outside_box_text(self, pos: np.ndarray) -> str:
        """'' inside the workspace box, else which axes are out and by how much."""
        cfg = self.config
        parts = [
            f"{'xyz'[i]} {pos[i]:.3f} {'<' if pos[i] < cfg.workspace_min[i] else '>'} "
            f"{cfg.workspace_min[i] if pos[i] < cfg.workspace_min[i] else cfg.workspace_max[i]:.3f}"
            for i in range(3)
            if pos[i] < cfg.workspace_min[i] or pos[i] > cfg.workspace_max[i]
        ]
        return f"is outside the workspace box ({', '.join(parts)} m)" if parts else ""

    def _on_source_switch(self) -> None:
        """The new source starts from where the arm is measured, not from the old source's goal."""
        with self._lock:
            self.counters["source_switches"] += 1
            if self._mode in (ArmMode.ENABLED, ArmMode.HOLDING):
                self._refresh()  # a fresh measurement: the arm may have moved since the last tick
            if self._mode in (ArmMode.ENABLED, ArmMode.HOLDING):
                self._hold_here()
                self._mode = ArmMode.HOLDING


def _text(exc: BaseException) -> str:
    """An exception as an operator reads it: the device's own words, or the type and message."""
    return str(exc) if isinstance(exc, BackendError) else f"{type(exc).__name__}: {exc}"
