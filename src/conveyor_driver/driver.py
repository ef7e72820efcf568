"""Conveyor driver: validated start / stop / set-speed over a belt backend.

Belt speed is in m/s along the belt's transport direction. Safety lives
here: speeds outside [0, max_speed] or non-finite are rejected, and a
backend fault latches until :meth:`reset_fault`.

Every command answers only after the drive confirmed it (a backend returns from
``run`` / ``halt`` / ``emergency_stop`` once the drive acknowledged, and raises
otherwise): the state says what was commanded and whether the drive confirmed
it. A stop the drive did not confirm latches a fault; an emergency stop it did
not confirm is a loud fault and is re-sent until the drive confirms it.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, replace
from typing import Protocol

from transports.errors import BackendError

log = logging.getLogger(__name__)

# What the backends raise when the drive refuses or does not confirm a command (their links' errors included).
COMMAND_ERRORS = (BackendError,)
# A stop that raised anything at all is not confirmed: the fault latches (a backend's bug must not look like a
# stopped belt, nor end the node that would latch it).
STOP_ERRORS = (Exception,)
ESTOP_RETRY_PERIOD = 0.2  # s between re-sent emergency stops the drive has not confirmed


class ConveyorError(ValueError):
    pass


@dataclass(frozen=True)
class BeltState:
    stamp: float  # driver clock (s)
    position: float  # m of belt travel since start-up
    speed: float  # m/s, measured
    running: bool  # the drive runs the belt, as far as it confirmed
    fault: str | None
    commanded: str = "stop"  # what the stack last commanded: "run", "stop" or "emergency_stop"
    confirmed: bool = True  # the drive confirmed that command


class ConveyorBackend(Protocol):
    """Each command returns once the drive confirmed it and raises (RuntimeError, ValueError,
    OSError) if the drive refused it or did not confirm it in time."""

    def read(self) -> BeltState: ...

    def run(self, speed: float) -> None: ...

    def halt(self) -> None: ...

    def emergency_stop(self) -> None:
        """Stop as fast as the drive can (its quick-stop / e-stop command)."""

    def acknowledge_fault(self) -> None:
        """Operator reset of the drive's alarm. Never starts the belt."""

    def close(self) -> None: ...

@dataclass(frozen=True)
class ConveyorConfig:
    speed: float = 0.03  # m/s, initial set speed
    max_speed: float = 0.20  # m/s

    def __post_init__(self) -> None:
        if not (math.isfinite(self.max_speed) and self.max_speed > 0):
            raise ConveyorError(f"max_speed must be positive, got {self.max_speed!r}")
        check_speed(self.speed, self.max_speed)


def check_speed(speed: float, max_speed: float) -> float:
    try:
        v = float(speed)
    except (TypeError, ValueError) as exc:
        raise ConveyorError(f"belt speed must be a number, got {speed!r}") from exc
    if not math.isfinite(v) or v < 0 or v > max_speed:
        raise ConveyorError(f"belt speed {speed!r} m/s outside [0, {max_speed}]")
    return v


