"""The one arbiter that decides which action source may drive the arm, and which of its streams.

Teleop, policy and the scripted expert all publish the same action on the
same topic, each naming itself in the message. The arm bridge asks the
arbiter before it validates an action: only the active source drives, never
two at once. Switching source makes the arm hold and re-anchor its goal on
the measured pose, so the new source starts from where the arm really is.

Within the active source, only a stream started on the enabled arm drives it: each action names the turn its
source took when it was started (libero_workcell.ros_msgs.new_turn: a policy start, a clutch engaged, a jog).
A turn is opened by its first action if that comes while the arm is enabled and its source active; a stop, a
fault, homing or a source switch ends every open turn. So a stream that runs on through a protective stop (a
policy nobody stopped, a clutch still held) never moves the arm again, whatever the arm is told afterwards: its
source must be started again, by a person, on the enabled arm. Turns are wall-clock integers: a turn not above
the last ended one is over, so the arbiter keeps a floor and the few open turns per source, not a history.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

from libero_workcell.contract import ACTION_SOURCES, SOURCE_NONE


class ArbiterError(ValueError):
    pass


OPEN_TURNS_KEPT: Final = 8  # open turns remembered per source; an older one beyond them is ended


class SourceArbiter:
    def __init__(self, active: str = SOURCE_NONE, on_switch: Callable[[], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._active = self._check(active)
        self._on_switch = on_switch
        self._floor: dict[str, int] = {}  # per source: every turn up to this one is over
        self._open: dict[str, set[int]] = {}  # per source: the turns that may drive
        self._ended_by: dict[str, str] = {}  # per source: what ended its turns up to the floor (the refusal's reason)

    @staticmethod
    def _check(source: str) -> str:
        if source != SOURCE_NONE and source not in ACTION_SOURCES:
            raise ArbiterError(f"unknown action source {source!r}; expected one of {(*ACTION_SOURCES, SOURCE_NONE)}")
        return source

    @property
    def active(self) -> str:
        with self._lock:
            return self._active

    def select(self, source: str) -> None:
        """Make ``source`` the only one that may drive (SOURCE_NONE: nobody). A switch ends every turn: the
        new source drives from a turn it starts after it."""
        source = self._check(source)
        with self._lock:
            previous, self._active = self._active, source
        if previous != source:
            self.end_turns(f"the switch of source from {previous!r} to {source!r}")
            if self._on_switch is not None:
                self._on_switch()

    def permits(self, source: str) -> bool:
        with self._lock:
            return source == self._active and source != SOURCE_NONE

    def admit_turn(self, source: str, turn: int, arm_enabled: bool) -> str | None:
        """None if ``source``'s stream ``turn`` may drive, else why not. Its first action opens a turn when the arm
        is enabled and ``source`` active; any other first action ends it for good. Whether ``source`` may drive
        at all is :meth:`permits`'s question."""
        if source not in ACTION_SOURCES:  # nothing is kept for a name no source has (any publisher may send one)
            return f"{source!r} is not an action source"
        with self._lock:
            opened = self._open.setdefault(source, set())  # (only turns above the floor: _end_up_to prunes it)
            if turn in opened:
                return None
            if source not in self._floor or turn > self._floor[source]:  # seen for the first time
                if arm_enabled and source == self._active:
                    opened.add(turn)
                    if len(opened) > OPEN_TURNS_KEPT:  # the oldest ends: a flood of turns cannot grow this
                        self._end_up_to(source, min(opened), "newer turns of the same source")
                    return None
                self._end_up_to(source, turn, "its start on an arm that was not enabled or followed another source")
            return (f"source {source!r}: this stream (turn {turn}) ended with {self._ended_by[source]}; nothing it "
                    "sends moves the arm: start the source again")  # fmt: skip

    def end_turns(self, why: str) -> None:
        """Every open turn of every source is over (``why``: a stop, a fault, homing, a source switch)."""
        with self._lock:
            for source, opened in self._open.items():
                if opened:
                    self._end_up_to(source, max(opened), why)

    def _end_up_to(self, source: str, turn: int, why: str) -> None:
        """Every turn of ``source`` up to ``turn`` is over, ended by ``why``. ``turn`` is above the floor (every
        caller's is: a turn seen for the first time, or an open one), so it becomes the floor."""
        self._floor[source] = turn
        self._ended_by[source] = why
        opened = self._open[source]
        opened.difference_update([t for t in opened if t <= turn])

    def open_turns(self) -> dict[str, int]:
        """How many turns each source has open (status and tests)."""
        with self._lock:
            return {source: len(opened) for source, opened in self._open.items() if opened}
