"""The teleoperation core: controller samples in, the contract's 7-D action out (pure: no SDK, no ROS).

Per control step :meth:`TeleopCore.step` takes the latest controller sample (or the reason there is none)
and the arm's 7-D state, and returns the action to send:

- Clutch (the grip): engaging latches the TCP pose and the controller pose; while held, the TCP target is
  ``TCP0 + pos_scale (p - p0)`` and ``Exp(rot_scale Log(R R0^T)) R_TCP0`` (the controller's rotation since
  the latch, applied in the base frame), and the action is the tracking law's toward it
  (libero_workcell.tracking_law, the retargeting bridge's), so a demonstration stores what a policy outputs.
- Anything else holds the arm (a zero motion action, the gripper command kept: a held workpiece is never
  dropped): the clutch released, no tracking (the SDK's all-zero pose, a non-finite or absurd one), a frozen
  stream (its time stamp not advancing for ``stale_timeout``), a controller jump over ``max_jump`` or a turn
  over ``max_rot_jump`` between two samples while following (a tracking glitch), a grip or trigger that is not
  a finite number (a NaN trigger must not open the gripper on a held part, a NaN grip must not keep the
  clutch), a robot state that is not a state, or no sample at all (the source failed: the service dropped).
  Each of these also releases the clutch, so following resumes only from a fresh latch, where the target starts
  at the TCP (no jump). Every input is checked for finiteness and bounds before any arithmetic touches it.
- The trigger closes the gripper; the A and B buttons give press edges (start / stop-and-save, discard).
- The arm: the clutch engages only while the arm is enabled (:meth:`TeleopCore.arm_driven`), and only with a grip
  pressed after that: a stop, homing or fault of the arm releases the clutch, and a grip held through it does
  not engage again until it was released. Every engagement and every trigger edge is a new start
  (:attr:`TeleopCore.starts`): the node sends each start's actions under a turn of its own, and the arm follows a
  turn only from its start on the enabled arm to the arm's next stop (aubo_bridge.arbiter).
"""

from __future__ import annotations

import enum
import math
import numbers
from dataclasses import dataclass, field
from typing import Final

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.contract import GRIPPER_CLOSE, GRIPPER_OPEN, STATE_DIM, STATE_NAMES
from libero_workcell.tracking_law import tracking_action
from teleop_pico.config import TeleopConfig
from teleop_pico.mapping import ControllerSample, is_tracking, to_base


class Status(enum.Enum):
    FOLLOWING = "following"  # clutch held: the arm tracks the controller
    IDLE = "idle"  # clutch released: holding
    NO_TRACKING = "no_tracking"  # the SDK's pose is not a pose (all zeros without its service): holding
    FROZEN = "frozen"  # the stream's time stamp stopped advancing: holding
    JUMP = "jump"  # the controller jumped further than max_jump between samples: holding
    NO_SOURCE = "no_source"  # no sample (the source failed or closed): holding
    BAD_INPUT = "bad_input"  # the grip or the trigger is not a finite number: holding
    BAD_STATE = "bad_state"  # the robot state is not a state (non-finite, absurd): holding
    INVALID_ACTION = "invalid_action"  # the action failed the contract's check before publishing: held instead
    NO_STATE = "no_state"  # no fresh robot state: nothing is sent (the arm's watchdog holds)
    ARM_NOT_ENABLED = "arm_not_enabled"  # the grip is pressed, but the arm is not enabled, or was since: holding

    @property
    def holds(self) -> bool:
        return self is not Status.FOLLOWING

    @property
    def fault(self) -> bool:
        """A hold the operator did not ask for (the clutch released is not one)."""
        return self is not Status.FOLLOWING and self is not Status.IDLE


# No coordinate of a real state comes near this (TCP metres within reach, an axis-angle within pi, a gripper
# coordinate in [0, 1]): beyond it a state is garbage, refused before any arithmetic could overflow on it.
STATE_BOUND: Final = 1e3


