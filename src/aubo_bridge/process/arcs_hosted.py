"""The ARCS-SDK arm as the aubo_bridge node runs it: in processes of its own.

:class:`HostedArcsArm` is the node-side ArmBackend; the device logic stays in
:class:`~aubo_bridge.backends.arcs.ArcsArmBackend`, which runs unchanged in the child
(:mod:`transports.process_host.host` says why and how; the tool-flange gripper is hosted
the same way, :mod:`gripper.ctag.hosted`). Every call has a deadline made of the backend's
own worst case; missing it is a BackendError, so the driver faults and
holds exactly as when the device itself refuses.

A child that died (crash, kill) is a fault at once and is restarted by the operator's
reset (``acknowledge_fault``), re-attaching to the arm without powering it on.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from aubo_bridge.backends.arcs import ArcsArmBackend
from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.backends.base import ArmMeasurement
from transports.errors import BackendError
from transports.process_host.host import REPLY_MARGIN, SdkProcess


def open_arm(config: ArcsConfig, startup: bool, poll: bool) -> ArcsArmBackend:
    """Child-side factory: a connected arm session (powered on and started up if ``startup``).

    The polling session is the arm's state session, and the one whose operator reset may
    restart the safety board and run the start-up path; the streaming session only re-attaches.
    """
    arm = ArcsArmBackend(config, recovers=poll)
    arm.connect(startup=startup, poll=poll)
    return arm


class HostedArcsArm:
    """ArmBackend: the AUBO-i5H through an ARCS controller, the SDK in two child processes.

    ``arcs-arm-servo`` streams (servo, hold) on its own session and ``arcs-arm-state`` polls
    on another: inside one process the SDK's GIL-held poll RPCs would delay servo targets
    by up to a reply each. The controller sees two logged-in clients, like the tool gripper's.
    """

    def __init__(self, config: ArcsConfig, clock: Callable[[], float] = time.monotonic, priority: int = 0) -> None:
        self.config = c = config
        self._state = SdkProcess("arcs-arm-state", open_arm, c.state_stale_after, clock=clock, priority=priority)
        self._motion = SdkProcess(
            "arcs-arm-servo", open_arm, c.state_stale_after, clock=clock, priority=priority, orphan_calls=("hold",)
        )
        rt = c.request_timeout
        # a servo target: its own call and queue-full retries, plus a period of slack.
        self._t_servo = (c.queue_full_retries + 1) * rt + c.servo_period + REPLY_MARGIN
        self._t_short = 2 * rt + REPLY_MARGIN
        self._t_reset = c.connect_timeout + 12 * rt + REPLY_MARGIN
        self._t_attach = c.connect_timeout + 20 * rt
        self._t_close = c.steady_timeout + 6 * rt + 1.0

    @property
    def polls(self) -> int:
        """State measurements received from the state process (rate figures)."""
        return self._state.updates

    @property
    def pids(self) -> dict[str, int | None]:
        return {"servo": self._motion.pid, "state": self._state.pid}

    def state_stats(self) -> dict[str, float]:
        """The state path's figures: measurements received, and their age (ms, from the state process's stamp:
        the RTDE frame's arrival or the poll's end) when they reached this process and when the driver read them."""
        host = self._state

        def p(ages: object, q: float) -> float:
            values = list(ages)  # type: ignore[call-overload]
            return float(np.percentile(values, q) * 1e3) if values else float("nan")

        return {"updates": float(host.updates),
                "arrival_age_p50_ms": p(host.arrival_ages, 50), "arrival_age_p99_ms": p(host.arrival_ages, 99),
                "read_age_p50_ms": p(host.read_ages, 50), "read_age_p99_ms": p(host.read_ages, 99)}  # fmt: skip

    def connect(self, startup: bool = True) -> None:
        """Start both processes: the state session powers on and starts up the arm (unless not ``startup``:
        re-attaching only), then the servo session attaches (errors as ArcsArmBackend's)."""
        c = self.config
        self._state.start(c, startup, True, timeout=c.connect_timeout + c.startup_timeout + 20 * c.request_timeout)
        try:
            self._motion.start(c, False, False, timeout=self._t_attach)
        except BaseException:
            self._state.stop()
            raise

    def read(self) -> ArmMeasurement:
        """The state process's latest measurement; a dead servo process is a fault too."""
        meas = self._state.read()
        if meas.fault is None and self._motion.link_error is not None:
            return replace(meas, fault=self._motion.link_error, ready=False)
        return meas

    def servo(self, q: np.ndarray) -> None:
        """Hand the target to the servo process and return; a refusal of an earlier target raises here."""
        self._motion.cast("servo", np.asarray(q, dtype=float), deadline=self._t_servo)

    def hold(self) -> None:
        """stopJoint after every target sent before; waits for it.

        With the servo process dead, the state session sends the stopJoint: the arm is held by the other
        logged-in client (the servo process's death stays a fault in read() until a reset restarts it).
        """
        try:
            self._motion.call("hold", timeout=self._t_servo + self._t_short)  # queued targets go first
        except BackendError:
            if self._motion.alive:
                # A refusal, or a hung process whose queued targets would still go out after another session's
                # stop: the driver retries every tick (once the process is gone, the state session stops the arm).
                raise
            self._state.call("hold", timeout=self._t_short)
        self._motion.forget_cast_errors()  # refusals of targets this hold supersedes

    def ping(self) -> float:
        """Round trip (s) of one RPC as the node sees it: pipe to the servo process, RPC, pipe back."""
        t0 = time.perf_counter()
        self._motion.call("ping", timeout=self._t_short)
        return time.perf_counter() - t0

    def acknowledge_fault(self) -> None:
        """Operator reset in both sessions (reconnect, unlock); a dead process is restarted first,
        re-attaching without powering the arm on."""
        c = self.config
        try:
            for host, poll in ((self._state, True), (self._motion, False)):  # the state session unlocks
                if not host.alive:
                    host.start(c, False, poll, timeout=self._t_attach)
                host.call("acknowledge_fault", timeout=self._t_reset)
        finally:
            with contextlib.suppress(BackendError):  # the next read shows the reset's outcome
                self._state.refresh(timeout=self._t_short)

    def close(self) -> None:
        """The servo session first (it leaves servo mode once the arm is steady), then the state session."""
        self._motion.stop(timeout=self._t_close)
        self._state.stop(timeout=self._t_close)

