"""The one arbiter that decides which action source may drive the arm.

Teleop, policy and the scripted expert all publish the same action on the
same topic, each naming itself in the message. The arm bridge asks the
arbiter before it validates an action: only the active source drives, never
two at once. Switching source makes the arm hold and re-anchor its goal on
the measured pose, so the new source starts from where the arm really is.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from libero_workcell.contract import ACTION_SOURCES, SOURCE_NONE


class ArbiterError(ValueError):
    pass


class SourceArbiter:
    def __init__(self, active: str = SOURCE_NONE, on_switch: Callable[[str, str], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._active = self._check(active)
        self._on_switch = on_switch

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
        """Make ``source`` the only one that may drive (SOURCE_NONE: nobody)."""
        source = self._check(source)
        with self._lock:
            previous, self._active = self._active, source
        if previous != source and self._on_switch is not None:
            self._on_switch(previous, source)

    def permits(self, source: str) -> bool:
        with self._lock:
            return source == self._active and source != SOURCE_NONE
