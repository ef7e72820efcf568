"""The arm's state by RTDE subscription (pyaubo_sdk's ``RtdeClient``): the controller pushes it at a set rate.

The fields and their order are AUBO's own ROS 2 driver's (joints, joint speeds, robot mode, safety mode, runtime
state, program line, TCP pose); docs/rtde.md has the protocol as pyaubo_sdk 0.24.1 speaks it. Each frame goes
to ``on_frame`` on the SDK's own thread, stamped with its arrival. A frame that does not parse is counted and
reported, never guessed at.

Hazard: a controller that accepts the connection and never greets blocks ``RtdeClient.connect()`` (and the GIL
of its process) until the socket closes. So a plain socket first checks that the port is reachable and greets
within ``connect_timeout``; the node runs this in the SDK host's child process, which its parent supervises,
should a greeting come on the probe and not on the SDK's own connection.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from transports.errors import BackendError

# Every RtdeClient this process made, kept alive. pyaubo_sdk 0.24.1 crashes the process (SIGSEGV on its own
# thread) when a client that streamed is destroyed or reused, and when removeTopic or disconnect race the frames
# still arriving (each reproduced on loopback at 500 Hz: within 60 open/close cycles, and removeTopic once in a
# suite run even after the stream had been drained). logout, then disconnect, with every client kept: none in 150
# cycles. The controller ends the stream when the connection closes (it forgets recipes on a new connection
# anyway). The cost is one idle SDK thread per client made: one at start, one per reset that reopened the stream.
_RETIRED: list[Any] = []


def retire(client: Any) -> None:
    """Close an RtdeClient the one way that did not crash the SDK (see _RETIRED); never raises."""
    for step in (client.logout, client.disconnect):
        with contextlib.suppress(Exception):  # closing must reach every step
            step()
    if client not in _RETIRED:
        _RETIRED.append(client)

FIELDS: Final = ("R1_actual_q", "R1_actual_qd", "R1_robot_mode", "R1_safety_mode", "runtime_state", "line_number",
                 "R1_actual_TCP_pose")  # fmt: skip
CHANNEL: Final = 0


@dataclass(frozen=True)
class RtdeFrame:
    arrived: float  # time.monotonic() on arrival
    q: np.ndarray
    qd: np.ndarray
    mode: int  # RobotModeType (type_def.h)
    safety: int  # SafetyModeType
    pose: list[float]  # TCP pose as the controller reports it (x, y, z, then its rotation triple)


class RtdeState:
    def __init__(self, ip: str, port: int, user: str, password: str, hz: float, connect_timeout: float,
                 on_frame: Callable[[RtdeFrame], None]) -> None:  # fmt: skip
        self.where = f"{ip}:{port} (RTDE)"
        self._ip, self._port, self._user, self._password = ip, port, user, password
        self._hz, self._connect_timeout, self._on_frame = hz, connect_timeout, on_frame
        self._client: Any = None
        self._lock = threading.Lock()
        self.frames = 0
        self.bad_frames = 0
        self.error: str | None = None  # the last frame that did not parse

    def open(self) -> None:
        """Connect, log in, send the recipe and subscribe; BackendError saying what failed."""
        import pyaubo_sdk

        self._probe()
        client = pyaubo_sdk.RtdeClient()
        _RETIRED.append(client)  # from here on never destroyed (see _RETIRED)
        if client.connect(self._ip, self._port) != 0:
            raise BackendError(f"RTDE connect to {self.where} failed (no greeting, or refused)")
        if client.login(self._user, self._password) != 0:
            retire(client)
            raise BackendError(f"RTDE login to {self.where} refused")
        channel = client.setTopic(False, list(FIELDS), float(self._hz), CHANNEL)
        if channel < 0:
            retire(client)
            raise BackendError(f"{self.where} does not offer the fields {list(FIELDS)}: recipe refused")
        client.subscribe(channel, self._frame)
        with self._lock:
            self._client = client

    def _probe(self) -> None:
        """A plain connection first: reachable, and greeting (the SDK's connect() would block for ever if not)."""
        timeout = self._connect_timeout
        try:
            probe = socket.create_connection((self._ip, self._port), timeout=timeout)
        except OSError as exc:
            raise BackendError(f"RTDE port {self.where} unreachable: {exc}") from None
        with probe:
            try:
                greeted = bool(probe.recv(1))
            except TimeoutError:
                raise BackendError(f"RTDE port {self.where} accepted the connection but sent no greeting within "
                                   f"{timeout:g} s (not an RTDE server, or a hung one)") from None  # fmt: skip
            except OSError as exc:
                raise BackendError(f"RTDE port {self.where} dropped the connection: {exc}") from None
        if not greeted:
            raise BackendError(f"RTDE port {self.where} closed the connection without a greeting")

    def connected(self) -> bool:
        with self._lock:
            client = self._client
        return bool(client is not None and client.hasConnected() and client.hasLogined())

    def _frame(self, parser: Any) -> None:
        arrived = time.monotonic()
        try:
            q, qd = np.asarray(parser.popVectorDouble(), float), np.asarray(parser.popVectorDouble(), float)
            mode, safety = int(parser.popRobotModeType()), int(parser.popSafetyModeType())
            parser.popRuntimeState()
            parser.popInt32()
            pose = [float(x) for x in parser.popVectorDouble()]
            if q.shape != (6,) or qd.shape != (6,) or len(pose) != 6 or not np.all(np.isfinite(q)):
                raise ValueError(f"shapes q {q.shape}, qd {qd.shape}, pose {len(pose)}")
        except Exception as exc:
            self.bad_frames += 1
            self.error = f"malformed RTDE frame from {self.where}: {type(exc).__name__}: {exc}"
            return
        self.frames += 1
        self._on_frame(RtdeFrame(arrived, q, qd, mode, safety, pose))

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            retire(client)
