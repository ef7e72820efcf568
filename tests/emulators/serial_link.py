"""Serial links for emulator tests: a socat pty pair, and a fault-injecting relay.

Both give the client and the device emulator each a real tty path, so the
pymodbus serial client and server run unmodified. The relay sits in the
middle (client pty <-> relay <-> device pty) and can drop, corrupt or delay
what the device sends back, to exercise timeouts, CRC errors and retries.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess
import tempfile
import threading
import time
import tty
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path


def device_priority(priority: int) -> None:
    """Give the calling thread SCHED_FIFO ``priority`` where allowed (0: leave it). A device answers on its own
    hardware, whatever load the robot PC is under; its emulator's threads share the machine with a graph whose
    control threads run at real-time priority where allowed (as root), and would answer late without it."""
    if priority > 0:
        with contextlib.suppress(AttributeError, PermissionError, OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


class SocatPair:
    """``socat pty,raw,echo=0,link=A pty,raw,echo=0,link=B``: two linked tty paths."""

    def __init__(self) -> None:
        socat = shutil.which("socat")
        if socat is None:
            raise RuntimeError("socat is not installed (Debian package 'socat')")
        self._dir = tempfile.mkdtemp(prefix="ptypair-")
        self.a = str(Path(self._dir) / "a")
        self.b = str(Path(self._dir) / "b")
        self._proc = subprocess.Popen(
            [socat, f"pty,raw,echo=0,link={self.a}", f"pty,raw,echo=0,link={self.b}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 5.0
        while not (os.path.exists(self.a) and os.path.exists(self.b)):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("socat did not create the pty pair")
            time.sleep(0.01)

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=2.0)
        shutil.rmtree(self._dir, ignore_errors=True)


class FaultyLink:
    """A relay between two kernel pty pairs: ``client_port`` <-> ``device_port``.

    Requests (client -> device) pass unless :meth:`lose_requests` says one is lost
    on the line (the device never hears it). Replies (device -> client) can be
    dropped (``drop``), have one byte flipped (``corrupt``, a CRC error) or be
    held back (``delay`` s). ``drop_next(n)`` / ``corrupt_next(n)`` affect only
    the next n replies; a reply is one read chunk, which over a pty is one frame.
    """

    def __init__(self, realtime: int = 0) -> None:
        self.realtime = realtime  # > 0: the relay's thread asks for SCHED_FIFO (device_priority)
        self._cm, cs = os.openpty()  # client side: the client opens cs's name
        self._dm, ds = os.openpty()  # device side: the emulator opens ds's name
        for fd in (cs, ds):
            tty.setraw(fd)
        self.client_port = os.ttyname(cs)
        self.device_port = os.ttyname(ds)
        self._slaves = (cs, ds)  # kept open so the ptys survive a client close/reopen
        self.drop = False
        self.corrupt = False
        self.delay = 0.0
        self._drop_n = 0
        self._corrupt_n = 0
        self._lose: deque[tuple[Callable[[bytes], bool] | None, bool]] = deque()  # (which, lost?) per request
        self.requests_lost = 0
        self.replies_dropped = 0
        self.replies_corrupted = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faulty-link", daemon=True)
        self._thread.start()

    def drop_next(self, n: int = 1) -> None:
        with self._lock:
            self._drop_n += n

    def corrupt_next(self, n: int = 1) -> None:
        with self._lock:
            self._corrupt_n += n

    def lose_requests(self, pattern: Iterable[bool], match: Callable[[bytes], bool] | None = None) -> None:
        """The next requests (those ``match`` accepts, if given), one flag each: True = lost on the line, the
        device never hears it."""
        with self._lock:
            self._lose.extend((match, bool(x)) for x in pattern)

    def heal(self) -> None:
        with self._lock:
            self.drop = self.corrupt = False
            self.delay = 0.0
            self._drop_n = self._corrupt_n = 0
            self._lose.clear()

    def _request(self, data: bytes) -> bytes | None:
        with self._lock:
            if self._lose and (self._lose[0][0] is None or self._lose[0][0](data)) and self._lose.popleft()[1]:
                self.requests_lost += 1
                return None
        return data

    def _reply(self, data: bytes) -> bytes | None:
        with self._lock:
            if self.drop or self._drop_n > 0:
                self._drop_n = max(0, self._drop_n - 1)
                self.replies_dropped += 1
                return None
            if self.corrupt or self._corrupt_n > 0:
                self._corrupt_n = max(0, self._corrupt_n - 1)
                self.replies_corrupted += 1
                data = data[:-1] + bytes([data[-1] ^ 0xFF])
            delay = self.delay
        if delay > 0:
            time.sleep(delay)
        return data

    def _run(self) -> None:
        device_priority(self.realtime)
        while not self._stop.is_set():
            ready, _, _ = select.select([self._cm, self._dm], [], [], 0.05)
            for fd in ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:
                    continue
                if fd == self._cm:
                    if (req := self._request(data)) is not None:
                        os.write(self._dm, req)
                elif (out := self._reply(data)) is not None:
                    os.write(self._cm, out)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)
        for fd in (self._cm, self._dm, *self._slaves):
            with contextlib.suppress(OSError):
                os.close(fd)
