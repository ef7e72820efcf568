"""openpi's websocket client with a deadline on every call, and the reply checked before anything moves.

``openpi_client.websocket_client_policy.WebsocketClientPolicy`` speaks openpi's protocol (msgpack-numpy
frames; the server's first frame is its metadata; a text frame is a server-side traceback), but its
``recv()`` waits forever and it retries only while connecting. :class:`TimedPolicyClient` is that client with
a timeout on the connection, on the metadata and on every reply. After a timeout the connection is closed:
the protocol is strict request/reply, and a late reply would otherwise answer the next request. It is
policy_node.protocol's :class:`~policy_node.protocol.PolicyClient` for ``ws://`` and ``wss://`` URLs.

Nothing the server sends is trusted: every frame (the metadata and each reply) is at most ``max_reply_bytes``
(websockets refuses a longer one from its header, unread, and closes with 1009) and is decoded by
:mod:`policy_node.clients.openpi_ws.wire`, never by openpi's ``msgpack_numpy.unpackb`` (which builds arrays of
any dtype and shape the frame declares). A frame refused there closes the connection: what follows it on the
stream is in doubt.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import numpy as np
import websockets.exceptions
import websockets.sync.client
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.frames import CloseCode
from websockets.protocol import State

from libero_workcell.cell_file import redact_text
from policy_node.clients.openpi_ws.wire import WireError, unpack_frame
from policy_node.protocol import (
    MAX_REPLY_BYTES_DEFAULT,
    MalformedReply,
    PolicyServerError,
    Reply,
    ServerMetadataError,
    reply_from,
)

# s for the closing handshake: openpi-server answers it only between inferences, and after a timeout nothing
# is waited for (the connection is dropped).
CLOSE_TIMEOUT = 0.05


def too_big(exc: websockets.exceptions.ConnectionClosed) -> bool:
    """The connection was closed by this client because a frame exceeded ``max_size`` (websockets' 1009)."""
    return exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG


def _ms(d: object, key: str) -> float | None:
    if isinstance(d, dict) and isinstance(d.get(key), (int, float)) and np.isfinite(d[key]):
        return float(d[key])
    return None


def parse_reply(reply: object, round_trip_ms: float) -> Reply:
    """openpi's reply (``actions``, ``policy_timing``, ``server_timing``) as a validated (H, 7) chunk and its
    timing; MalformedReply with the reason."""
    if not isinstance(reply, dict):
        raise MalformedReply(f"the reply is a {type(reply).__name__}, not a dict")
    if "actions" not in reply:
        raise MalformedReply(f"the reply has no 'actions' (keys: {sorted(map(str, reply))})")
    policy, server = reply.get("policy_timing"), reply.get("server_timing")
    return reply_from(reply["actions"], round_trip_ms, _ms(policy, "infer_ms"), _ms(server, "infer_ms"),
                      _ms(server, "prev_total_ms"))  # fmt: skip


class TimedPolicyClient(WebsocketClientPolicy):
    """openpi's client with ``timeout`` seconds on connecting and on each reply, and frames of at most
    ``max_reply_bytes`` decoded by :func:`policy_node.clients.openpi_ws.wire.unpack_frame`."""

    def __init__(self, url: str, timeout: float, api_key: str | None = None,
                 max_reply_bytes: int = MAX_REPLY_BYTES_DEFAULT) -> None:  # fmt: skip
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if not max_reply_bytes > 0:
            raise ValueError(f"max_reply_bytes must be > 0, got {max_reply_bytes}")
        self.timeout = float(timeout)
        self.max_reply_bytes = int(max_reply_bytes)
        try:
            super().__init__(url, api_key=api_key)  # connects: _wait_for_server
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
            if isinstance(exc, websockets.exceptions.ConnectionClosed) and too_big(exc):
                raise ServerMetadataError(self._too_big("the server's metadata")) from None
            # the message is published (diagnostics, the MCAP log): the URL's credentials are not
            raise PolicyServerError(redact_text(f"cannot connect to the policy server at {url}: {exc}")) from None

    def _wait_for_server(self):  # openpi's, with deadlines, a bound on the frame and our decoder
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        conn = websockets.sync.client.connect(
            self._uri,
            compression=None,
            max_size=self.max_reply_bytes,
            additional_headers=headers,
            open_timeout=self.timeout,
            close_timeout=CLOSE_TIMEOUT,
            legacy=True,
        )
        try:
            first = conn.recv(timeout=self.timeout)
            if isinstance(first, str):
                raise ServerMetadataError(f"the server's first frame is text, not its metadata: {first[:200]}")
            try:
                metadata = unpack_frame(first)
            except WireError as exc:
                raise ServerMetadataError(f"the server's metadata is not openpi's msgpack-numpy: {exc}") from None
            if not isinstance(metadata, dict):
                raise ServerMetadataError(f"the server's metadata is a {type(metadata).__name__}, not a map")
        except BaseException:
            conn.close()
            raise
        return conn, metadata

    def _too_big(self, frame: str) -> str:
        return (f"{frame} exceeds policy.max_reply_bytes ({self.max_reply_bytes} bytes): refused unread, the "
                "connection closed")

    @property
    def url(self) -> str:
        return self._uri

    @property
    def metadata(self) -> dict[str, Any]:
        """The server's first frame (a map: checked on connecting)."""
        return self._server_metadata

    @property
    def is_open(self) -> bool:
        """False once the connection closed or broke (seen by websockets' own receiving thread)."""
        return self._ws.state is State.OPEN

    def infer_reply(self, obs: dict[str, Any]) -> Reply:
        """One request, one validated reply within the timeout; PolicyServerError otherwise (the connection is
        closed after any error: reconnect with a new client)."""
        t0 = time.perf_counter()
        try:
            self._ws.send(self._packer.pack(obs))
            raw = self._ws.recv(timeout=self.timeout)
        except TimeoutError:
            self.close()
            raise PolicyServerError(f"no reply within {self.timeout * 1e3:.0f} ms") from None
        except websockets.exceptions.ConnectionClosed as exc:
            if too_big(exc):
                raise MalformedReply(self._too_big("the reply")) from None
            raise PolicyServerError(f"the server closed the connection ({exc})") from None
        except (OSError, websockets.exceptions.WebSocketException) as exc:
            self.close()
            raise PolicyServerError(f"connection lost: {exc}") from None
        except (TypeError, ValueError) as exc:  # msgpack-numpy refuses what it cannot pack (object dtypes)
            raise MalformedReply(f"the observation cannot be sent: {exc}") from None
        rtt = (time.perf_counter() - t0) * 1e3
        if isinstance(raw, str):  # openpi-server's traceback frame; it closes with 1011 next
            self.close()
            last = raw.strip().splitlines()[-1] if raw.strip() else "(empty traceback)"
            raise PolicyServerError(f"the server failed: {last}")
        try:
            reply = unpack_frame(raw)
        except WireError as exc:  # corrupt, or an array we refuse to build: the stream is in doubt
            self.close()
            raise MalformedReply(f"the reply is not openpi's msgpack-numpy: {exc}") from None
        return parse_reply(reply, rtt)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
            self._ws.close()
