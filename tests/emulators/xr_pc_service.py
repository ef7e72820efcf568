"""A protocol-level emulator of the XRoboToolkit PC Service, for testing the real ``xrobotoolkit-sdk``.

What the real service does, as far as the SDK sees it (established against xrobotoolkit-sdk 1.1.0 and
the public XRoboToolkit PC-Service sources): it is a gRPC server (plain HTTP/2) on 127.0.0.1:60061
offering ``PXREAService.EAService``. The SDK's ``init()`` calls the unary ``SendBeat`` until it answers,
then opens the server stream ``WatchServerFeedback`` and keeps beating every ~0.5 s; ``close()`` calls
``CancelServerFeedback``. Each tracking frame is a ``ServerFeedback`` message {name (1) = "deviceStateJson",
devicestatejson (15) = {devid (1), statejson (2)}} whose statejson is
``{"functionName": "Tracking", "value": "<the tracking JSON, as a string>"}``; in it the controllers'
poses are "x,y,z,qx,qy,qz,qw" strings, A / B are the right controller's ``primaryButton`` /
``secondaryButton`` (JSON booleans: the SDK refuses 0/1), and ``timeStampNs`` is what
``get_time_stamp_ns()`` returns. Every controller key must be present with its type. When the service
goes away the SDK keeps the last values (only the time stamp stops).

The protobuf messages are three fields deep, so they are encoded here by hand; only ``grpcio`` is needed.
Binds 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any, Final

import grpc

SERVICE: Final = "PXREAService.EAService"
HOST: Final = "127.0.0.1"
PORT: Final = 60061  # where the SDK looks for the service
# The SDK's port is fixed, so the tests that serve it, or that need nobody to, take turns on the machine (any run's,
# any xdist worker's): the kernel drops a killed holder's lock
PORT_LOCK: Final = Path(tempfile.gettempdir()) / f"xrobotoolkit-pc-service-{PORT}.lock"


@contextlib.contextmanager
def holding_the_port(timeout: float = 600.0) -> Iterator[None]:
    """Hold the machine's turn on the PC service's port while the block runs (waiting up to ``timeout`` s for a
    test that holds it: the physical workflow keeps it for its whole graph); then check nothing else serves it (a
    real service: skip)."""
    import pytest

    handle = os.open(PORT_LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test held {PORT_LOCK} for {timeout:g} s")
                time.sleep(0.1)
        with socket.socket() as s:
            if s.connect_ex((HOST, PORT)) == 0:
                pytest.skip(f"something that is not a test serves {HOST}:{PORT} (a real PC service?)")
        yield
    finally:
        os.close(handle)  # closing the descriptor drops the lock


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (string, bytes or sub-message)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def tracking_frame(devid: str, value: dict[str, Any]) -> bytes:
    statejson = json.dumps({"functionName": "Tracking", "value": json.dumps(value)})
    return _field(1, b"deviceStateJson") + _field(15, _field(1, devid.encode()) + _field(2, statejson.encode()))


def _controller(pose=(0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0), trigger=0.0, grip=0.0, a=False, b=False) -> dict:
    return {
        "pose": ",".join(repr(float(v)) for v in pose), "trigger": float(trigger), "grip": float(grip),
        "menuButton": False, "axisX": 0.0, "axisY": 0.0, "axisClick": False,
        "primaryButton": bool(a), "secondaryButton": bool(b),
    }  # fmt: skip


class XrPcService:
    """The service streaming one right-controller state (``set_right``) at ``rate_hz``."""

    def __init__(self, port: int = PORT, rate_hz: float = 90.0, devid: str = "PICO-EMULATOR-01") -> None:
        self.port, self.period, self.devid = port, 1.0 / rate_hz, devid
        self._lock = threading.Lock()
        self._right = _controller()
        self._stamp: int | None = None  # None: time.time_ns() per frame
        self._stop = threading.Event()
        self._server: grpc.Server | None = None
        self.frames = 0
        self.watchers = 0

    def set_right(self, pose, trigger: float = 0.0, grip: float = 0.0, a: bool = False, b: bool = False) -> None:
        with self._lock:
            self._right = _controller(pose, trigger, grip, a, b)

    def freeze_stamp(self, stamp_ns: int | None) -> None:
        """Send this time stamp in every frame (a stream whose data stopped), or None for the clock."""
        with self._lock:
            self._stamp = stamp_ns

    def _value(self) -> dict:
        with self._lock:
            right, stamp = dict(self._right), self._stamp
        return {
            "Head": {"pose": "0.0,1.6,0.0,0.0,0.0,0.0,1.0", "status": 3},
            "Controller": {"left": _controller(), "right": right},
            "Input": 1,
            "timeStampNs": time.time_ns() if stamp is None else stamp,
        }

    def _watch(self, _request: bytes, context: grpc.ServicerContext):
        self.watchers += 1
        try:
            yield _field(1, b"deviceFind") + _field(3, self.devid.encode())
            while context.is_active() and not self._stop.is_set():
                yield tracking_frame(self.devid, self._value())
                self.frames += 1
                time.sleep(self.period)
        finally:
            self.watchers -= 1

    def start(self) -> XrPcService:
        def unary(handler):
            return grpc.unary_unary_rpc_method_handler(handler, lambda b: b, lambda b: b)

        empty = unary(lambda _req, _ctx: b"")
        handlers = {
            "SendBeat": empty, "CancelServerFeedback": empty, "DeviceControlJson": empty, "SendBytesToDevice": empty,
            "WatchServerFeedback": grpc.unary_stream_rpc_method_handler(self._watch, lambda b: b, lambda b: b),
        }  # fmt: skip
        self._stop.clear()
        # gRPC binds with SO_REUSEPORT by default: a second service on the port would start and share it
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=[("grpc.so_reuseport", 0)])
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, handlers),))
        if self._server.add_insecure_port(f"{HOST}:{self.port}") == 0:
            raise OSError(f"cannot bind {HOST}:{self.port}")
        self._server.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.stop(0.2).wait()
            self._server = None
