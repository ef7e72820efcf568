"""The gripper answering late on its RS-485 (issue 35, item 3): the real CTAG backend and bus (pymodbus) against
the CTAG emulator on a pty, the gripper holding its replies back as a device under load does. The gripper shares
the belt's transport, and its requests have replies alike: the alarm read's (one register) and a command's
trigger echo (function 6, one value) are the same size. Whatever the delays, the alarm read as 0 stays 0
(never `gripper alarm code ...` [GRIP-ALARM]) and every position read is one the fingers were at."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest
from conftest import wait_for
from ctag_rigs import ALARM_REG, fast_config
from emulators.modbus_devices import CtagEmulator
from emulators.serial_link import FaultyLink
from hypothesis import given, settings
from hypothesis import strategies as st

from gripper.ctag.modbus_backend import CtagGripperBackend

TIMEOUT = 0.05  # fast_config's


class RecordingCtag(CtagEmulator):
    """The gripper, remembering every position its feedback registers held."""

    def __init__(self, port: str) -> None:
        self.positions: set[int] = {0}
        super().__init__(port, alarm_register=ALARM_REG)

    def step(self, dt: float) -> None:
        super().step(dt)
        self.positions.add(round(self.position))


class Gripper:
    """The gripper behind the relay and the backend polling its feedback and alarm; every measurement the
    backend gave, sampled faster than the arm's servo tick reads it."""

    def __init__(self) -> None:
        self.link = FaultyLink()
        self.ctag = RecordingCtag(self.link.device_port)
        self.backend = CtagGripperBackend(fast_config(self.link.client_port))
        assert wait_for(lambda: self.backend.read().fault is None, 5.0), self.backend.read().fault
        self.faults: set[str] = set()
        self.counts: set[int] = set()
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watch_reads, daemon=True)
        self._watch.start()

    def _watch_reads(self) -> None:
        full = self.backend.config.position_max
        while not self._stop.wait(0.002):
            m = self.backend.read()
            self.counts.add(round(m.coord * full))
            if m.fault is not None:
                self.faults.add(m.fault)

    def command_while_late(self, delays: list[float], targets: list[float]) -> None:
        """Replies late by ``delays`` (s, in order) while the targets are commanded one after another."""
        self.ctag.delay_replies(delays)
        for i, target in enumerate(targets):
            self.backend.command(target)
            wait_for(lambda n=i: self.ctag.call(len, self.ctag._delays) <= len(delays) * (1 - (n + 1) / len(targets)))
        assert wait_for(lambda: self.ctag.call(len, self.ctag._delays) == 0, 60.0)
        stats = self.backend.bus.stats
        polls, retries = stats["polls"], stats["retries"]

        def in_step() -> bool:  # polls answered at the first try again
            nonlocal polls, retries
            if stats["retries"] != retries:
                polls, retries = stats["polls"], stats["retries"]
            return stats["polls"] - polls >= 5

        assert wait_for(in_step, 30.0), stats

    def alarm_faults(self) -> list[str]:
        assert self._watch.is_alive()  # still sampling: a watcher that died would see nothing wrong
        return [f for f in self.faults if "alarm code" in f]

    def foreign_positions(self) -> set[int]:
        return self.counts - self.ctag.positions

    def close(self) -> None:
        self._stop.set()
        self._watch.join()
        self.backend.close()
        self.ctag.close()
        self.link.close()


@pytest.fixture
def gripper() -> Iterator[Gripper]:
    g = Gripper()
    yield g
    g.close()


@pytest.mark.slow
def test_a_late_trigger_echo_is_never_read_as_the_gripper_alarm(gripper: Gripper) -> None:
    rng = random.Random(35)
    delays = [rng.choice([0.0, 0.0, 0.0, 0.6, 1.4, 1.9]) * TIMEOUT for _ in range(120)]
    gripper.command_while_late(delays, [rng.choice([0.0, 0.3, 0.7, 1.0]) for _ in range(20)])
    assert gripper.ctag.reg(ALARM_REG) == 0 and gripper.backend.bus.stats["retries"] > 0  # late, never in alarm
    assert gripper.alarm_faults() == []  # what it read before: "gripper alarm code 1" (a trigger's echo)
    assert gripper.foreign_positions() == set()
    assert gripper.backend.read().fault is None


@pytest.fixture(scope="module")
def shared_gripper() -> Iterator[Gripper]:
    g = Gripper()
    yield g
    g.close()


@pytest.mark.slow
@settings(max_examples=8, deadline=None)
@given(
    delays=st.lists(st.sampled_from([0.0, 0.3, 0.9, 1.2, 1.6, 2.0, 2.6]), min_size=4, max_size=16),
    targets=st.lists(st.sampled_from([0.0, 0.25, 0.5, 1.0]), min_size=1, max_size=6),
)
def test_whatever_the_delays_the_alarm_read_as_0_stays_0_and_positions_are_the_fingers(
    shared_gripper: Gripper, delays: list[float], targets: list[float]
) -> None:
    shared_gripper.command_while_late([d * TIMEOUT for d in delays], targets)  # delays in timeouts
    assert shared_gripper.alarm_faults() == []
    assert shared_gripper.foreign_positions() == set()
