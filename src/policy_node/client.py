"""openpi's websocket client with a deadline on every call, and the reply checked before anything moves.

``openpi_client.websocket_client_policy.WebsocketClientPolicy`` speaks openpi's protocol (msgpack-numpy
frames; the server's first frame is its metadata; a text frame is a server-side traceback), but its
``recv()`` waits forever and it retries only while connecting. :class:`TimedPolicyClient` is that client with
a timeout on the connection, on the metadata and on every reply. After a timeout the connection is closed:
the protocol is strict request/reply, and a late reply would otherwise answer the next request.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import websockets.exceptions
import websockets.sync.client
from openpi_client import msgpack_numpy
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from websockets.protocol import State

from libero_workcell.contract import ContractError
from policy_node.chunks import validate_chunk

# s for the closing handshake: openpi-server answers it only between inferences, and after a timeout nothing
# is waited for (the connection is dropped).
CLOSE_TIMEOUT = 0.05


class PolicyServerError(RuntimeError):
    """The server could not be reached, closed the connection, timed out or sent a traceback."""


class MalformedReply(PolicyServerError):  # noqa: N818 (reads as what it is)
    """A reply that is not a valid chunk of contract actions."""


@dataclass(frozen=True)
class Reply:
    actions: np.ndarray  # (H, 7), validated
    round_trip_ms: float
    policy_infer_ms: float | None  # the policy's own (policy_timing.infer_ms)
    server_infer_ms: float | None  # the server's around it (server_timing.infer_ms)
    server_prev_total_ms: float | None
    extra: dict[str, Any] = field(default_factory=dict)


def _ms(d: object, key: str) -> float | None:
    if isinstance(d, dict) and isinstance(d.get(key), (int, float)) and np.isfinite(d[key]):
        return float(d[key])
    return None


def parse_reply(reply: object, round_trip_ms: float) -> Reply:
    """The reply's ``actions`` as a validated (H, 7) chunk and its timing; MalformedReply with the reason."""
    if not isinstance(reply, dict):
        raise MalformedReply(f"the reply is a {type(reply).__name__}, not a dict")
    if "actions" not in reply:
        raise MalformedReply(f"the reply has no 'actions' (keys: {sorted(map(str, reply))})")
    try:
        actions = validate_chunk(reply["actions"])
    except ContractError as exc:
        raise MalformedReply(str(exc)) from None
    policy, server = reply.get("policy_timing"), reply.get("server_timing")
    return Reply(actions, round_trip_ms, _ms(policy, "infer_ms"), _ms(server, "infer_ms"),
                 _ms(server, "prev_total_ms"))  # fmt: skip


class TimedPolicyClient(WebsocketClientPolicy):
    """openpi's client with ``timeout`` seconds on connecting and on each reply."""

    def __init__(self, url: str, timeout: float, api_key: str | None = None) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        self.timeout = float(timeout)
        try:
            super().__init__(url, api_key=api_key)  # connects: _wait_for_server
        except (OSError, TimeoutError, websockets.exceptions.WebSocketException) as exc:
            raise PolicyServerError(f"cannot connect to the policy server at {url}: {exc}") from None

    def _wait_for_server(self):  # openpi's, with deadlines
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        conn = websockets.sync.client.connect(
            self._uri,
            compression=None,
            max_size=None,
            additional_headers=headers,
            open_timeout=self.timeout,
            close_timeout=CLOSE_TIMEOUT,
            legacy=True,
        )
        try:
            first = conn.recv(timeout=self.timeout)
        except BaseException:
            conn.close()
            raise
        if isinstance(first, str):
            conn.close()
            raise PolicyServerError(f"the server's first frame is text, not its metadata: {first[:200]}")
        return conn, msgpack_numpy.unpackb(first)

    @property
    def url(self) -> str:
        return self._uri

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
            reply = msgpack_numpy.unpackb(raw)
        except Exception as exc:  # anything msgpack raises on a corrupt frame
            self.close()
            raise MalformedReply(f"the reply is not msgpack-numpy: {exc}") from None
        return parse_reply(reply, rtt)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection: nothing more to do
            self._ws.close()
