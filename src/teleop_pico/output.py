"""The teleop node's publish path without ROS: the core's step, checked against the contract, its faults counted.

Everything the node sends on the action topic comes out of :meth:`TeleopOutput.step`: the core's action, once
``contract.validate_action`` passed it. An action that fails the check (only a bug in the core could make one)
is never sent: the core holds instead and the hold (a zero motion, the gripper command kept) is sent. Every
fault hold (not the operator's own release of the clutch) is counted per reason, and the last one is kept in
words, so ``/teleop/status`` and the log say why the arm stands; each change is logged once.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from libero_workcell.contract import ContractError, validate_action
from teleop_pico.core import Status, TeleopCore, TeleopStep
from teleop_pico.mapping import ControllerSample


@dataclass(frozen=True)
class Outgoing:
    """One control step's outcome: the action to publish (None: nothing is sent) and what changed."""

    step: TeleopStep
    action: np.ndarray | None  # validated (7,), or None: publish nothing (no fresh state)
    changed: bool  # the status differs from the last step's: publish it and log the transition


class TeleopOutput:
    def __init__(self, core: TeleopCore) -> None:
        self.core = core
        self.holds: Counter[str] = Counter()  # control steps held for each fault (Status value)
        self.last_fault = ""  # the newest fault, in words
        self._status: Status | None = None
        self._before: Status | None = None  # the status before the last change

    def step(self, sample: ControllerSample | None, state7: object, now: float) -> Outgoing:
        """A step with a fresh robot state: the action to send, always contract-valid."""
        result = self.core.step(sample, state7, now)  # type: ignore[arg-type]
        try:
            action = validate_action(result.action)
        except ContractError as exc:
            result = self.core.hold(Status.INVALID_ACTION, f"held instead of an invalid action ({exc})", result.presses)
            action = validate_action(result.action)  # a hold (zeros, a gripper constant) is valid by construction
        return self._count(result, action)

    def step_without_state(self, sample: ControllerSample | None) -> Outgoing:
        """No fresh robot state: nothing is sent (the arm's watchdog holds it); the buttons still work."""
        presses = self.core.step_without_state(sample)
        held = TeleopStep(np.zeros(7), Status.NO_STATE, presses, reason="no fresh robot state: nothing is sent")
        return self._count(held, None)

    def _count(self, result: TeleopStep, action: np.ndarray | None) -> Outgoing:
        if result.status.fault:
            self.holds[result.status.value] += 1
            self.last_fault = result.reason
        changed = result.status is not self._status
        if changed:
            self._before, self._status = self._status, result.status
        return Outgoing(result, action, changed)

    def status(self) -> dict[str, Any]:
        """What ``/teleop/status`` carries: the status, the clutch, the fault holds so far and the last fault."""
        return {"status": None if self._status is None else self._status.value, "engaged": self.core.engaged,
                "holds": dict(self.holds), "fault": self.last_fault}  # fmt: skip

    def transition(self) -> tuple[str, str] | None:
        """(level, text) to log for the last change, or None: a fault once when it starts, the recovery once."""
        now, before = self._status, self._before
        if now is not None and now.fault:
            return "warning", f"teleop holds the arm ({now.value}): {self.last_fault}"
        if before is not None and before.fault and now is not None:
            return "info", f"teleop recovered from {before.value}: {now.value}"
        return None

