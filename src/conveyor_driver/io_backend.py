"""Conveyor belt switched by a relay on a standard digital output of the AUBO arm controller.

No bus to the drive: the belt runs at one fixed speed while the relay is on
(HARDWARE.md, "Conveyor": ``IoControl.setStandardDigitalOutput(index, bool)``). The
output is driven over the controller's JSON-RPC port through ``pyaubo_sdk``
(:class:`transports.arcs.session.ArcsSession`), as ``rob1.IoControl.setStandardDigitalOutput``
``{"index", "value"}`` and read back as ``rob1.IoControl.getStandardDigitalOutput {"index"}``.

* ``run(speed)`` accepts only ``nominal_speed`` (a relay cannot set a speed), switches
  the output on and checks that the controller reports it on;
* ``halt()`` / ``emergency_stop()`` switch it off and check the read-back (the e-stop latch
  and its retries are ConveyorDriver's); a failure raises and stays a fault in :meth:`read`;
* a background thread (:class:`transports.arcs.poller.Poller`) reads the output level back,
  ``1 / poll_hz`` s after the end of the last read-back, backing off after a failure; :meth:`read` returns the
  cached state and never touches the network. Belt position is integrated from
  ``nominal_speed`` while the output reads on. A failed poll, or none for ``stale_after``,
  is a fault;
* every (re)connect switches the belt off: it never restarts on its own;
* ``acknowledge_fault()`` reconnects a lost link; ``close()`` switches the belt off and
  disconnects.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor_driver.driver import BeltState
from libero_workcell.config_base import MappedConfig
from transports.arcs.poller import Poller, backoff_for
from transports.arcs.session import ArcsSession, code_meaning
from transports.errors import BackendError

log = logging.getLogger(__name__)


class ConveyorIoConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ConveyorIoConfig(MappedConfig):
    error = ConveyorIoConfigError
    label = "conveyor io"

    ip: str = ""  # arm controller address; must be set (nothing is contacted by default)
    port: int = 30004  # JSON-RPC
    user: str = "aubo"
    password: str = "123456"
    connect_timeout: float = 2.0  # s, TCP reachability probe before the SDK's connect()
    request_timeout: float = 0.1  # s per RPC (the SDK holds the GIL while it waits)
    do_index: int = 0  # standard digital output wired to the belt relay
    active_high: bool = True  # output level that switches the belt on
    nominal_speed: float = 0.03  # m/s, the belt's one speed while the relay is on
    poll_hz: float = 5.0  # output read-back rate (background thread)
    stale_after: float = 1.0  # s without a successful read-back -> fault

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "request_timeout", "nominal_speed", "poll_hz", "stale_after"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ConveyorIoConfigError(f"{name} must be a positive number, got {value!r}")
        if not isinstance(self.ip, str):
            raise ConveyorIoConfigError(f"ip must be a string, got {self.ip!r}")
        if isinstance(self.port, bool) or not isinstance(self.port, int) or not 0 < self.port < 65536:
            raise ConveyorIoConfigError(f"port must be a TCP port, got {self.port!r}")
        if isinstance(self.do_index, bool) or not isinstance(self.do_index, int) or self.do_index < 0:
            raise ConveyorIoConfigError(f"do_index must be a non-negative integer, got {self.do_index!r}")
        if not isinstance(self.active_high, bool):
            raise ConveyorIoConfigError(f"active_high must be true or false, got {self.active_high!r}")
        if self.stale_after <= 1.0 / self.poll_hz + self.request_timeout:
            raise ConveyorIoConfigError(
                f"stale_after {self.stale_after} s must exceed one poll period plus one request timeout "
                f"({1.0 / self.poll_hz + self.request_timeout:.3f} s)"
            )



class IoConveyorBackend:
    """ConveyorBackend on a controller digital output. Connects in the constructor (as the Modbus one)."""

    def __init__(self, config: ConveyorIoConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._clock = clock
        c = config
        self._session = ArcsSession(c.ip, c.port, c.user, c.password, c.connect_timeout, c.request_timeout)
        self._io: Any = None
        self._state_lock = threading.Lock()  # cached state; never held across an RPC
        self._on = False  # belt on, as last read back from the controller
        self._position = 0.0
        self._reported = 0.0
        self._last_stamp: float | None = None  # clock() of the last integration step
        self._last_ok = -math.inf  # time.monotonic() of the last successful read-back
        self._link_error: str | None = "not connected"
        self._switch_error: str | None = None  # the belt could not be switched off
        self._closed = False
        self.polls = 0
        # The read-back: poll_hz is a pause between read-backs, not a schedule (fixed_rate=False).
        self._poller = Poller(
            self._read_back, 1.0 / c.poll_hz, backoff=backoff_for(c.request_timeout), on_error=self._lose_link,
            what=f"conveyor: read-back of {self._where}", name="conveyor-io-poll", fixed_rate=False,
        )  # fmt: skip
        try:
            self._connect()
        except BaseException:
            self._session.close()
            raise
        self._poller.start()

    @property
    def _where(self) -> str:
        return f"{self._session.where} DO{self.config.do_index}"

    # ------------------------------------------------------------ connection
    def _connect(self) -> None:
        """Connect, log in, check the output exists, switch the belt off, read it back."""
        robot = self._session.open()
        self._io = self._session.call(robot.getIoControl)
        count = self._session.call(self._io.getStandardDigitalOutputNum)
        if isinstance(count, int) and count > 0 and self.config.do_index >= count:
            self._session.close()
            raise BackendError(
                f"conveyor: do_index {self.config.do_index} does not exist on {self._session.where} "
                f"(the controller has {count} standard digital outputs, 0..{count - 1})"
            )
        self._write(False)
        self._switch_error = None

    def _level(self, on: bool) -> bool:
        return on if self.config.active_high else not on

    def _write(self, on: bool) -> None:
        """Set the output, then check the controller reports the new level. Raises BackendError."""
        level = self._level(on)
        what = "on" if on else "off"
        ret = self._session.call(self._io.setStandardDigitalOutput, self.config.do_index, level)
        if ret != 0:
            raise BackendError(f"conveyor: {self._where} refused to switch the belt {what}: {code_meaning(ret)}")
        now_on = self._read_back()
        if now_on != on:
            raise BackendError(
                f"conveyor: {self._where} set to {level} ({what}) but the controller reports it "
                f"{'on' if now_on else 'off'} (relay output driver, or another program owns the output?)"
            )

    def _read_back(self) -> bool:
        """One read of the output level; updates the cache (and the belt position)."""
        if not self._session.connected():
            raise BackendError(f"conveyor: connection to {self._session.where} lost")
        level = bool(self._session.call(self._io.getStandardDigitalOutput, self.config.do_index))
        on = level == self.config.active_high
        with self._state_lock:
            self._advance(self._clock())
            self._on = on
            self._last_ok, self._link_error = time.monotonic(), None
            self.polls += 1
        return on

    def _advance(self, now: float) -> None:
        """Integrate the belt position up to ``now`` at the current speed (state lock held)."""
        if self._last_stamp is not None and self._on and self._link_error is None:
            self._position += self.config.nominal_speed * max(0.0, now - self._last_stamp)
        self._last_stamp = now

    # ------------------------------------------------------------------- poll
    def _lose_link(self, error: str) -> None:
        with self._state_lock:
            if self._link_error is None:
                self._advance(self._clock())  # the belt travelled until now, as far as we know
            self._link_error = error

    # ------------------------------------------------------ ConveyorBackend
    def read(self) -> BeltState:
        """The cached belt state (never blocks on the network); lost or stale link -> fault."""
        now = self._clock()
        with self._state_lock:
            fault = self._link_error or self._switch_error
            age = time.monotonic() - self._last_ok
            if fault is None and age > self.config.stale_after:
                fault = f"conveyor: no read-back from {self._where} for {age:.2f} s"
            # A lost link: belt state unknown, reported stopped (the fault says why).
            on = self._on and (self._link_error is None and age <= self.config.stale_after)
            position = self._position
            if on and self._last_stamp is not None:  # carry the last step forward to now
                position += self.config.nominal_speed * max(0.0, now - self._last_stamp)
            position = self._reported = max(position, self._reported)  # forward-only belt
            return BeltState(now, position, self.config.nominal_speed if on else 0.0, on, fault)

    def run(self, speed: float) -> None:
        """Switch the belt on. Only ``nominal_speed`` is accepted: a relay has one speed."""
        c = self.config
        if not math.isclose(float(speed), c.nominal_speed, rel_tol=1e-9, abs_tol=1e-9):
            raise BackendError(
                f"conveyor: relay-switched belt on {self._where} runs only at its nominal speed "
                f"{c.nominal_speed} m/s (io.nominal_speed), not {speed} m/s; set belt_speed to {c.nominal_speed}"
            )
        if self._closed:
            raise BackendError("conveyor: io backend closed")
        if self._link_error is not None and not self._session.connected():
            raise BackendError(f"conveyor: {self._link_error}; reset the fault first")
        self._write(True)

    def _switch_off(self, why: str) -> None:
        try:
            self._write(False)
            self._switch_error = None
        except BackendError as exc:
            if self._session.connected():
                self._switch_error = f"{why} failed: {exc}"  # the link works but the output did not go off
            log.error("conveyor %s: %s", why, exc)
            raise

    def halt(self) -> None:
        """Switch the belt off and read the output back. Raises BackendError if it is not confirmed off."""
        self._switch_off("halt")

    def emergency_stop(self) -> None:
        """Switch the belt off (the relay has no faster stop), confirmed by read-back; the driver latches."""
        self._switch_off("emergency stop")

    def acknowledge_fault(self) -> None:
        """Reconnect a lost link (the belt is switched off on reconnect). Never starts the belt.

        Never raises (ConveyorDriver.reset_fault does not catch): a failure stays in the
        fault that :meth:`read` reports, so the reset is refused with its reason.
        """
        if self._closed:
            return
        try:
            if not self._session.connected():
                self._connect()
            elif self._switch_error:
                self._write(False)
                self._switch_error = None
            else:
                self._read_back()
        except BackendError as exc:
            self._lose_link(str(exc))
        self._poller.wake()  # end the poller's back-off now

    def close(self) -> None:
        """Stop polling, switch the belt off, log out, disconnect. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._poller.stop(timeout=2.0)

        def belt_off() -> None:
            if self._io is not None:
                self._session.call(self._io.setStandardDigitalOutput, self.config.do_index, self._level(False))

        self._session.close(before_logout=belt_off)
        self._io = None
        with self._state_lock:
            self._advance(self._clock())
            self._on, self._link_error = False, "closed"
