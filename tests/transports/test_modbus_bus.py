"""The Modbus RTU bus thread (transports/modbus_bus.py): the real pymodbus client against a register file on a
pty pair, through the fault-injecting relay. What every Modbus device backend (the CTAG gripper, the belt's
drives) relies on: polls land in a snapshot, writes go out in the order queued, a dead line is a fault that
says why and heals by itself, a close sends what was queued, and bad settings are refused up front."""

from __future__ import annotations

import time

import pytest
from conftest import wait_for
from emulators.modbus_devices import ModbusEmulator

from transports.errors import BackendError
from transports.modbus_bus import BusError, ModbusDevice, SerialSettings

BASE = 0x0100


class RegisterFile(ModbusEmulator):
    """A device that is only its registers: what was written reads back."""

    BLOCKS = ((BASE, 4),)


@pytest.fixture
def device(link):
    emu = RegisterFile(link.device_port)
    made: list[ModbusDevice] = []

    def make(poll_hz: float = 50.0, **settings: object) -> ModbusDevice:
        serial = SerialSettings(link.client_port, **{"timeout": 0.05, "retries": 1, "reconnect_period": 0.2,
                                                     **settings})  # fmt: skip
        bus = ModbusDevice(serial, [(BASE, 4)], poll_hz, name="test-bus")
        made.append(bus)
        bus.start()
        return bus

    yield emu, make
    for bus in made:
        bus.close()
    emu.close()


def test_polls_land_in_the_snapshot_and_writes_go_out_in_the_order_queued(device):
    emu, make = device
    emu.call(emu.set_reg, BASE + 2, 0x0001)
    emu.call(emu.set_reg, BASE + 3, 0x0002)
    bus = make()
    assert wait_for(lambda: bus.snapshot().fault is None and bus.snapshot().regs.get(BASE + 3) == 2, 5.0)
    assert bus.snapshot().u32(BASE + 2) == 0x0001_0002  # high word first
    futures = [bus.write(BASE, [7]), bus.write(BASE + 1, [8, 9]), bus.write(BASE, [0x1_0005])]
    for fut in futures:
        fut.result(5.0)
    assert emu.writes == [(BASE, [7]), (BASE + 1, [8, 9]), (BASE, [5])]  # one register: FC6; values masked to 16 bits
    bus.write_and_wait(BASE + 3, [42], timeout=5.0)  # returns once a poll after the write has landed
    assert bus.snapshot().get(BASE + 3) == 42


def test_a_dead_line_is_a_fault_that_says_why_and_it_heals_by_itself(device, link):
    _, make = device
    bus = make()
    assert wait_for(lambda: bus.snapshot().fault is None, 5.0)
    connects = bus.stats["connects"]
    link.drop = True  # the relay swallows every reply
    assert wait_for(lambda: bus.snapshot().fault is not None, 5.0)
    assert "no valid reply after 2 attempts" in bus.snapshot().fault  # the reason, with the retries it took
    assert bus.stats["failures"] >= 1
    link.heal()
    assert wait_for(lambda: bus.snapshot().fault is None, 10.0), bus.snapshot().fault
    assert bus.stats["connects"] > connects  # it reconnected on its own


def test_close_sends_what_was_queued_then_refuses_more(device):
    emu, make = device
    bus = make()
    assert wait_for(lambda: bus.snapshot().fault is None, 5.0)
    for v in range(5):
        bus.write(BASE, [v])
    bus.close(drain_timeout=5.0)
    assert [w for w in emu.writes if w[0] == BASE] == [(BASE, [v]) for v in range(5)]  # the last one: a final stop
    with pytest.raises(BusError, match="bus is closed"):
        bus.write(BASE, [9])


def test_a_write_the_device_never_confirms_is_an_error_naming_the_register(device, link):
    _, make = device
    bus = make()
    assert wait_for(lambda: bus.snapshot().fault is None, 5.0)
    link.drop = True
    t0 = time.monotonic()
    with pytest.raises(BusError, match="0x0101"):
        bus.write_and_wait(BASE + 1, [3], timeout=0.5)
    assert time.monotonic() - t0 < 30.0  # it gave up (the deadline is the caller's; no figure asserted)


@pytest.mark.parametrize("settings, match", [
    ({"port": ""}, "serial port must be set"),
    ({"port": "/dev/ttyX", "parity": "X"}, "bad serial framing"),
    ({"port": "/dev/ttyX", "slave_id": 0}, "slave_id must be 1..247"),
    ({"port": "/dev/ttyX", "timeout": 0}, "must be positive"),
])  # fmt: skip
def test_bad_settings_are_refused_before_any_traffic(settings, match):
    with pytest.raises(BusError, match=match):
        SerialSettings(**settings)


def test_a_missing_port_and_a_zero_rate_are_refused_at_start(tmp_path):
    with pytest.raises(BusError, match="poll_hz must be positive"):
        ModbusDevice(SerialSettings(str(tmp_path / "ttyNONE")), [(BASE, 1)], 0.0)
    bus = ModbusDevice(SerialSettings(str(tmp_path / "ttyNONE")), [(BASE, 1)], 10.0)
    with pytest.raises(BusError):
        bus.start()
    assert issubclass(BusError, BackendError)  # a driver catches one error for every transport


def test_a_read_the_device_refuses_is_a_fault_that_says_so(link):
    emu = RegisterFile(link.device_port)  # registers at BASE..BASE+3 only
    bus = ModbusDevice(SerialSettings(link.client_port, timeout=0.05, retries=1, reconnect_period=0.2),
                       [(BASE + 0x40, 1)], 50.0, name="test-bus")  # fmt: skip
    try:
        bus.start()
        assert wait_for(lambda: bus.snapshot().fault is not None and "refused" in bus.snapshot().fault, 5.0)
        assert "device refused read of 0x0140" in bus.snapshot().fault  # its exception reply, not "unmatched"
        assert bus.stats["unmatched"] == 0
    finally:
        bus.close()
        emu.close()
