"""A policy server on 127.0.0.1 that speaks openpi's protocol with whatever frames a test gives it.

openpi-server's ``WebsocketPolicyServer`` always sends well-formed frames; a hostile or broken server does not.
:class:`CraftedPolicyServer` sends ``metadata`` as the first frame of each connection, then answers each request
with ``reply`` (a frame, or a function of the request's number giving one): bytes go out as binary frames, str as
text frames (openpi-server's traceback frame); ``CLOSE`` closes the connection instead, ``SILENT`` sends nothing
(the client's deadline must end the wait). Both can be changed while it runs, so a test can turn a bad server
into a good one. ``headers`` keeps each connection's request headers. The helpers build frames: openpi's own
packing (``packed``) and raw msgpack-numpy maps that declare any dtype, shape and data (``array_map``), which
openpi's packer would never write.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import websockets.exceptions
from openpi_client import msgpack_numpy
from websockets.datastructures import Headers
from websockets.sync.server import ServerConnection, serve

from libero_workcell.loopback import LOOPBACK

CLOSE = object()  # instead of a frame: close the connection (code 1000)
SILENT = object()  # instead of a frame: send nothing, until the client hangs up
Frame = bytes | str | object


def packed(obj: Any) -> bytes:
    """``obj`` as openpi's server packs it (msgpack-numpy)."""
    return msgpack_numpy.packb(obj)


def array_map(data: bytes, dtype: str, shape: Any) -> dict[bytes, Any]:
    """A msgpack-numpy array map declaring whatever it is told (openpi's unpackb builds it as declared)."""
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def crafted_reply(actions: Any) -> bytes:
    """A reply whose ``actions`` is ``actions`` as given (an ``array_map``, a list, anything msgpack packs)."""
    return msgpack.packb({"actions": actions, "server_timing": {"infer_ms": 1.0}})


def good_reply(horizon: int = 10, value: float = 0.1) -> bytes:
    """A valid chunk: ``horizon`` actions of ``value`` on the pose and the gripper open."""
    chunk = np.tile(np.array([value] * 6 + [-1.0]), (horizon, 1))
    return packed({"actions": chunk, "policy_timing": {"infer_ms": 1.0}, "server_timing": {"infer_ms": 1.5}})


GOOD_METADATA = packed({"policy": "crafted"})


class CraftedPolicyServer:
    """Serves crafted frames on 127.0.0.1 (a port of its own) until ``stop()``."""

    def __init__(self, metadata: Frame = GOOD_METADATA, reply: Frame | Callable[[int], Frame] | None = None) -> None:
        self.metadata = metadata
        self.reply: Frame | Callable[[int], Frame] = good_reply() if reply is None else reply
        self.connections = 0  # accepted so far
        self.requests = 0  # answered so far
        self.headers: list[Headers] = []  # each connection's request headers (case-insensitive)
        self._lock = threading.Lock()
        self._open: set[ServerConnection] = set()
        self._server = serve(self._handle, LOOPBACK, 0, compression=None, max_size=None)
        self.port = int(self._server.socket.getsockname()[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name=f"crafted-{self.port}", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"ws://{LOOPBACK}:{self.port}"

    def _handle(self, ws: ServerConnection) -> None:
        with self._lock:
            self.connections += 1
            self._open.add(ws)
            self.headers.append(ws.request.headers if ws.request is not None else Headers())
        try:
            if self._send(ws, self.metadata):
                for _request in ws:
                    with self._lock:
                        n = self.requests
                        self.requests += 1
                    if not self._send(ws, self.reply(n) if callable(self.reply) else self.reply):
                        break
        except websockets.exceptions.ConnectionClosed:
            pass  # the client hung up (it refused a frame, or the test ended)
        finally:
            with self._lock:
                self._open.discard(ws)

    @staticmethod
    def _send(ws: ServerConnection, frame: Frame) -> bool:
        """Send ``frame`` (or close, or wait for the client to leave); False when the connection is over."""
        if frame is CLOSE:
            ws.close()
            return False
        if frame is SILENT:
            for _ in ws:  # whatever comes is not answered
                pass
            return False
        ws.send(frame)
        return True

    def drop(self) -> None:
        """Close every open connection (the client reconnects, and gets ``metadata`` as it is now)."""
        with self._lock:
            live = list(self._open)
        for ws in live:
            ws.close()

    def stop(self) -> None:
        """Close the listening socket and every open connection."""
        self._server.shutdown()
        self.drop()
        self._thread.join(timeout=5.0)

    def __enter__(self) -> CraftedPolicyServer:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
