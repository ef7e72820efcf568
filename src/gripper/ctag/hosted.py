"""The tool-flange CTAG2F90D as the aubo_bridge node runs it: the ARCS SDK in a child process of its own.

:class:`HostedToolGripper` is the node-side GripperBackend; the device logic stays in
:class:`~gripper.ctag.tool_backend.CtagToolGripperBackend`, which runs unchanged in the child
(:mod:`transports.process_host.host` says why: the SDK holds the GIL for every RPC). Every call has a
deadline made of the backend's own worst case; missing it is a BackendError, so the driver faults and
holds exactly as when the gripper itself refuses.

A child that died (crash, kill) is a fault at once and is restarted by the operator's reset
(``acknowledge_fault``), without a second enable: the enable runs a calibration stroke.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

from gripper.base import GripperMeasurement
from gripper.ctag.tool_backend import CtagToolConfig, CtagToolGripperBackend
from transports.errors import BackendError
from transports.process_host.host import REPLY_MARGIN, SdkProcess


def open_tool_gripper(config: CtagToolConfig, enable: bool) -> CtagToolGripperBackend:
    """Child-side factory: a configured tool gripper (enabled only on the first start)."""
    return CtagToolGripperBackend(config, enable=enable)


class HostedToolGripper:
    """GripperBackend: the CTAG2F90D on the tool flange through the controller, the SDK in a child process."""

    def __init__(self, config: CtagToolConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = c = config
        self._host = SdkProcess("arcs-tool-gripper", open_tool_gripper, c.max_age, clock=clock)
        self._t_short = 2 * c.request_timeout + REPLY_MARGIN
        self._t_reset = c.connect_timeout + 20 * c.request_timeout + REPLY_MARGIN
        self._t_attach = c.connect_timeout + 20 * c.request_timeout
        self._settings: tuple[int, int] | None = None  # set_speed_force since start, re-applied after a restart

    @property
    def polls(self) -> int:
        return self._host.updates

    @property
    def pids(self) -> dict[str, int | None]:
        return {"tool": self._host.pid}

    def connect(self) -> None:
        self._host.start(self.config, True, timeout=self._t_attach)

    def read(self) -> GripperMeasurement:
        return self._host.read()

    def command(self, coord: float) -> None:
        """Queued in the child (its poll thread writes it): answers at once."""
        self._host.call("command", float(coord), timeout=self._t_short)

    def set_speed_force(self, speed: int, force: int) -> None:
        self._host.call("set_speed_force", int(speed), int(force), timeout=self._t_short)
        self._settings = (int(speed), int(force))

    def acknowledge_fault(self) -> None:
        """Reset in the child; a dead child is restarted first, without a second enable."""
        if not self._host.alive:
            self._host.start(self.config, False, timeout=self._t_attach)
            if self._settings is not None:
                self._host.call("set_speed_force", *self._settings, timeout=self._t_short)
        try:
            self._host.call("acknowledge_fault", timeout=self._t_reset)
        finally:
            with contextlib.suppress(BackendError):  # the next read shows the reset's outcome
                self._host.refresh(timeout=self._t_short)

    def close(self) -> None:
        self._host.stop(timeout=2.0 + 4 * self.config.request_timeout)
