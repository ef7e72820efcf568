"""One authenticated JSON-RPC session with an ARCS controller (``pyaubo_sdk.RpcClient``).

The connect / login sequence and the one SDK lock, for any device that talks to the arm
controller (the arm backend, a conveyor relay on a controller digital output, ...):

* TCP reachability probe first (bounded time: the SDK's own ``connect()`` can block with
  the GIL held), then ``connect()`` (-8 refused, -15 interface version mismatch),
  ``login()`` (a rejected login shows as ``AuboException`` from its own follow-up
  ``getRobotNames``), then ``getRobotInterface(getRobotNames()[0])``;
* every SDK call, ``hasConnected()`` included, under one re-entrant lock (a reconnect
  racing another thread's ``hasConnected()`` segfaulted in the SDK);
* after the controller drops the socket the same client reconnects with :meth:`open`.

Each session is its own TCP connection: two sessions to one controller do not share a lock,
which the SDK does not need (the lock guards one client object).
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from transports.errors import BackendError

log = logging.getLogger(__name__)

# Return codes of the motion calls (motion_control.h) where they differ from AuboErrorCodes.
RETURN_MEANINGS = {
    2: "planning queue full",
    -1: "bad state (robot not Running or in a safety stop)",
    -5: "invalid argument: joint limits or target out of range",
    -13: "not in servo mode",
    -23: "IK did not converge",
    -24: "IK out of range",
    -25: "IK configuration mismatch",
    -26: "IK Jacobian failed",
    -27: "IK has no solution",
    -28: "IK unknown error",
}


def code_meaning(code: int) -> str:
    """Human-readable meaning of an SDK return code, for error messages."""
    if code in RETURN_MEANINGS:
        return f"{code} ({RETURN_MEANINGS[code]})"
    try:
        import pyaubo_sdk

        return f"{code} ({pyaubo_sdk.returnValue2Str(abs(code))})"
    except Exception:
        return str(code)


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


def _sdk_log(level: int, source: str, line: int, message: str) -> None:
    """Route the SDK's console log into Python logging (0 fatal .. 4 debug).

    The SDK warns that the login reply is not JSON-RPC and echoes the login frame, password
    digest included: that message is redacted (login itself is checked by the next RPC).
    """
    if "__login__" in message:
        message, level = "login reply is not JSON-RPC (SDK warning; login is checked by the next call)", 4
    log.log({0: logging.CRITICAL, 1: logging.ERROR, 2: logging.WARNING}.get(level, logging.DEBUG), "%s", message)




class ArcsSession:
    """``open()`` connects and logs in; ``call(fn, *args)`` runs one SDK call under the lock."""

    def __init__(
        self,
        ip: str,
        port: int = 30004,
        user: str = "aubo",
        password: str = "123456",
        connect_timeout: float = 2.0,
        request_timeout: float = 0.1,
    ) -> None:
        self.ip, self.port, self.user, self.password = ip, port, user, password
        self.connect_timeout, self.request_timeout = connect_timeout, request_timeout
        self.lock = threading.RLock()
        self.rpc: Any = None
        self.robot: Any = None  # RobotInterface of the controller's first robot, after open()

    @property
    def where(self) -> str:
        return f"{self.ip}:{self.port}"

    @property
    def login_timeout(self) -> float:
        """s for each reply of the log-in (connect, login, robot lookup): not time-critical, unlike the calls after."""
        return max(self.request_timeout, self.connect_timeout)

    def open(self) -> Any:
        """Probe, connect, log in; returns the RobotInterface. Reuses the client on a reconnect."""
        import pyaubo_sdk

        if not self.ip:
            raise BackendError("ARCS controller ip is not configured")
        with self.lock:
            if self.rpc is None:
                self.rpc = pyaubo_sdk.RpcClient()
                self.rpc.setLogHandler(_sdk_log)
            rpc = self.rpc
            # connect() asks the interface version over RPC (-7 when its reply is later than the request timeout):
            # the whole log-in runs under the connect timeout, the calls after it under the short request timeout
            rpc.setRequestTimeout(_ms(self.login_timeout))
            try:
                return self._log_in(rpc)
            finally:
                rpc.setRequestTimeout(_ms(self.request_timeout))

    def _log_in(self, rpc: Any) -> Any:
        """Probe, connect, log in, look up the robot (under the lock, with the connect timeout per request)."""
        import pyaubo_sdk

        where = self.where
        try:
            socket.create_connection((self.ip, self.port), timeout=self.connect_timeout).close()
        except ConnectionRefusedError as exc:
            raise BackendError(f"ARCS controller at {where} refused the connection (RPC server down?)") from exc
        except OSError as exc:
            raise BackendError(f"ARCS controller at {where} unreachable: {exc}") from exc
        ret = rpc.connect(self.ip, self.port)
        if ret == -8:
            raise BackendError(f"ARCS controller at {where} refused the connection")
        if ret == -15:
            raise BackendError(
                f"ARCS controller at {where}: interface version mismatch between pyaubo_sdk and the "
                "controller (install the pyaubo-sdk matching the controller's ARCS version)"
            )
        if ret == -7:
            raise BackendError(f"connect to ARCS controller at {where}: no answer to the interface version request "
                               f"within {self.login_timeout:g} s (a controller that "
                               "closes the connection, or one too busy)")
        if ret != 0:
            raise BackendError(f"connect to ARCS controller at {where} failed: {code_meaning(ret)}")
        try:
            ret = rpc.login(self.user, self.password)
        except pyaubo_sdk.AuboException as exc:
            rpc.disconnect()
            raise BackendError(
                f"login to {where} as {self.user!r} rejected (wrong user or password?): {exc}"
            ) from exc
        if ret != 0 or not rpc.hasLogined():
            rpc.disconnect()
            raise BackendError(f"login to {where} as {self.user!r} failed: {code_meaning(ret)}")
        names = self.call(rpc.getRobotNames)
        if not names:
            rpc.disconnect()
            raise BackendError(f"ARCS controller at {where} reports no robot")
        self.robot = self.call(rpc.getRobotInterface, names[0])
        return self.robot

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """One SDK call under the lock, SDK exceptions turned into BackendError."""
        import pyaubo_sdk

        with self.lock:
            try:
                return fn(*args)
            except pyaubo_sdk.AuboException as exc:
                raise BackendError(f"ARCS {self.where}: {exc}") from exc

    def connected(self) -> bool:
        with self.lock:
            return self.rpc is not None and bool(self.rpc.hasConnected())

    def close(self, before_logout: Callable[[], None] | None = None) -> None:
        """``before_logout()`` (if the link is up), log out, disconnect, drop the SDK objects. Never raises."""
        with self.lock:
            rpc, self.rpc = self.rpc, None
            if rpc is None:
                return
            try:
                if rpc.hasConnected():
                    if before_logout is not None:
                        before_logout()
                    rpc.logout()
                rpc.disconnect()
            except Exception as exc:  # closing must not raise: the link may be gone already
                log.warning("ARCS %s close: %s", self.where, exc)
            # Drop the SDK objects now: the client's I/O thread must not outlive close() and
            # call the Python log handler later (e.g. during interpreter shutdown).
            self.robot = None
            del rpc