def state_fault(state7: object) -> str | None:
    """Why ``state7`` is not a robot state to follow from, or None."""
    try:
        s = np.asarray(state7, dtype=float)
    except (TypeError, ValueError):
        return "the robot state is not numeric"
    if s.shape != (STATE_DIM,):
        return f"the robot state has shape {s.shape}, expected ({STATE_DIM},)"
    if not np.all(np.isfinite(s)):
        return f"the robot state has non-finite values in {[STATE_NAMES[i] for i in np.flatnonzero(~np.isfinite(s))]}"
    if np.any(np.abs(s) > STATE_BOUND):
        names = [STATE_NAMES[i] for i in np.flatnonzero(np.abs(s) > STATE_BOUND)]
        return f"the robot state has values beyond +-{STATE_BOUND:g} in {names}"
    return None


def _finite(value: object) -> bool:
    """A real number a float holds, finite (numpy's scalars too; not a string that reads as one)."""
    try:
        return isinstance(value, numbers.Real) and math.isfinite(value)
    except OverflowError:  # an int beyond a float's range
        return False


ARM_NOT_ENABLED_TEXT: Final = ("the arm is not enabled, or was stopped since the grip was pressed: release the grip "
                               "and engage it again once the arm is enabled")


class Button(enum.Enum):
    A = "A"  # start an episode / stop and save it
    B = "B"  # discard the episode


class SessionCommand(enum.Enum):
    START = "start"
    SAVE = "save"
    DISCARD = "discard"


def session_command(button: Button, recording: bool) -> SessionCommand | None:
    """What a button press asks of the recorder: A starts, or saves while recording; B discards a recording."""
    if button is Button.A:
        return SessionCommand.SAVE if recording else SessionCommand.START
    return SessionCommand.DISCARD if recording else None


@dataclass(frozen=True)
class TeleopStep:
    action: np.ndarray  # (7,) the contract's action, always valid (a hold is a zero motion)
    status: Status
    presses: tuple[Button, ...] = ()
    target: tuple[np.ndarray, np.ndarray] | None = None  # (p, R) the TCP target while following
    reason: str = ""  # why a fault holds, in words (empty while following or idle)


@dataclass
class _Latch:
    tcp_pos: np.ndarray
    tcp_rot: np.ndarray
    ctrl_pos: np.ndarray
    ctrl_rot: np.ndarray


