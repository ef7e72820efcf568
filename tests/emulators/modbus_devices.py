"""Modbus RTU device emulators: CTAG2F90D gripper, Delta VFD, Leadshine stepper.

Each emulator is a pymodbus 3.16 ``ModbusSerialServer`` on a tty path (one
end of a pty pair), run on its own asyncio loop in a background thread, with
a device model stepped every ``tick`` s on that same loop (so the model and
the server never race). Registers live in a ``SimDevice`` (the pymodbus 3.16
API that replaces the deprecated ``ModbusDeviceContext`` /
``ModbusSequentialDataBlock`` in v4); writes are seen through its async
``action`` hook and applied by the model right after pymodbus stores them.
Pinned to pymodbus 3.16.x: the SimDevice action signature is new in 3.x.

A drive under load answers late: the server sits on an inner pty, and the
emulator carries the bytes between it and ``port`` on the same loop, holding
each reply back by ``reply_delay`` (or the next of :meth:`delay_replies`).
Replies leave in the order the device made them, as one device answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
import tty
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from emulators.serial_link import device_priority

if TYPE_CHECKING:
    from pymodbus.server import ModbusSerialServer


class ModbusEmulator:
    """Base: a register file at [(address, count), ...] served on ``port``, model stepped each tick."""

    BLOCKS: tuple[tuple[int, int], ...] = ()

    def __init__(
        self, port: str, slave_id: int = 1, tick: float = 0.005, realtime: int = 0, reply_delay: float = 0.0
    ) -> None:
        self.port = port
        self.slave_id = slave_id
        self.tick = tick
        self.realtime = realtime  # > 0: the device's thread asks for SCHED_FIFO (serial_link.device_priority)
        self.reply_delay = reply_delay  # s each reply is held back (a drive under load); settable at any time
        self._delays: deque[tuple[int | None, float]] = deque()  # (function or any, s): the next replies' delays
        self._due = 0.0  # loop time the last reply leaves: a later one never overtakes it
        self.replies = 0  # replies sent on the line
        self._line = self._inner = self._inner_slave = -1  # fds: the line, the inner pty's master and slave
        self.writes: list[tuple[int, list[int]]] = []  # every write the device received, in order
        self._regs: list[int] | None = None
        self._base = 0
        self._loop = asyncio.new_event_loop()
        self._server: ModbusSerialServer | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{type(self).__name__}-emulator", daemon=True)
        self._t_last = time.monotonic()
        self._thread.start()
        if not self._ready.wait(5.0):
            raise RuntimeError(f"{type(self).__name__} did not start on {port}")

    # ------------------------------------------------------------- registers
    def reg(self, address: int) -> int:
        assert self._regs is not None
        return self._regs[address - self._base]

    def set_reg(self, address: int, value: int) -> None:
        assert self._regs is not None
        self._regs[address - self._base] = int(value) & 0xFFFF

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the emulator loop (thread-safe access to the model) and return its result."""

        async def wrapped() -> Any:
            return fn(*args)

        return asyncio.run_coroutine_threadsafe(wrapped(), self._loop).result(2.0)

    def answer_late(self, delay: float) -> None:
        """Hold every reply back ``delay`` s from now on (0: on time), as a drive under load does."""
        self.reply_delay = float(delay)

    def delay_replies(self, delays: Iterable[float], function: int | None = None) -> None:
        """The next replies (to requests of ``function`` only, if given) late by these s, one each, in order;
        then ``reply_delay`` again."""
        self.call(self._delays.extend, [(function, float(d)) for d in delays])

    # ----------------------------------------------------------------- model
    def on_write(self, address: int, values: list[int]) -> None:
        """Called after a write landed in the register file."""

    def step(self, dt: float) -> None:
        """Advance the device model by dt s."""

    # --------------------------------------------------------------- serving
    async def _action(
        self, fc: int, start: int, address: int, count: int, regs: list[int], values: list[int] | list[bool] | None
    ) -> None:
        if self._regs is None:
            self._regs, self._base = regs, start
        if values is not None and fc in (6, 16):
            vals = [int(v) for v in values]
            self.writes.append((address, vals))
            self._loop.call_soon(self.on_write, address, vals)  # pymodbus stores the values after we return
        return None

    def _run(self) -> None:
        device_priority(self.realtime)
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    def _open_line(self) -> str:
        """``port`` (the line) and an inner pty for the server, joined on this loop; the inner tty's path."""
        self._line = os.open(self.port, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        self._inner, self._inner_slave = os.openpty()
        for fd in (self._line, self._inner, self._inner_slave):
            tty.setraw(fd)
        os.set_blocking(self._inner, False)
        self._loop.add_reader(self._line, self._request_in)
        self._loop.add_reader(self._inner, self._reply_out)
        return os.ttyname(self._inner_slave)

    def _request_in(self) -> None:
        with contextlib.suppress(OSError):
            os.write(self._inner, os.read(self._line, 4096))  # a request reaches the device at once

    def _reply_out(self) -> None:
        try:
            data = os.read(self._inner, 4096)  # one reply: the server writes each frame whole
        except OSError:
            return
        delay = self.reply_delay
        if self._delays and self._delays[0][0] in (None, data[1] & 0x7F if len(data) > 1 else None):
            delay = self._delays.popleft()[1]
        self._due = max(self._loop.time() + max(0.0, delay), self._due)
        self._loop.call_at(self._due, self._send_reply, data)

    def _send_reply(self, data: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self._line, data)
            self.replies += 1

    async def _main(self) -> None:
        # pymodbus's server (it imports its HTTP simulator, aiohttp) is imported by a device that serves, not by the
        # ARCS emulator's tool model (arcs_emulator.py), which uses the model alone and is started for every test
        from pymodbus import FramerType
        from pymodbus.server import ModbusSerialServer
        from pymodbus.simulator import DataType, SimData, SimDevice

        simdata = [SimData(a, count=n, values=0, datatype=DataType.REGISTERS) for a, n in self.BLOCKS]
        device = SimDevice(self.slave_id, simdata=simdata, action=self._action)
        inner = self._open_line()
        self._server = ModbusSerialServer(device, framer=FramerType.RTU, port=inner, baudrate=115200)
        await self._server.serve_forever(background=True)
        # Touch the register file once so the model has it before the first request.
        await self._server.context.async_getValues(self.slave_id, 3, self.BLOCKS[0][0], 1)  # type: ignore[union-attr]
        self._ready.set()
        self._t_last = time.monotonic()
        while self._server is not None:
            await asyncio.sleep(self.tick)
            now = time.monotonic()
            self.step(now - self._t_last)
            self._t_last = now

    def close(self) -> None:
        async def stop() -> None:
            server, self._server = self._server, None
            if server is not None:
                await server.shutdown()
            for fd in (self._line, self._inner):
                self._loop.remove_reader(fd)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(3.0)
        self._thread.join(timeout=3.0)
        for fd in (self._line, self._inner, self._inner_slave):
            with contextlib.suppress(OSError):
                os.close(fd)


def hi_lo(value: int) -> tuple[int, int]:
    return (value >> 16) & 0xFFFF, value & 0xFFFF


class CtagEmulator(ModbusEmulator):
    """CTAG2F90D: fingers move toward the triggered target; they stall on an object.

    Speed register 0..255 scales ``full_speed`` (counts/s). ``object_at`` is
    the position (counts) where closing fingers meet an object; None = no
    object. ``alarm`` (written to ``alarm_register``) stops all motion until
    an alarm reset (0x0110 = 1).
    """

    BLOCKS = ((0x0100, 0x20), (0x0400, 0x20))
    ENABLE, TARGET, SPEED, TRIGGER, RESET, FEEDBACK = 0x0100, 0x0102, 0x0104, 0x0108, 0x0110, 0x0418

    def __init__(self, port: str, alarm_register: int = 0x0412, full_speed: float = 18000.0, **kw: Any) -> None:
        self.alarm_register = alarm_register
        self.full_speed = full_speed  # counts/s at speed 255: a full stroke in 0.5 s
        self.position = 0.0
        self.target = 0
        self.enabled = False
        self.object_at: int | None = None
        self.alarm_resets = 0
        super().__init__(port, **kw)

    def place_object(self, width_m: float | None, stroke_m: float = 0.09, full: int = 9000) -> None:
        """An object of ``width_m`` between the fingers (None removes it)."""
        self.object_at = None if width_m is None else round(full * (1.0 - width_m / stroke_m))

    def inject_alarm(self, code: int = 1) -> None:
        self.call(self.set_reg, self.alarm_register, code)

    def on_write(self, address: int, values: list[int]) -> None:
        for a, v in zip(range(address, address + len(values)), values, strict=True):
            if a == self.ENABLE:
                self.enabled = v == 1
            elif a == self.TRIGGER and v == 1:
                if self.enabled and self.reg(self.alarm_register) == 0:
                    self.target = (self.reg(self.TARGET) << 16) | self.reg(self.TARGET + 1)
                self.set_reg(self.TRIGGER, 0)
            elif a == self.RESET and v == 1:
                self.alarm_resets += 1
                self.set_reg(self.alarm_register, 0)
                self.set_reg(self.RESET, 0)

    def step(self, dt: float) -> None:
        if self.enabled and self.reg(self.alarm_register) == 0:
            limit = self.target
            if self.object_at is not None and self.target > self.object_at and self.position <= self.object_at:
                limit = self.object_at
            v = self.full_speed * max(1, self.reg(self.SPEED)) / 255.0
            delta = limit - self.position
            self.position += max(-v * dt, min(v * dt, delta))
        hi, lo = hi_lo(round(self.position))
        self.set_reg(self.FEEDBACK, hi)
        self.set_reg(self.FEEDBACK + 1, lo)


class DeltaVfdEmulator(ModbusEmulator):
    """Delta VFD: output frequency ramps toward the setpoint while running; a fault code trips it.

    0x2000 command (0x12 run forward, 0x01 stop), 0x2001 setpoint Hz x 100,
    0x2002 bit 1 reset, 0x2100 fault code, 0x2103 output frequency Hz x 100.
    """

    BLOCKS = ((0x2000, 0x10), (0x2100, 0x10))
    COMMAND, SETPOINT, CONTROL, FAULT, OUTPUT = 0x2000, 0x2001, 0x2002, 0x2100, 0x2103

    def __init__(self, port: str, ramp_hz_per_s: float = 200.0, **kw: Any) -> None:
        self.ramp = ramp_hz_per_s
        self.running = False
        self.output_hz = 0.0
        self.resets = 0
        super().__init__(port, **kw)

    def inject_fault(self, code: int = 7) -> None:
        self.call(self.set_reg, self.FAULT, code)

    def on_write(self, address: int, values: list[int]) -> None:
        for a, v in zip(range(address, address + len(values)), values, strict=True):
            if a == self.COMMAND:
                if v & 0x03 == 0x01:
                    self.running = False
                elif v & 0x03 == 0x02 and self.reg(self.FAULT) == 0:
                    self.running = True
            elif a == self.CONTROL and v & 0x02:
                self.resets += 1
                self.set_reg(self.FAULT, 0)
                self.set_reg(self.CONTROL, 0)

    def step(self, dt: float) -> None:
        if self.reg(self.FAULT):
            self.running, self.output_hz = False, 0.0  # trip: the motor coasts
        goal = self.reg(self.SETPOINT) / 100.0 if self.running else 0.0
        d = goal - self.output_hz
        self.output_hz += max(-self.ramp * dt, min(self.ramp * dt, d))
        self.set_reg(self.OUTPUT, round(self.output_hz * 100))


class LeadshineEmulator(ModbusEmulator):
    """Leadshine RS-485 stepper in velocity mode (0x6200 = 2): 0x6002 0x10 runs at 0x6203 rpm, 0x40 e-stops.

    Feedback (registers not documented for the real drive; the backend's map
    must point at them): actual speed rpm at ``speed_register``, alarm code
    at ``alarm_register``. 0x1801 = 0x1111 resets the alarm.
    """

    BLOCKS = ((0x1800, 0x10), (0x6000, 0x10), (0x6200, 0x10))
    CONTROL_WORD, TRIGGER, MODE, RPM, ACCEL, DECEL = 0x1801, 0x6002, 0x6200, 0x6203, 0x6204, 0x6205

    def __init__(self, port: str, speed_register: int = 0x600A, alarm_register: int = 0x600B, **kw: Any) -> None:
        self.speed_register = speed_register
        self.alarm_register = alarm_register
        self.running = False
        self.rpm = 0.0
        self.estops = 0
        self.stops = 0
        super().__init__(port, **kw)

    def inject_alarm(self, code: int = 1) -> None:
        self.call(self.set_reg, self.alarm_register, code)

    def on_write(self, address: int, values: list[int]) -> None:
        for a, v in zip(range(address, address + len(values)), values, strict=True):
            if a == self.TRIGGER:
                if v == 0x10 and self.reg(self.MODE) == 2 and self.reg(self.alarm_register) == 0:
                    self.running = True
                elif v == 0x40:
                    self.estops += 1
                    self.running, self.rpm = False, 0.0
                else:
                    self.stops += 1
                    self.running = False
            elif a == self.CONTROL_WORD and v == 0x1111:
                self.set_reg(self.alarm_register, 0)

    def step(self, dt: float) -> None:
        if self.reg(self.alarm_register):
            self.running, self.rpm = False, 0.0
        goal = float(self.reg(self.RPM)) if self.running else 0.0
        ramp_ms = self.reg(self.ACCEL if goal > self.rpm else self.DECEL) or 100  # ms per 1000 rpm
        rate = 1e6 / ramp_ms  # rpm/s
        d = goal - self.rpm
        self.rpm += max(-rate * dt, min(rate * dt, d))
        self.set_reg(self.speed_register, round(self.rpm))