class ConveyorDriver:
    def __init__(self, config: ConveyorConfig, backend: ConveyorBackend) -> None:
        self.config = config
        self._backend = backend
        self._cmd_lock = threading.Lock()  # one command at a time (each waits for the drive)
        self._lock = threading.Lock()  # the state below; never held while waiting for the drive
        self._speed = config.speed
        self._running = False
        self._fault: str | None = None
        self._commanded = "stop"
        self._confirmed = True
        self._estop_error: str | None = None  # an emergency stop the drive has not confirmed (yet)
        self._closed = threading.Event()
        self._estop_thread: threading.Thread | None = None

    @property
    def set_speed_value(self) -> float:
        return self._speed

    def _command(self, what: str) -> None:
        with self._lock:
            self._commanded, self._confirmed = what, False

    def _confirm(self, running: bool) -> None:
        with self._lock:
            self._confirmed, self._running = True, running

    def start(self) -> tuple[bool, str]:
        with self._cmd_lock:
            if self._fault:
                return False, f"conveyor in fault: {self._fault}"
            self._command("run")
            try:
                self._backend.run(self._speed)
            except COMMAND_ERRORS as exc:  # refused or unconfirmed: say so, and make sure it stays stopped
                why = f"drive refused or did not confirm running at {self._speed:.3f} m/s: {exc}"
                return False, f"{why}; {self._halt_after_failure()}"
            self._confirm(running=True)
            return True, f"running at {self._speed:.3f} m/s (confirmed by the drive)"

    def _halt_after_failure(self) -> str:
        """After a failed run: command a stop, so a drive in an unknown state does not keep going."""
        self._command("stop")
        try:
            self._backend.halt()
        except STOP_ERRORS as exc:
            self._latch(f"stop not confirmed by the drive: {exc}")
            return f"the stop sent after it was not confirmed either ({exc}): fault latched"
        self._confirm(running=False)
        return "belt commanded stopped (confirmed)"

    def stop(self) -> tuple[bool, str]:
        with self._cmd_lock:
            self._command("stop")
            try:
                self._backend.halt()
            except STOP_ERRORS as exc:
                reason = f"stop not confirmed by the drive: {exc}"
                self._latch(reason)
                return False, f"{reason}; the belt may still run: use the hardware stop"
            self._confirm(running=False)
            return True, "stopped (confirmed by the drive)"

    def set_speed(self, speed: float) -> tuple[bool, str]:
        with self._cmd_lock:
            previous = self._speed
            try:
                self._speed = speed = check_speed(speed, self.config.max_speed)
            except ConveyorError as exc:
                return False, str(exc)
            if self._running and not self._fault:
                try:
                    self._backend.run(speed)
                except COMMAND_ERRORS as exc:  # the drive keeps its confirmed run (a dead link shows in read())
                    self._speed = previous
                    return False, f"drive refused {speed:.3f} m/s (kept {previous:.3f} m/s): {exc}"
            return True, f"speed set to {self._speed:.3f} m/s"

    def emergency_stop(self) -> tuple[bool, str]:
        """Quick-stop the drive and latch a fault: restarting needs reset_fault, then start.

        Unconfirmed, it is a loud fault (logged as an error, on the state and in the answer)
        and is re-sent every ESTOP_RETRY_PERIOD until the drive confirms it.
        """
        with self._cmd_lock:
            self._latch("emergency stop requested")
            self._command("emergency_stop")
            error = self._try_estop()
            if error is None:
                return True, "emergency stop: belt stopped (confirmed by the drive); reset_fault, then start, to run"
            self._start_estop_retries()
            return False, f"EMERGENCY STOP NOT CONFIRMED by the drive ({error}): re-sending; use the hardware e-stop"

    def _try_estop(self) -> str | None:
        """One emergency stop; None once the drive confirmed it, else why not."""
        try:
            self._backend.emergency_stop()
        except STOP_ERRORS as exc:
            with self._lock:
                self._estop_error = f"emergency stop not confirmed by the drive: {exc}"
            log.error("conveyor: %s", self._estop_error)
            return str(exc)
        with self._lock:
            self._estop_error = None
        self._confirm(running=False)
        return None

    def _start_estop_retries(self) -> None:
        if self._estop_thread is not None and self._estop_thread.is_alive():
            return

        def retry() -> None:
            while not self._closed.wait(ESTOP_RETRY_PERIOD):
                with self._cmd_lock:
                    if self._commanded != "emergency_stop" or self._try_estop() is None:
                        return

        self._estop_thread = threading.Thread(target=retry, name="conveyor-estop-retry", daemon=True)
        self._estop_thread.start()

    def reset_fault(self) -> tuple[bool, str]:
        with self._cmd_lock:
            if self._estop_error is not None:
                return False, f"{self._estop_error}: the belt may still run; use the hardware e-stop"
            try:
                self._backend.acknowledge_fault()
                state = self._backend.read()
            except COMMAND_ERRORS as exc:
                return False, f"drive refused the reset: {exc}"
            if state.fault:
                return False, f"fault still present: {state.fault}"
            if not self._confirmed:  # the last stop never got through: send it again before clearing
                self._command("stop")
                try:
                    self._backend.halt()
                except STOP_ERRORS as exc:
                    return False, f"fault kept: the drive still does not confirm a stop: {exc}"
                self._confirm(running=False)
            with self._lock:
                self._fault = None
            return True, "fault cleared; conveyor stopped until started"

    def close(self) -> None:
        """Release the drive (after stop)."""
        self._closed.set()
        with self._cmd_lock:
            self._backend.close()

    def _latch(self, reason: str) -> None:
        with self._lock:
            if not self._fault:
                self._fault = reason

    def read(self) -> BeltState:
        """The backend's state with the driver's fault latch, command and confirmation; never waits on the drive."""
        state = self._backend.read()
        halt = False
        with self._lock:
            if state.fault and not self._fault:
                self._fault = state.fault
                halt = self._running
                self._running = False
            fault = self._estop_error or self._fault
            out = replace(
                state,
                running=state.running and self._confirmed and fault is None,
                fault=fault,
                commanded=self._commanded,
                confirmed=self._confirmed,
            )
        if halt:  # a drive fault while running: stop it, off this (publishing) thread
            threading.Thread(target=self._halt_after_fault, name="conveyor-fault-halt", daemon=True).start()
        return out

    def _halt_after_fault(self) -> None:
        with self._cmd_lock:
            if self._commanded == "emergency_stop":
                return
            self._command("stop")
            try:
                self._backend.halt()
            except STOP_ERRORS as exc:
                log.error("conveyor: stop after a drive fault not confirmed: %s", exc)
                return
            self._confirm(running=False)