@dataclass
class TeleopCore:
    config: TeleopConfig = field(default_factory=TeleopConfig)
    arm_enabled: bool = False  # whether the arm is enabled at the start (lockstep sim: it enables at its first tick)

    def __post_init__(self) -> None:
        self._arm_ok = self.arm_enabled  # the arm is enabled, as far as its last report says
        self._may_latch = self.arm_enabled  # a grip pressed from now on may engage (released since the arm's stop)
        self.starts = 0  # engagements and trigger edges so far: each is a new turn of the node's actions
        self._latch: _Latch | None = None
        self._gripper = GRIPPER_OPEN
        self._buttons = {Button.A: False, Button.B: False}
        self._last_stamp: int | None = None
        self._stamp_changed_at = 0.0
        self._last_ctrl: tuple[np.ndarray, np.ndarray] | None = None  # (p, R) of the last healthy sample

    @property
    def engaged(self) -> bool:
        return self._latch is not None

    @property
    def arm_ok(self) -> bool:
        """Whether the arm is enabled, as far as its last report said."""
        return self._arm_ok

    def arm_driven(self, driven: bool) -> None:
        """The arm's mode changed: ``driven`` (enabled or holding) or not (a stop, homing, a fault). Not driven
        releases the clutch; the grip must then be released (on the enabled arm) before it engages again."""
        self._arm_ok = driven
        if not driven:
            self._latch = None
            self._may_latch = False

    def step(self, sample: ControllerSample | None, state7: np.ndarray, now: float) -> TeleopStep:
        """The action for this control step. ``now``: the caller's monotonic clock (s)."""
        if sample is None:
            return self.hold(Status.NO_SOURCE, "no controller sample: the source failed or closed")
        presses = self._presses(sample)
        fault = self._health(sample, now)
        if fault is None and (bad := state_fault(state7)) is not None:
            fault = Status.BAD_STATE, bad
        if fault is not None:
            return self.hold(*fault, presses)
        p_c, R_c = to_base(sample.pose, self.config.rotation)
        state = np.asarray(state7, float)
        tcp, R_tcp = state[:3], Rotation.from_rotvec(state[3:6]).as_matrix()
        if self._latch is not None and sample.grip < self.config.clutch_release:
            self._latch = None
        last, self._last_ctrl = self._last_ctrl, (p_c, R_c)
        if self._latch is not None and last is not None and (glitch := self._jump(p_c, R_c, *last)):
            return self.hold(Status.JUMP, glitch, presses)  # while released, the hand may be anywhere
        # the trigger drives the gripper while following or idle (open or close in place), never through a fault
        gripper = GRIPPER_CLOSE if sample.trigger >= self.config.trigger_close else GRIPPER_OPEN
        if gripper != self._gripper:
            self._gripper, self.starts = gripper, self.starts + 1
        if self._arm_ok and sample.grip < self.config.clutch_release:
            self._may_latch = True
        if self._latch is None and sample.grip > self.config.clutch_engage:
            if not self._may_latch:
                return self.hold(Status.ARM_NOT_ENABLED, ARM_NOT_ENABLED_TEXT, presses)
            self._latch = _Latch(tcp.copy(), R_tcp.copy(), p_c, R_c)
            self.starts += 1
        if self._latch is None:
            return self.hold(Status.IDLE, "", presses)
        L, cfg = self._latch, self.config
        p_ref = L.tcp_pos + cfg.pos_scale * (p_c - L.ctrl_pos)
        turn = Rotation.from_matrix(R_c @ L.ctrl_rot.T).as_rotvec() * cfg.rot_scale
        R_ref = Rotation.from_rotvec(turn).as_matrix() @ L.tcp_rot
        action = tracking_action(p_ref, R_ref, tcp, R_tcp, self._gripper, cfg.gain)
        return TeleopStep(action, Status.FOLLOWING, presses, (p_ref, R_ref))

    def step_without_state(self, sample: ControllerSample | None) -> tuple[Button, ...]:
        """No fresh robot state (nothing is sent: the arm's watchdog holds it): the clutch releases, and the
        buttons still work (stop-and-save must not wait for the arm)."""
        self._latch = None
        return self._presses(sample) if sample is not None else ()

    # ------------------------------------------------------------------
    def _health(self, sample: ControllerSample, now: float) -> tuple[Status, str] | None:
        """Why this sample must not drive the arm (and in words), or None."""
        if sample.stamp_ns != self._last_stamp:
            self._last_stamp, self._stamp_changed_at = sample.stamp_ns, now
        elif (age := now - self._stamp_changed_at) > self.config.stale_timeout:
            limit = self.config.stale_timeout
            return Status.FROZEN, (f"the controller's time stamp has not advanced for {age:.2f} s "
                                   f"(teleop.stale_timeout {limit:g} s): is the PC service running?")
        if not is_tracking(sample.pose):
            return Status.NO_TRACKING, "the controller pose is not a pose (no tracking): is the controller in view?"
        bad = [name for name, v in (("grip", sample.grip), ("trigger", sample.trigger)) if not _finite(v)]
        if bad:
            return Status.BAD_INPUT, f"the controller's {' and '.join(bad)} is not a finite number"
        return None

    def _jump(self, p: np.ndarray, R: np.ndarray, p_last: np.ndarray, R_last: np.ndarray) -> str:
        """Why the step from the last sample to this one is a tracking glitch, or "" (both poses are bounded)."""
        moved = float(np.linalg.norm(p - p_last))
        if moved > self.config.max_jump:
            return f"the controller moved {moved:.3f} m in one sample (teleop.max_jump {self.config.max_jump:g} m)"
        turned = float(Rotation.from_matrix(R @ R_last.T).magnitude())
        if turned > self.config.max_rot_jump:
            limit = self.config.max_rot_jump
            return f"the controller turned {turned:.2f} rad in one sample (teleop.max_rot_jump {limit:g} rad)"
        return ""

    def _presses(self, sample: ControllerSample) -> tuple[Button, ...]:
        pressed = []
        for button, down in ((Button.A, bool(sample.a)), (Button.B, bool(sample.b))):
            if down and not self._buttons[button]:
                pressed.append(button)
            self._buttons[button] = down
        return tuple(pressed)

    def hold(self, status: Status, reason: str, presses: tuple[Button, ...] = ()) -> TeleopStep:
        """Hold the arm (a zero motion, the gripper command kept) and release the clutch (the glitch check
        compares samples only while latched, and a latch starts from the sample it latches on: so after any
        hold, a jumped stream is followed from where it jumped to)."""
        self._latch = None
        action = np.zeros(7)
        action[6] = self._gripper
        return TeleopStep(action, status, presses, reason=reason)
