"""One Modbus RTU device on a serial port, owned by one I/O thread.

Drivers call into backends from control loops (the arm servo tick at 100 Hz)
that must never wait on a serial bus. So one thread per device does all bus
traffic: it executes queued writes in order, polls the feedback registers at
a fixed rate into a cached :class:`Snapshot`, retries a failed transaction,
and after ``retries`` failures marks the link faulted (with the reason) and
reconnects at a slow rate. Readers only ever copy the latest snapshot.

RTU has no transaction id, and pymodbus (3.16) takes the first frame with the
right slave id and a valid CRC as the reply, whatever request it answers: a
drive that answers after the timeout has its reply read by the next request.
pymodbus drops unread input before each send; this module adds what it lacks:
every reply is checked against its request (function code; a read's byte count;
a write's echoed address and value, or count), the line is drained after a
failed attempt, and two polled blocks never share a reply shape (a read's reply
names no address, so only its byte count tells two reads apart).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import NoReturn, TypeVar

from pymodbus import FramerType
from pymodbus.client import ModbusSerialClient
from pymodbus.exceptions import ModbusException
from pymodbus.pdu import ModbusPDU

from transports.errors import BackendError

# pymodbus logs a frame dump at ERROR on every timeout; without a handler of its own that
# goes to stderr through logging's last resort. Failures are reported through the snapshot.
logging.getLogger("pymodbus").addHandler(logging.NullHandler())


_T = TypeVar("_T")
FLUSH_DELAY = 0.02  # s the line is drained after a failed attempt, for a late reply still on its way
MAX_READ = 125  # registers one FC3 read may ask for (the protocol's limit)


class BusError(BackendError):
    """The port cannot be used, or a transaction failed after all retries."""


class UnmatchedReplyError(BusError):
    """A reply that does not answer the request just sent (a late one, or another device's): never used."""


@dataclass(frozen=True)
class SerialSettings:
    port: str
    baudrate: int = 115200
    bytesize: int = 8
    parity: str = "N"
    stopbits: int = 1
    slave_id: int = 1
    timeout: float = 0.1  # s per attempt
    retries: int = 2  # extra attempts per transaction before the link is declared faulted
    reconnect_period: float = 1.0  # s between reconnect attempts while faulted

    def __post_init__(self) -> None:
        if not self.port:
            raise BusError("serial port must be set")
        if self.parity not in ("N", "E", "O") or self.bytesize not in (7, 8) or self.stopbits not in (1, 2):
            raise BusError(f"bad serial framing {self.bytesize}{self.parity}{self.stopbits}")
        if not 1 <= self.slave_id <= 247:
            raise BusError(f"slave_id must be 1..247, got {self.slave_id}")
        if self.baudrate <= 0 or self.timeout <= 0 or self.retries < 0 or self.reconnect_period <= 0:
            raise BusError("baudrate, timeout and reconnect_period must be positive, retries >= 0")

    def retry_budget(self) -> float:
        """Time the failed attempts of a transaction that then succeeds can take: a snapshot max_age
        must exceed this plus the poll period, or a glitch absorbed by retries would read as stale."""
        return self.retries * (self.timeout + FLUSH_DELAY)


class SerialLineConfig:
    """Mixin for device configs with the serial-line fields: the bus settings, built in one place."""

    def serial(self) -> SerialSettings:
        return SerialSettings(
            self.port,
            self.baudrate,
            parity=self.parity,
            stopbits=self.stopbits,
            slave_id=self.slave_id,
            timeout=self.timeout,
            retries=self.retries,
            reconnect_period=self.reconnect_period,
        )


@dataclass(frozen=True)
class Snapshot:
    stamp: float  # clock time of the poll that produced ``regs`` (0.0 = never polled)
    regs: dict[int, int] = field(default_factory=dict)  # address -> value, every polled register
    fault: str | None = "not polled yet"  # link fault; None while the device answers

    def get(self, address: int) -> int:
        return self.regs[address]

    def u32(self, address: int) -> int:
        """32-bit value, high word first at ``address``."""
        return (self.regs[address] << 16) | self.regs[address + 1]


def check_port(port: str) -> None:
    """Fail at start with a message an operator can act on."""
    if not os.path.exists(port):
        raise BusError(f"serial port {port} does not exist (adapter unplugged? check `ls /dev/serial/by-id`)")
    if not os.access(port, os.R_OK | os.W_OK):
        raise BusError(f"no read/write permission on {port} (add the user to the 'dialout' group)")


@dataclass
class _Write:
    address: int
    values: list[int]
    done: Future[None]


class ModbusDevice:
    """Polls ``blocks`` [(address, count), ...] every 1/``poll_hz`` s and runs queued writes.

    ``on_connect(device)`` runs on the I/O thread after every (re)connect, before
    the first poll: the place to re-enable a drive and rewrite its settings, via
    :meth:`transact_write`. ``on_poll(snapshot)`` runs on the I/O thread after
    every successful poll (e.g. to integrate a belt position).
    """

    def __init__(
        self,
        serial: SerialSettings,
        blocks: Sequence[tuple[int, int]],
        poll_hz: float,
        *,
        on_connect: Callable[[ModbusDevice], None] | None = None,
        on_poll: Callable[[Snapshot], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        name: str = "modbus",
    ) -> None:
        if poll_hz <= 0:
            raise BusError(f"poll_hz must be positive, got {poll_hz}")
        self.serial = serial
        self.blocks = [(int(a), int(n)) for a, n in blocks]
        _check_blocks(self.blocks)
        self.poll_period = 1.0 / poll_hz
        self._on_connect = on_connect
        self._on_poll = on_poll
        self._clock = clock
        self.name = name
        self._snapshot = Snapshot(0.0)
        self._lock = threading.Lock()
        self._writes: queue.Queue[_Write | None] = queue.Queue()
        self._stop = threading.Event()
        self._closing = threading.Event()
        self._client: ModbusSerialClient | None = None
        self._thread: threading.Thread | None = None
        self.stats = {"polls": 0, "writes": 0, "retries": 0, "failures": 0, "connects": 0, "connect_failures": 0,
                      "unmatched": 0, "drained_bytes": 0}  # fmt: skip

    # ------------------------------------------------------------ public API
    def start(self, connect_timeout: float = 2.0) -> None:
        """Open the port and start the I/O thread; raises BusError if the port is unusable.

        Waits up to ``connect_timeout`` for the first poll; a device that does not answer
        is not an error here (it shows as a fault in the snapshot and is retried).
        """
        check_port(self.serial.port)
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-io", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + connect_timeout
        while self._snapshot.stamp == 0.0 and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.005)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    def write(self, address: int, values: Sequence[int]) -> Future[None]:
        """Queue a write (FC6 for one register, FC16 for several); never blocks."""
        if self._closing.is_set() or self._thread is None:
            raise BusError(f"{self.name}: bus is closed")
        fut: Future[None] = Future()
        self._writes.put(_Write(int(address), [int(v) & 0xFFFF for v in values], fut))
        return fut

    def write_and_wait(self, address: int, values: Sequence[int], timeout: float = 1.0) -> None:
        """Write, then wait until a poll that started after the write has landed (operator resets)."""
        fut = self.write(address, values)
        try:
            fut.result(timeout)
        except TimeoutError as exc:
            raise BusError(f"{self.name}: write to 0x{address:04X} not done within {timeout} s") from exc
        except Exception as exc:
            raise BusError(f"{self.name}: write to 0x{address:04X} failed: {exc}") from exc
        t_written = self._clock()
        deadline = time.monotonic() + timeout
        while self.snapshot().stamp <= t_written and time.monotonic() < deadline:
            time.sleep(0.002)

    def close(self, drain_timeout: float = 1.0) -> None:
        """Send the writes already queued (e.g. a final stop), then end the I/O thread."""
        self._closing.set()
        self._writes.put(None)
        if self._thread is not None:
            self._thread.join(timeout=drain_timeout)
            self._stop.set()
            self._thread.join(timeout=2.0)
        self._disconnect()

    # -------------------------------------------------------- I/O thread only
    def transact_write(self, address: int, values: Sequence[int]) -> None:
        """Write now with retries (I/O thread only: on_connect and the write queue)."""
        vals = [int(v) & 0xFFFF for v in values]

        def once() -> None:
            assert self._client is not None
            sid = self.serial.slave_id
            if len(vals) == 1:
                r = self._client.write_register(address, vals[0], device_id=sid)
            else:
                r = self._client.write_registers(address, vals, device_id=sid)
            self._match(r, 6 if len(vals) == 1 else 16, f"write to 0x{address:04X}")
            echo = (r.address, list(r.registers)) if len(vals) == 1 else (r.address, r.count)
            if echo != ((address, vals) if len(vals) == 1 else (address, len(vals))):
                self._unmatched(f"echo {echo} to a write of {vals} to 0x{address:04X}")

        self._transact(once, f"write 0x{address:04X}")
        self.stats["writes"] += 1

    def _read_block(self, address: int, count: int) -> list[int]:
        assert self._client is not None
        r = self._client.read_holding_registers(address, count=count, device_id=self.serial.slave_id)
        self._match(r, 3, f"read of 0x{address:04X}")
        if len(r.registers) != count:  # the reply's byte count: all that names the read it answers
            self._unmatched(f"{len(r.registers)} registers in reply to a read of {count} at 0x{address:04X}")
        return list(r.registers)

    def _match(self, reply: ModbusPDU, function_code: int, what: str) -> None:
        """The reply answers a request of this function code, or the device refused it; else it is not ours."""
        if reply.function_code == function_code | 0x80:
            raise BusError(f"device refused {what}: {reply}")
        if reply.function_code != function_code:
            self._unmatched(f"function {reply.function_code} in reply to {what} (function {function_code})")

    def _unmatched(self, why: str) -> NoReturn:
        self.stats["unmatched"] += 1
        raise UnmatchedReplyError(f"unmatched reply: {why}")

    def _transact(self, fn: Callable[[], _T], what: str) -> _T:
        last: Exception | None = None
        for attempt in range(self.serial.retries + 1):
            if attempt:
                self.stats["retries"] += 1
            try:
                return fn()
            except (ModbusException, BusError, OSError) as exc:
                last = exc
                self._drain()
        self.stats["failures"] += 1
        raise BusError(f"{what}: no valid reply after {self.serial.retries + 1} attempts ({_short(last)})")

    def _drain(self) -> None:
        """After a failed attempt, drop what arrives for FLUSH_DELAY: a late reply still on its way is read and
        dropped here, not by the next request (what comes later still, pymodbus drops before its next send, and
        the match refuses)."""
        client = self._client
        if client is None or client.socket is None:
            return
        port = client.socket
        deadline = time.monotonic() + min(FLUSH_DELAY, self.serial.timeout)
        with contextlib.suppress(Exception):
            while True:
                if waiting := port.in_waiting:
                    self.stats["drained_bytes"] += len(port.read(waiting))
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.001)

    def _poll(self) -> None:
        regs: dict[int, int] = {}
        for address, count in self.blocks:
            values = self._transact(lambda a=address, n=count: self._read_block(a, n), f"read 0x{address:04X}")
            regs.update(zip(range(address, address + count), values, strict=True))
        snap = Snapshot(self._clock(), regs, None)
        with self._lock:
            self._snapshot = snap
        self.stats["polls"] += 1
        if self._on_poll is not None:
            self._on_poll(snap)

    def _set_fault(self, reason: str) -> None:
        with self._lock:
            self._snapshot = Snapshot(self._snapshot.stamp, self._snapshot.regs, reason)

    def _connect(self) -> None:
        s = self.serial
        check_port(s.port)
        self._client = ModbusSerialClient(
            s.port,
            framer=FramerType.RTU,
            baudrate=s.baudrate,
            bytesize=s.bytesize,
            parity=s.parity,
            stopbits=s.stopbits,
            timeout=s.timeout,
            retries=0,  # retries are counted here, with the line drained between attempts
        )
        if not self._client.connect():
            raise BusError(f"cannot open {s.port}")
        if self._on_connect is not None:
            self._on_connect(self)
        self._poll()
        self.stats["connects"] += 1

    def _disconnect(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                client.close()

    def _fail_pending(self, reason: str) -> None:
        while True:
            try:
                w = self._writes.get_nowait()
            except queue.Empty:
                return
            if w is not None:
                w.done.set_exception(BusError(reason))

    def _run(self) -> None:
        connected = False
        next_poll = time.monotonic()
        while not self._stop.is_set():
            if not connected:
                if self._closing.is_set():
                    break
                try:
                    self._connect()
                    connected = True
                    next_poll = time.monotonic() + self.poll_period
                except Exception as exc:  # keep the thread alive whatever the bus does
                    self._disconnect()
                    self._set_fault(f"{self.name}: link down: {_short(exc)}")
                    self._fail_pending(f"{self.name}: link down")
                    self.stats["connect_failures"] += 1
                    self._closing.wait(self.serial.reconnect_period)
                continue
            try:
                try:
                    w = self._writes.get(timeout=max(0.0, next_poll - time.monotonic()))
                except queue.Empty:
                    w = None
                if w is None and self._closing.is_set():
                    break
                if w is not None:
                    try:
                        self.transact_write(w.address, w.values)
                    except BusError as exc:
                        w.done.set_exception(exc)
                        raise
                    w.done.set_result(None)
                    continue  # drain writes in order before the next poll
                next_poll = max(next_poll + self.poll_period, time.monotonic())
                self._poll()
            except Exception as exc:
                self._set_fault(f"{self.name}: {_short(exc)}")
                self._fail_pending(f"{self.name}: link fault")
                self._disconnect()
                connected = False
                self._closing.wait(self.serial.reconnect_period)


def read_once(serial: SerialSettings, blocks: Sequence[tuple[int, int]], timeout: float = 2.0,
              name: str = "modbus") -> dict[int, int]:  # fmt: skip
    """One read of each block (holding registers, FC3, with the settings' retries) and nothing written: whether a
    device answers at its ID, for a preflight. The registers read; BusError saying what failed."""
    device = ModbusDevice(serial, blocks, poll_hz=1.0 / timeout, name=name)  # one poll, right after connecting
    try:
        device.start(connect_timeout=0.0)
        deadline = time.monotonic() + timeout
        while (snap := device.snapshot()).stamp == 0.0 and snap.fault == Snapshot(0.0).fault:
            if time.monotonic() > deadline:
                raise BusError(f"{name}: no answer within {timeout:g} s")
            time.sleep(0.005)
    finally:
        device.close()
    if snap.stamp == 0.0:
        raise BusError(snap.fault or f"{name}: no answer")
    return dict(snap.regs)


def _check_blocks(blocks: Sequence[tuple[int, int]]) -> None:
    """Polled blocks must be told apart by their replies: an FC3 reply names no address, only its byte count."""
    counts: dict[int, int] = {}
    for address, count in blocks:
        if not (0 <= address <= 0xFFFF and 1 <= count <= MAX_READ and address + count <= 0x10000):
            raise BusError(f"bad poll block 0x{address:04X} x {count} (1..{MAX_READ} registers within 0..0xFFFF)")
        if (other := counts.setdefault(count, address)) != address:
            raise BusError(
                f"poll blocks 0x{other:04X} and 0x{address:04X} both read {count} register(s): a late reply to one "
                "would be taken for the other's (an RTU read reply names no address); read them as one block"
            )


def _short(exc: BaseException | None) -> str:
    text = str(exc).split("\n")[0] if exc else "unknown"
    return text.replace("Modbus Error: ", "")
