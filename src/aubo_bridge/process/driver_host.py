"""The arm driver and its servo loop in a process of their own, out of reach of the node's Python threads.

Why: in the node's process the servo thread shares one GIL with the rclpy executor, the
diagnostics timer, the action subscription and whatever else the node runs, and its period error
grows with their load (figures: docs/interfaces.md, the `driver_host` parameter). Here the whole
:class:`~aubo_bridge.driver.ArmDriver` (validation, source arbitration, the action response, the
per-tick limiter, the watchdog, the fault latch) runs unchanged in a child process
(:mod:`transports.process_host.host` hosts it), its servo loop at real-time priority, and the node
only forwards to it:

* every action goes to the child as it arrived, and the child validates and applies it exactly as
  the in-node driver does; the node waits for the verdict only to publish
  it, and the servo loop never waits for an action;
* the child pushes the driver's status after every servo tick; the node's ``status()`` never
  waits on anything, and ages it by its own clock: a hung or dead driver process reads as FAULT
  within ``stale_after``, never as a frozen good state;
* a node that disappears (its pipe ends) or terminates the child makes the child stop the arm
  (``ArmDriver.stop``: a hold) and close the devices; a driver process that dies leaves its own
  SDK processes orphaned, and they hold the arm as they exit (sdk_host's orphan calls);
* the operator's reset restarts a dead driver process, re-attaching to the arm without powering
  it on; the new driver starts DISABLED.

The devices are built in the child (``backends.make_backends``), so the arm's SDK sessions and
the gripper's bus are the child's: nothing that moves the arm passes through the node's GIL.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from aubo_bridge.arbiter import ArbiterError
from aubo_bridge.backends.base import ArmBackend
from aubo_bridge.backends.factory import make_backends
from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ActionResult, ArmDriver, ArmMode, ArmStatus
from gripper import registry
from gripper.base import GripperBackend
from libero_workcell.kernels import compile_kernels
from libero_workcell.rate import CONTROL_PRIORITY, RateLoop, set_realtime_priority, sleep_until
from transports.errors import BackendError
from transports.process_host.host import SdkProcess

DRIVER_HOSTS = ("process", "node")  # the node parameter driver_host: a child process (default), or the node's thread
# The servo thread waits for the GIL at most this long when another thread of the driver process runs Python
# (the interpreter's default is 5 ms; set_realtime_priority's 1 ms is a whole servo tick's margin).
SWITCH_INTERVAL = 0.0002  # s
# Each target is computed at its servo tick and sent this share of a servo period later, on its own deadline.
SEND_LEAD = 0.25
LOOP_STATS_PERIOD = 0.5  # s between the servo loop's figures in the pushed status (diagnostics read them at 1 Hz)


@dataclass(frozen=True)
class LoopStats:
    """The servo loop as diagnostics report it, wherever it runs."""

    p99_ms: float
    overruns: int
    errors: int
    alive: bool
    priority_note: str | None = None

    @classmethod
    def of(cls, loop: RateLoop, thread: threading.Thread, sends: RateLoop | None = None) -> LoopStats:
        """``sends``: where the loop records when targets went out, if not at its own ticks."""
        timing = (sends or loop).period_error_stats()["p99_ms"]
        return cls(timing, loop.overruns, loop.errors, thread.is_alive(), loop.priority_note)


@dataclass(frozen=True)
class DriverSpec:
    """Everything the child needs to build the devices and the driver (the node's parameters)."""

    config: ArmConfig
    use_sim: bool
    sim_link: str
    arcs: dict[str, Any]
    gripper: dict[str, dict[str, Any]]  # the gripper parameters by prefix (gripper.*, gripper_tool.*, ...)
    gripper_path: str
    active_source: str
    gripper_model: str = registry.DEFAULT_MODEL
    startup: bool = True  # power on and start up the arm (False: a restart re-attaches only)

    def build(self, sim_clock: Callable[[], float] | None = None) -> tuple[ArmDriver, ArmBackend, GripperBackend]:
        """Connect the devices and put a driver on them (in the driver process, or in the node). ``sim_clock``:
        the simulated world's clock, which the driver then runs on (lockstep)."""
        # The servo path's kernels first: loading them holds the GIL for about a second, which a device session's
        # threads (an SDK's replies, a poll) must not wait behind once connected.
        compile_kernels()
        arm, gripper = make_backends(self.use_sim, self.sim_link, self.config, self.arcs, self.gripper,
                                     self.gripper_path, self.gripper_model, startup=self.startup,
                                     sim_clock=sim_clock)  # fmt: skip
        clock = {} if sim_clock is None else {"clock": sim_clock}
        return ArmDriver(self.config, arm, gripper, active_source=self.active_source, **clock), arm, gripper


@dataclass(frozen=True)
class DriverSnapshot:
    """What the child pushes: the driver's status and its servo loop's health."""

    stamp: float  # the child's clock when taken (the node replaces it with its own on read)
    status: ArmStatus
    loop: LoopStats
    fault: str | None = None  # the link's view, set on the node side (dead, hung, silent child)
    pids: dict[str, int | None] = field(default_factory=dict)  # the child's own SDK processes


class DriverService:
    """Child side: the devices, the driver and its servo loop; sdk_host calls these methods."""

    def __init__(self, spec: DriverSpec) -> None:
        self.config = spec.config
        self.driver, arm, gripper = spec.build()
        self._pids = {**getattr(arm, "pids", {}), **getattr(gripper, "pids", {})}
        self._arm_stats = getattr(arm, "state_stats", dict)
        self.on_update: Any = None  # sdk_host's push
        self._stop = threading.Event()
        self._loop = RateLoop(spec.config.servo_hz)  # when each target is computed
        self._sends = RateLoop(spec.config.servo_hz)  # when each goes out: what the arm feels
        self._stats, self._stats_at = LoopStats(float("nan"), 0, 0, True), -float("inf")
        started = threading.Event()
        self._thread = threading.Thread(target=self._serve, args=(started,), name="servo", daemon=True)
        self._thread.start()
        started.wait(timeout=1.0)

    def _serve(self, started: threading.Event) -> None:
        """The servo loop: compute each target at its tick, send it SEND_LEAD later, on a deadline of its own,
        then push the status.

        Computing takes a varying share of the period (IK, the limiter, an action applied meanwhile); sent
        as soon as computed, that variation would be the stream's jitter. A hold that comes between the two
        halves voids the target (ArmDriver.send_tick), as in ArmDriver.tick.
        """
        self._loop.priority_note = set_realtime_priority(CONTROL_PRIORITY)
        sys.setswitchinterval(SWITCH_INTERVAL)  # after set_realtime_priority, which sets 1 ms
        started.set()
        lead = SEND_LEAD * self.config.servo_period
        while self._loop.sleep(self._stop):
            try:
                prepared = self.driver.prepare_tick()
                deadline = self._loop.deadline
                if not sleep_until(lead + (deadline if deadline is not None else 0.0), stop=self._stop):
                    break
                self._sends.record(time.perf_counter())
                self.driver.send_tick(prepared)
                push = self.on_update  # after the send: the node's state as fresh as the tick's (closed loops)
                if push is not None:
                    push()
            except Exception as exc:  # never raised by the driver's halves; the loop must not die regardless
                self._loop.errors += 1
                self._loop.last_error = f"{type(exc).__name__}: {exc}"

    def read(self) -> DriverSnapshot:
        now = time.monotonic()
        if now - self._stats_at >= LOOP_STATS_PERIOD:  # percentiles over thousands of periods: not every tick
            self._stats, self._stats_at = LoopStats.of(self._loop, self._thread, sends=self._sends), now
        return DriverSnapshot(now, self.driver.status(), replace(self._stats, alive=self._thread.is_alive()),
                              pids=self._pids)  # fmt: skip

    def submit_action(self, action: Any, source: str, turn: int = 0) -> ActionResult:
        return self.driver.submit_action(action, source, turn)

    def state_stats(self) -> dict[str, float]:
        """The arm backend's state-path figures (HostedArcsArm.state_stats), where it has them."""
        return self._arm_stats()

    def reject_message(self, source: str, reason: str) -> ActionResult:
        return self.driver.reject_message(source, reason)

    def enable(self) -> tuple[bool, str]:
        return self.driver.enable()

    def stop(self) -> tuple[bool, str]:
        return self.driver.stop()

    def home(self) -> tuple[bool, str]:
        return self.driver.home()

    def reset_fault(self) -> tuple[bool, str]:
        return self.driver.reset_fault()

    def select_source(self, source: str) -> None:
        try:
            self.driver.arbiter.select(source)
        except ArbiterError as exc:
            raise BackendError(str(exc)) from None

    def close(self) -> None:
        """Stop the servo loop, then hold and release the devices (ArmDriver.close)."""
        self._stop.set()
        self._thread.join(timeout=1.0)
        self.driver.close()


def open_driver(spec: DriverSpec) -> DriverService:
    """Child-side factory (sdk_host builds it from this module-level function)."""
    return DriverService(spec)


class HostedDriver:
    """Node side: the ArmDriver's interface, served by the driver process.

    Calls that change the driver (actions, enable, stop, home, reset, the source) wait for the
    child's answer with a deadline; a missed deadline or a dead child is the answer "no", with the
    reason, never a silent success. ``status()`` is the latest push, aged by the node.
    """

    def __init__(self, spec: DriverSpec, call_timeout: float = 1.0, reset_timeout: float = 60.0) -> None:
        self.config = spec.config
        self._spec = spec
        # On the real arm the whole process is real-time, so no thread that holds its GIL is preempted by the
        # node's (p99 2.6 -> 0.6 ms at the emulator). On the simulated one only its servo thread is: the MuJoCo
        # world shares these cores, and real-time threads beside it made it fall behind the wall clock.
        priority = 0 if spec.use_sim else CONTROL_PRIORITY
        self._host = SdkProcess("arm-driver", open_driver, spec.config.state_stale_after, priority=priority,
                                orphan_calls=("stop",))  # fmt: skip
        self._t_call = call_timeout
        self._t_reset = reset_timeout  # a reset may reconnect, restart the safety board and start the arm up

    @property
    def pid(self) -> int | None:
        return self._host.pid

    @property
    def pids(self) -> dict[str, int | None]:
        """The driver process and its own SDK processes (for ps / top / kill)."""
        try:
            children = self._host.read().pids
        except BackendError:
            children = {}
        return {"driver": self._host.pid, **children}

    def start(self) -> None:
        """Start the child, which connects the devices (powering the arm on if the spec says so)."""
        self._host.start(self._spec, timeout=self._t_reset)

    def snapshot(self) -> DriverSnapshot:
        """The latest push; a dead, hung or silent child shows as FAULT with the reason."""
        try:
            snap = self._host.read()
        except BackendError as exc:
            raise BackendError(f"arm driver: {exc}") from None
        if snap.fault is None:
            return snap
        status = replace(snap.status, mode=ArmMode.FAULT, fault=snap.fault, last_error=snap.fault,
                         hold_confirmed=False)  # fmt: skip
        return replace(snap, status=status, loop=replace(snap.loop, alive=False))

    def status(self) -> ArmStatus:
        return self.snapshot().status

    @property
    def mode(self) -> ArmMode:
        return self.status().mode

    @property
    def active_source(self) -> str:
        return self.status().active_source

    def loop_stats(self) -> LoopStats:
        return self.snapshot().loop

    def state_stats(self) -> dict[str, float]:
        """The arm's state path as the driver process sees it (benchmarks)."""
        return self._call("state_stats")

    def _call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        return self._host.call(method, *args, timeout=self._t_call if timeout is None else timeout)

    def submit_action(self, action: object, source: str, turn: int = 0) -> ActionResult:
        try:
            return self._call("submit_action", action, source, turn)  # validated in the child, as in the node
        except BackendError as exc:
            return ActionResult(False, f"arm driver: {exc}")

    def reject_message(self, source: str, reason: str) -> ActionResult:
        try:
            return self._call("reject_message", source, reason)
        except BackendError as exc:
            return ActionResult(False, f"arm driver: {exc}")

    def _trigger(self, method: str, timeout: float | None = None) -> tuple[bool, str]:
        try:
            return self._call(method, timeout=timeout)
        except BackendError as exc:
            return False, f"arm driver: {exc}"
        finally:
            self._refresh()

    def _refresh(self) -> None:
        """Fetch the status now: what a command did shows in the next status(), not a push later."""
        with contextlib.suppress(BackendError):
            self._host.refresh(timeout=self._t_call)

    def enable(self) -> tuple[bool, str]:
        return self._trigger("enable")

    def stop(self) -> tuple[bool, str]:
        return self._trigger("stop")

    def home(self) -> tuple[bool, str]:
        return self._trigger("home")

    def reset_fault(self) -> tuple[bool, str]:
        """The driver's reset; a dead driver process is restarted first (re-attaching, not powering on)."""
        if not self._host.alive:
            try:
                self._host.start(replace(self._spec, startup=False), timeout=self._t_reset)
            except BackendError as exc:
                return False, f"arm driver process could not be restarted: {exc}"
        return self._trigger("reset_fault", timeout=self._t_reset)

    def select_source(self, source: str) -> None:
        """Raises ArbiterError with the driver's reason when refused."""
        try:
            self._call("select_source", source)
        except BackendError as exc:
            raise ArbiterError(str(exc)) from None
        finally:
            self._refresh()

    def close(self) -> None:
        """The child stops its servo loop, holds and releases the devices, then exits."""
        self._host.stop(timeout=self._t_reset)

