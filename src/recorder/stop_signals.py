"""Why the recorder is stopping, and a stop that lets it finish: what an episode open at shutdown is marked with.

The graph stops a node with SIGINT, then SIGTERM 5 s later (workcell.launcher; ``ros2 launch`` alike), whatever
the cause: an operator's Ctrl-C, or bring-up stopping every node after one of them ended. The node's main
(libero_workcell.node_main) turns either into a KeyboardInterrupt wherever the main thread is; raised again during
the shutdown, it would cut short the completion of the episode being recorded. :class:`StopSignals` notes the first
stop signal (the interrupted episode's reason names it) and, once the shutdown has begun, holds off further ones
until it is done; before and after, each signal goes to the handler it found.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

Handler = Callable[[int, Any], Any]


def interrupted_reason(signal_name: str) -> str:
    """The ``interrupted`` attribute of an episode the recorder was stopped in (``signal_name``: "" if unknown)."""
    how = f" ({signal_name})" if signal_name else ""
    return f"the recorder was stopped{how} before the episode was saved or discarded"


class StopSignals:
    """Installed over SIGINT's and SIGTERM's handlers (from the main thread; elsewhere it notes nothing)."""

    def __init__(self) -> None:
        self.first = ""  # the name of the first stop signal received, "" before one
        self.held = 0  # stop signals held off during the shutdown
        self._shutting_down = self._done = False
        self._installed: dict[int, tuple[Handler, Handler]] = {}  # signal -> (handler found, ours)
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            found = signal.getsignal(sig)
            if callable(found):
                ours = lambda signum, frame, h=found: self._handle(h, signum, frame)  # noqa: E731
                signal.signal(sig, ours)
                self._installed[sig] = (found, ours)

    def _handle(self, handler: Handler, signum: int, frame: Any) -> Any:
        self.first = self.first or signal.Signals(signum).name
        if self._shutting_down and not self._done:
            self.held += 1
            return None
        return handler(signum, frame)

    @contextlib.contextmanager
    def shutting_down(self) -> Iterator[None]:
        """Stop signals are held off inside; afterwards the handlers found are back (where still this one's)."""
        self._shutting_down = True
        try:
            yield
        finally:
            self._done = True  # ours passes every signal on from now
            if threading.current_thread() is threading.main_thread():  # (handlers are set from the main thread only)
                for sig, (found, ours) in self._installed.items():
                    if signal.getsignal(sig) is ours:
                        signal.signal(sig, found)
