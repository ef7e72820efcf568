"""Progress on the commands people wait for: one bar, one behaviour (docs/operator.md, "Progress on long commands").

Every bar goes to stderr: what a command prints as its result (stdout) stays as scripts and tests read it.
On a terminal it is tqdm's bar, redrawn in place. Anywhere else (a pipe, a log file, CI) the same text comes as
plain lines: one when the bar starts, then at most one every ``LINE_INTERVAL_S``, and one with the final
counts when it ends. So a log says how far a run got and how it ended, and never fills with redraws (tqdm's own
non-terminal output is every redraw joined by carriage returns on one line). ``enabled=False`` shows nothing
(``--no-progress``).

A line a command prints while a bar is shown goes through :func:`write_beside` (or :class:`BesideBars`, a stream):
on a terminal it clears the bar, prints the line and redraws the bar below it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any, Final, TypeVar

LINE_INTERVAL_S: Final = 30.0  # off a terminal: at most one progress line per this many seconds (and the last)
T = TypeVar("T")
_CONTROL = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\r")  # tqdm's cursor moves and carriage returns


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed stream
        return False


class _Lines:
    """A stream for tqdm off a terminal: each redraw becomes one plain line."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self._last = stream, ""

    def write(self, text: str) -> int:
        line = _CONTROL.sub("", text).rstrip()
        if line and line != self._last:  # the closing redraw of a bar that did not move says nothing new
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last = line
        return len(text)

    def flush(self) -> None:
        self.stream.flush()


def progress_bar(
    total: float | None, desc: str, unit: str = "it", *, file: IO[str] | None = None, enabled: bool = True,
    initial: float = 0, unit_scale: bool = False,
) -> Any:  # fmt: skip
    """A tqdm bar on ``file`` (default: stderr), as the module says: redrawn on a terminal, plain lines elsewhere.
    Use it as tqdm (``update``, ``close``, a context manager)."""
    from tqdm import tqdm

    stream = sys.stderr if file is None else file
    common: dict[str, Any] = dict(total=total, desc=desc, unit=unit, initial=initial, unit_scale=unit_scale,
                                  disable=not enabled)  # fmt: skip
    if is_terminal(stream):
        return tqdm(file=stream, **common)
    return tqdm(file=_Lines(stream), ascii=True, mininterval=LINE_INTERVAL_S, maxinterval=LINE_INTERVAL_S, **common)


def counted(items: Iterable[T], bar: Any) -> Iterator[T]:
    """``items`` one by one, ``bar`` a step further after each."""
    for item in items:
        yield item
        bar.update()


def write_beside(text: str, file: IO[str] | None = None) -> None:
    """Print ``text`` (a line; default: to stdout) beside any bar shown: on a terminal the bars are cleared first
    and redrawn after; elsewhere it is a plain print."""
    from tqdm import tqdm

    stream = sys.stdout if file is None else file
    tqdm.write(text, file=stream)
    stream.flush()


class BesideBars:
    """A text stream whose lines go out through :func:`write_beside` (e.g. the launcher's echo of node output)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self._pending = stream, ""

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            write_beside(line, self.stream)
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return is_terminal(self.stream)
