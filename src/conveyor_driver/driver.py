"""Conveyor driver: validated start / stop / set-speed over a belt backend.

Belt speed is in m/s along the belt's transport direction. Safety lives
here: speeds outside [0, max_speed] or non-finite are rejected, and a
backend fault latches until :meth:`reset_fault`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


class ConveyorError(ValueError):
    pass


@dataclass(frozen=True)
class BeltState:
    stamp: float  # driver clock (s)
    position: float  # m of belt travel since start-up
    speed: float  # m/s, measured
    running: bool
    fault: str | None


class ConveyorBackend(Protocol):
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
    def __init__(self, config: ConveyorConfig, backend: ConveyorBackend, clock: Callable[[], float] = time.monotonic):
        self.config = config
        self._backend = backend
        self._clock = clock
        self._lock = threading.Lock()
        self._speed = config.speed
        self._running = False
        self._fault: str | None = None

    @property
    def set_speed_value(self) -> float:
        return self._speed

    def start(self) -> tuple[bool, str]:
        with self._lock:
            if self._fault:
                return False, f"conveyor in fault: {self._fault}"
            try:
                self._backend.run(self._speed)
            except (RuntimeError, ValueError, OSError) as exc:  # the drive refused: say so, stay stopped
                return False, f"drive refused to run at {self._speed:.3f} m/s: {exc}"
            self._running = True
            return True, f"running at {self._speed:.3f} m/s"

    def stop(self) -> tuple[bool, str]:
        with self._lock:
            self._backend.halt()
            self._running = False
            return True, "stopped"

    def set_speed(self, speed: float) -> tuple[bool, str]:
        with self._lock:
            previous = self._speed
            try:
                self._speed = speed = check_speed(speed, self.config.max_speed)
            except ConveyorError as exc:
                return False, str(exc)
            if self._running and not self._fault:
                try:
                    self._backend.run(speed)
                except (RuntimeError, ValueError, OSError) as exc:
                    self._speed = previous
                    return False, f"drive refused {speed:.3f} m/s (kept {previous:.3f} m/s): {exc}"
            return True, f"speed set to {self._speed:.3f} m/s"

    def emergency_stop(self) -> tuple[bool, str]:
        """Quick-stop the drive and latch a fault: restarting needs reset_fault, then start."""
        with self._lock:
            self._backend.emergency_stop()
            self._running = False
            self._fault = "emergency stop requested"
            return True, "emergency stop: belt stopped; reset_fault, then start, to run again"

    def reset_fault(self) -> tuple[bool, str]:
        with self._lock:
            self._backend.acknowledge_fault()
            state = self._backend.read()
            if state.fault:
                return False, f"fault still present: {state.fault}"
            self._fault = None
            return True, "fault cleared; conveyor stopped until started"

    def close(self) -> None:
        """Release the drive (after stop)."""
        with self._lock:
            self._backend.close()

    def read(self) -> BeltState:
        with self._lock:
            state = self._backend.read()
            if state.fault and not self._fault:
                self._fault = state.fault
                self._running = False
                self._backend.halt()
            return BeltState(state.stamp, state.position, state.speed, state.running, self._fault)
