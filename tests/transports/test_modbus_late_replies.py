"""Late replies on the Modbus bus (issue 35, item 3): the real pymodbus client against a register file that
answers late (the emulator's reply delay: a drive under load does), through the relay, which can also lose a
request on the line. RTU has no transaction id and pymodbus takes the first valid frame from the slave as the
reply: whatever the delays, a value the bus hands on must be the value of the register it asked for, and a
write is confirmed only by its own echo."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import wait_for
from emulators.modbus_devices import ModbusEmulator
from emulators.serial_link import FaultyLink
from hypothesis import given, settings
from hypothesis import strategies as st

from transports.modbus_bus import FLUSH_DELAY, BusError, ModbusDevice, SerialSettings, Snapshot

BASE = 0x0100
SINGLE, PAIR = (BASE + 8, 1), (BASE, 2)  # the polled blocks, read in this order: replies of 2 and 4 bytes
TARGET = BASE + 12  # the register written
VALUES = {BASE: 0x1111, BASE + 1: 0x2222, BASE + 8: 0x3333}  # what the polled registers hold, all different
TIMEOUT = 0.05


class RegisterFile(ModbusEmulator):
    """A device that is only its registers."""

    BLOCKS = ((BASE, 16),)


class Rig:
    """The register file behind the relay, and a bus polling both blocks; every snapshot the bus made."""

    def __init__(self, retries: int = 2) -> None:
        self.link = FaultyLink()
        self.emu = RegisterFile(self.link.device_port)
        for address, value in VALUES.items():
            self.emu.call(self.emu.set_reg, address, value)
        self.seen: list[Snapshot] = []
        serial = SerialSettings(self.link.client_port, timeout=TIMEOUT, retries=retries, reconnect_period=0.1)
        self.bus = ModbusDevice(serial, [SINGLE, PAIR], 50.0, on_poll=self.seen.append, name="late-bus")
        self.bus.start()
        assert wait_for(lambda: self.bus.snapshot().fault is None, 5.0), self.bus.snapshot().fault
        self.faults: set[str] = set()  # every link fault the snapshot showed
        self._watching = threading.Event()
        self._watch = threading.Thread(target=self._watch_faults, daemon=True)
        self._watch.start()

    def _watch_faults(self) -> None:
        while not self._watching.wait(0.002):
            if (fault := self.bus.snapshot().fault) is not None:
                self.faults.add(fault)

    def settle(self) -> None:
        """Until every planned delay was used and the line is back in step: polls answered at the first try."""
        assert wait_for(lambda: self.emu.call(len, self.emu._delays) == 0, 30.0)
        polls, retries = self.bus.stats["polls"], self.bus.stats["retries"]

        def in_step() -> bool:
            nonlocal polls, retries
            if self.bus.stats["retries"] != retries:
                polls, retries = self.bus.stats["polls"], self.bus.stats["retries"]
            return self.bus.stats["polls"] - polls >= 5 and self.bus.snapshot().fault is None

        assert wait_for(in_step, 30.0), (self.bus.stats, self.bus.snapshot().fault)

    def write(self, *values: int) -> list[tuple[bool, bool]]:
        """Queue writes of ``values`` to TARGET at once; for each, (confirmed, whether the device had received it
        when the bus took it as confirmed)."""
        got: dict[int, tuple[bool, bool]] = {}
        for value in values:
            fut = self.bus.write(TARGET, [value])
            fut.add_done_callback(
                lambda f, v=value: got.setdefault(v, (f.exception() is None, (TARGET, [v]) in self.emu.writes))
            )
        assert wait_for(lambda: len(got) == len(values), 30.0)
        return [got[v] for v in values]

    def close(self) -> None:
        self._watching.set()
        self._watch.join()
        self.bus.close()
        self.emu.close()
        self.link.close()


@pytest.fixture
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


def wrong_values(seen: list[Snapshot]) -> list[dict[int, int]]:
    return [s.regs for s in seen if s.regs != VALUES]


def test_poll_blocks_whose_replies_look_alike_are_refused() -> None:
    port = SerialSettings("/dev/ttyNONE")
    with pytest.raises(BusError, match="both read 1 register"):
        ModbusDevice(port, [(0x2100, 1), (0x2103, 1)], 10.0)  # an FC3 reply names no address: only its size
    for bad in [(0x10, 0), (0x10, 126), (0xFFFF, 2)]:
        with pytest.raises(BusError, match="bad poll block"):
            ModbusDevice(port, [bad], 10.0)
    ModbusDevice(port, [(0x2100, 1), (0x2103, 2), (0x2100, 1)], 10.0)  # one block twice reads alike: the same one


def test_a_late_reply_to_one_block_is_never_read_as_the_other(rig: Rig) -> None:
    # Late past the timeout, and past the drain: each arrives while the bus waits for a later request.
    rig.emu.delay_replies([0.0, 1.9 * TIMEOUT, 0.0, 1.6 * TIMEOUT, 2.2 * TIMEOUT, 0.0, 3 * TIMEOUT] * 4, function=3)
    rig.settle()
    assert rig.bus.stats["retries"] > 0  # the device was late: the bus had to try again
    assert wrong_values(rig.seen) == []
    # A reply of the wrong size is refused and the read tried again; it never takes the link down (only a
    # request that no attempt got answered may: a stall of this machine longer than the retries).
    assert all("no valid reply" in f for f in rig.faults), rig.faults


def test_a_reply_late_by_less_than_the_drain_is_dropped_not_read_by_the_retry(rig: Rig) -> None:
    # Past the timeout by half the drain: the bus drops it, and the retry gets its own reply.
    rig.emu.delay_replies([TIMEOUT + FLUSH_DELAY / 2, 0.0, 0.0] * 10, function=3)
    rig.settle()
    assert rig.bus.stats["drained_bytes"] > 0
    assert wrong_values(rig.seen) == []


def test_a_late_write_echo_is_never_read_as_a_register(rig: Rig) -> None:
    # The first echo of a write (function 6: address and value) comes while its retry waits, so the retry's echo
    # is still on its way when the next poll reads one register: that read must not take the echoed value.
    for i in range(5):
        rig.emu.delay_replies([1.9 * TIMEOUT, 1.0 * TIMEOUT], function=6)
        assert rig.write(0x4000 + i) == [(True, True)]
        rig.settle()
    assert rig.bus.stats["retries"] > 0
    assert wrong_values(rig.seen) == []


@pytest.mark.parametrize(("first", "second"), [
    ([0x5000], [0x5001]),  # function 6: the echo names address and value
    ([0x5002, 0x5003], [0x5004, 0x5005]),  # function 16: address and count; the second write starts 2 further on
    ([0x5006, 0x5007, 0x5008], [0x5009, 0x500A]),  # function 16, the same address: the count tells them apart
], ids=["one register", "several, another address", "several, another count"])  # fmt: skip
def test_a_write_is_confirmed_only_by_its_own_echo(rig: Rig, first: list[int], second: list[int]) -> None:
    # As above, and the next write is lost on the line: the first write's stale echo comes while the bus waits
    # for the lost one's, and must not confirm it.
    at = TARGET + (2 if len(first) == len(second) == 2 else 0)
    rig.emu.delay_replies([1.9 * TIMEOUT, 1.0 * TIMEOUT], function=6 if len(first) == 1 else 16)
    rig.link.lose_requests([True], match=lambda frame: second[-1].to_bytes(2, "big") in frame[:-2])
    had: list[bool] = []  # whether the device had the second write when the bus took it as confirmed
    done = [rig.bus.write(TARGET, first), rig.bus.write(at, second)]
    done[1].add_done_callback(lambda f: had.append((at, second) in rig.emu.writes))
    assert wait_for(lambda: all(f.done() for f in done), 30.0)
    assert done[1].exception() is None
    assert had == [True]  # confirmed once the device had it, never before
    # in the order written; a write tried again after its echo came late reaches the device twice (RTU has no
    # transaction id: a slow machine's retry is the same write again, which the device takes as before)
    arrived = [w for i, w in enumerate(rig.emu.writes) if i == 0 or w != rig.emu.writes[i - 1]]
    assert arrived[-2:] == [(TARGET, first), (at, second)]
    assert rig.link.requests_lost == 1
    rig.settle()


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(
    delays=st.lists(st.sampled_from([0.0, 0.5, 1.1, 1.5, 2.2, 3.0]), min_size=3, max_size=12),
    lost=st.lists(st.booleans(), max_size=6),
    writes=st.lists(st.integers(0, 0xFFFF), max_size=3, unique=True),
)
def test_whatever_the_delays_every_value_is_the_registers_and_every_confirmation_its_own(
    delays: list[float], lost: list[bool], writes: list[int]
) -> None:
    rig = Rig()
    try:
        rig.emu.delay_replies([d * TIMEOUT for d in delays])  # in timeouts
        rig.link.lose_requests(lost)
        confirmed: list[Any] = rig.write(*writes)
        rig.settle()
    finally:
        rig.close()
    assert wrong_values(rig.seen) == []
    assert all(received for ok, received in confirmed if ok)  # confirmed: the device had it
