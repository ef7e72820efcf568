"""The Foxglove bridge's front door: a WebSocket from a web page reaches foxglove-sdk's server only when the page's
origin is an allowed one (docs/session_log.md, "Who may connect").

Why a door of our own: a browser lets any page it shows open a WebSocket to 127.0.0.1 and leaves the check to the
server (it sends the page's ``Origin``; RFC 6455, 10.2), and foxglove-sdk's server (0.30) checks none and offers
no hook before its handshake completes. So that server listens on a private loopback address (random in
127.0.0.0/8, its port chosen by the system) and this gate on the public one. It reads each connection's handshake
request with the ``websockets`` library's own server-side checks (its ``origins`` list: exact origins, patterns,
and None for a request without an Origin, which no browser page can send on a WebSocket) and either answers it
(403 for a foreign origin, 400 for what is no WebSocket handshake) before the server has seen a byte, or relays the
connection to the server byte for byte, the request included, so the server answers and speaks its protocol
itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import socket
import threading
from collections.abc import Callable, Sequence
from typing import Final
from urllib.parse import urlsplit

from websockets.http11 import Request
from websockets.server import ServerProtocol

FOXGLOVE_APP: Final = "https://app.foxglove.dev"
LOOPBACK_PAGES: Final = "loopback"  # in the allow-list: any http(s) page served from a loopback address
DEFAULT_ORIGINS: Final = (FOXGLOVE_APP, LOOPBACK_PAGES)
LOOPBACK_ORIGIN: Final = re.compile(r"https?://(localhost|127(\.\d{1,3}){3}|\[::1\])(:\d{1,5})?", re.IGNORECASE)
HANDSHAKE_TIMEOUT_S: Final = 10.0  # to send a whole handshake request (websockets' own open_timeout)
CHUNK: Final = 65536
START_TIMEOUT_S: Final = 10.0


def allowed_origins(entries: Sequence[str]) -> list[str | re.Pattern[str] | None]:
    """The ``origins`` list for websockets' check: ``entries`` (origins as a browser sends them, scheme://host[:port],
    or :data:`LOOPBACK_PAGES`), and None: a client that sends no Origin is no browser page. A ValueError names an
    entry that can never match."""
    origins: list[str | re.Pattern[str] | None] = [None]
    for entry in entries:
        if entry == LOOPBACK_PAGES:
            origins.append(LOOPBACK_ORIGIN)
            continue
        parts = urlsplit(entry)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path or parts.query or parts.fragment:
            raise ValueError(f"allowed_origins: {entry!r} is not an origin (scheme://host[:port], as a browser sends "
                             f"it, e.g. {FOXGLOVE_APP}) nor {LOOPBACK_PAGES!r}")  # fmt: skip
        origins.append(entry.lower())
    return origins


def private_loopback() -> str:
    """A loopback address nobody would guess, for the server behind the gate: a page that tried to reach that server
    straight would have to find it among 2^24 addresses times the ports."""
    return f"127.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{1 + secrets.randbelow(254)}"


class OriginGate:
    """Listens on ``host:port`` (bound here: a port in use is an OSError now) and, from :meth:`start`, lets
    connections from allowed origins through to ``backend``. ``on_refused(origin, why)`` is told of each one it
    turns away (on the gate's thread)."""

    def __init__(self, host: str, port: int, entries: Sequence[str],
                 on_refused: Callable[[str | None, str], None] = lambda origin, why: None,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S) -> None:  # fmt: skip
        self.origins = allowed_origins(entries)
        self._on_refused = on_refused
        self._handshake_timeout_s = handshake_timeout_s
        self._sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError:
            self._sock.close()
            raise
        self.port = int(self._sock.getsockname()[1])
        self.backend: tuple[str, int] | None = None
        self.refused = self.relayed = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="foxglove-origin-gate", daemon=True)
        self._server: asyncio.Server | None = None

    def start(self, backend: tuple[str, int]) -> None:
        self.backend = backend
        self._thread.start()
        serving = asyncio.run_coroutine_threadsafe(asyncio.start_server(self._handle, sock=self._sock), self._loop)
        self._server = serving.result(START_TIMEOUT_S)

    def stop(self) -> None:
        if self._thread.is_alive():
            if self._server is not None:
                self._loop.call_soon_threadsafe(self._server.close)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
        self._sock.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            received = await asyncio.wait_for(self._admit(reader, writer), self._handshake_timeout_s)
            if received is not None:
                await self._relay(received, reader, writer)
        except (TimeoutError, OSError):
            pass
        finally:
            writer.close()

    async def _admit(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes | None:
        """What the client sent so far, once its handshake request is one to let through; None when it was
        answered here."""
        protocol = ServerProtocol(origins=self.origins)
        received = bytearray()
        while True:
            data = await reader.read(CHUNK)
            if not data:
                return None
            received += data
            protocol.receive_data(data)
            requests = [e for e in protocol.events_received() if isinstance(e, Request)]
            if requests:
                break
            if protocol.handshake_exc is not None:  # no valid request: answered (a 4xx) or dropped
                await _send(writer, protocol)
                self._refused(None, f"no valid handshake request ({protocol.handshake_exc})")
                return None
        response = protocol.accept(requests[0])
        if response.status_code == 101:
            return bytes(received)
        protocol.send_response(response)
        await _send(writer, protocol)
        sent, exc = requests[0].headers.get_all("Origin"), protocol.handshake_exc
        self._refused(", ".join(sent) or None, str(exc) if exc is not None else f"HTTP {response.status_code}")
        return None

    def _refused(self, origin: str | None, why: str) -> None:
        self.refused += 1
        with contextlib.suppress(Exception):  # a report must never stop the gate
            self._on_refused(origin, why)

    async def _relay(self, received: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.backend is not None
        back_reader, back_writer = await asyncio.open_connection(*self.backend)
        self.relayed += 1
        try:
            back_writer.write(received)
            await asyncio.gather(_pipe(reader, back_writer), _pipe(back_reader, writer))
        finally:
            back_writer.close()


async def _send(writer: asyncio.StreamWriter, protocol: ServerProtocol) -> None:
    for out in protocol.data_to_send():
        if out:
            writer.write(out)
    await writer.drain()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until the reader's side closes, then close the writer's (so the other direction ends too)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()
