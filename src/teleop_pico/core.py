"""The teleoperation core: controller samples in, the contract's 7-D action out (pure: no SDK, no ROS).

Per control step :meth:`TeleopCore.step` takes the latest controller sample (or the reason there is none)
and the arm's 7-D state, and returns the action to send:

- Clutch (the grip): engaging latches the TCP pose and the controller pose; while held, the TCP target is
  ``TCP0 + pos_scale (p - p0)`` and ``Exp(rot_scale Log(R R0^T)) R_TCP0`` (the controller's rotation since
  the latch, applied in the base frame), and the action is the tracking law's toward it
  (libero_workcell.tracking_law, the retargeting bridge's), so a demonstration stores what a policy outputs.
- Anything else holds the arm (a zero motion action, the gripper command kept: a held workpiece is never
  dropped): the clutch released, no tracking (the SDK's all-zero pose), a frozen stream (its time stamp not
  advancing for ``stale_timeout``), a controller jump over ``max_jump`` while following (a tracking glitch),
  or no sample at all (the source failed: the service dropped). Each of these also releases the clutch, so following
  resumes only from a fresh latch, where the target starts at the TCP (no jump).
- The trigger closes the gripper; the A and B buttons give press edges (start / stop-and-save, discard).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.contract import GRIPPER_CLOSE, GRIPPER_OPEN
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

    @property
    def holds(self) -> bool:
        return self is not Status.FOLLOWING


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


@dataclass
class _Latch:
    tcp_pos: np.ndarray
    tcp_rot: np.ndarray
    ctrl_pos: np.ndarray
    ctrl_rot: np.ndarray


@dataclass
class TeleopCore:
    config: TeleopConfig = field(default_factory=TeleopConfig)

    def __post_init__(self) -> None:
        self._latch: _Latch | None = None
        self._gripper = GRIPPER_OPEN
        self._buttons = {Button.A: False, Button.B: False}
        self._last_stamp: int | None = None
        self._stamp_changed_at = 0.0
        self._last_ctrl_pos: np.ndarray | None = None

    @property
    def engaged(self) -> bool:
        return self._latch is not None

    def step(self, sample: ControllerSample | None, state7: np.ndarray, now: float) -> TeleopStep:
        """The action for this control step. ``now``: the caller's monotonic clock (s)."""
        if sample is None:
            return self._hold(Status.NO_SOURCE)
        presses = self._presses(sample)
        status = self._health(sample, now)
        if status is not None:
            return self._hold(status, presses)
        self._gripper = GRIPPER_CLOSE if sample.trigger >= self.config.trigger_close else GRIPPER_OPEN
        p_c, R_c = to_base(sample.pose, self.config.rotation)
        tcp, R_tcp = np.asarray(state7[:3], float), Rotation.from_rotvec(state7[3:6]).as_matrix()
        if self._latch is not None and sample.grip < self.config.clutch_release:
            self._latch = None
        last, self._last_ctrl_pos = self._last_ctrl_pos, p_c
        if self._latch is not None and last is not None and np.linalg.norm(p_c - last) > self.config.max_jump:
            return self._hold(Status.JUMP, presses)  # while released, the hand may be anywhere
        if self._latch is None and sample.grip > self.config.clutch_engage:
            self._latch = _Latch(tcp.copy(), R_tcp.copy(), p_c, R_c)
        if self._latch is None:
            return self._hold(Status.IDLE, presses)
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
    def _health(self, sample: ControllerSample, now: float) -> Status | None:
        """Why this sample must not drive the arm, or None."""
        if sample.stamp_ns != self._last_stamp:
            self._last_stamp, self._stamp_changed_at = sample.stamp_ns, now
        elif now - self._stamp_changed_at > self.config.stale_timeout:
            return Status.FROZEN
        if not is_tracking(sample.pose):
            return Status.NO_TRACKING
        return None

    def _presses(self, sample: ControllerSample) -> tuple[Button, ...]:
        pressed = []
        for button, down in ((Button.A, bool(sample.a)), (Button.B, bool(sample.b))):
            if down and not self._buttons[button]:
                pressed.append(button)
            self._buttons[button] = down
        return tuple(pressed)

    def _hold(self, status: Status, presses: tuple[Button, ...] = ()) -> TeleopStep:
        self._latch = None
        if status is not Status.IDLE and status is not Status.JUMP:
            self._last_ctrl_pos = None  # a fresh stream is not compared with the old one
        action = np.zeros(7)
        action[6] = self._gripper
        return TeleopStep(action, status, presses)
