"""ConveyorDriver's command confirmation, fault latch and e-stop retries, branch by branch.

The backend here is a scripted stand-in for the ConveyorBackend protocol (each call answers,
or raises as a drive that refuses or never confirms); the real backends run the same driver
against their emulators in test_conveyor_modbus.py and test_conveyor_io.py.
"""

from __future__ import annotations

import logging
import threading
import time

import pytest
from conftest import wait_for

from conveyor_driver import driver as driver_module
from conveyor_driver.driver import BeltState, ConveyorConfig, ConveyorDriver
from transports.errors import BackendError


class ScriptedBelt:
    """Answers like a drive; ``fail[name]`` = how many of the next calls raise (``-1``: all)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, object]] = []
        self.fail: dict[str, int] = {}
        self.fault: str | None = None
        self.running = False
        self.error: type[Exception] = BackendError  # what a failing call raises
        self.lock = threading.Lock()

    def _maybe_fail(self, name: str) -> None:
        with self.lock:
            n = self.fail.get(name, 0)
            if n:
                self.fail[name] = n - 1 if n > 0 else n
                raise self.error(f"{name} not confirmed within 2.0 s")

    def read(self) -> BeltState:
        return BeltState(time.monotonic(), 0.0, 0.03 if self.running else 0.0, self.running, self.fault)

    def run(self, speed: float) -> None:
        self.calls.append(("run", speed))
        self._maybe_fail("run")
        self.running = True

    def halt(self) -> None:
        self.calls.append(("halt", None))
        self._maybe_fail("halt")
        self.running = False

    def emergency_stop(self) -> None:
        self.calls.append(("emergency_stop", None))
        self._maybe_fail("emergency_stop")
        self.running = False

    def acknowledge_fault(self) -> None:
        self.calls.append(("acknowledge_fault", None))
        self._maybe_fail("acknowledge_fault")

    def close(self) -> None:
        self.calls.append(("close", None))


@pytest.fixture
def belt() -> ScriptedBelt:
    return ScriptedBelt()


@pytest.fixture
def driver(belt: ScriptedBelt, monkeypatch) -> ConveyorDriver:
    monkeypatch.setattr(driver_module, "ESTOP_RETRY_PERIOD", 0.01)
    d = ConveyorDriver(ConveyorConfig(speed=0.03), belt)
    yield d
    d.close()


def state(d: ConveyorDriver) -> tuple[str, bool, bool, str | None]:
    s = d.read()
    return s.commanded, s.confirmed, s.running, s.fault


def test_a_confirmed_start_and_stop(driver, belt) -> None:
    assert state(driver) == ("stop", True, False, None)
    assert driver.start() == (True, "running at 0.030 m/s (confirmed by the drive)")
    assert state(driver) == ("run", True, True, None)
    assert driver.stop() == (True, "stopped (confirmed by the drive)")
    assert state(driver) == ("stop", True, False, None)


def test_an_unconfirmed_start_commands_a_stop_and_says_both(driver, belt) -> None:
    belt.fail["run"] = 1
    ok, msg = driver.start()
    assert ok is False
    assert msg == (
        "drive refused or did not confirm running at 0.030 m/s: run not confirmed within 2.0 s; "
        "belt commanded stopped (confirmed)"
    )
    assert belt.calls == [("run", 0.03), ("halt", None)]
    assert state(driver) == ("stop", True, False, None)
    assert driver.start()[0]  # nothing latched: the next start may work


def test_an_unconfirmed_start_and_stop_latch_a_fault(driver, belt) -> None:
    belt.fail.update(run=1, halt=1)
    ok, msg = driver.start()
    assert not ok and msg.endswith("the stop sent after it was not confirmed either (halt not confirmed within 2.0 s): "
                                   "fault latched")  # fmt: skip
    latched = "stop not confirmed by the drive: halt not confirmed within 2.0 s"
    assert state(driver) == ("stop", False, False, latched)
    assert driver.start() == (False, f"conveyor in fault: {latched}")


def test_an_unconfirmed_stop_latches_and_warns(driver, belt) -> None:
    assert driver.start()[0]
    belt.fail["halt"] = 1
    ok, msg = driver.stop()
    assert ok is False
    assert msg == (
        "stop not confirmed by the drive: halt not confirmed within 2.0 s; "
        "the belt may still run: use the hardware stop"
    )
    commanded, confirmed, running, fault = state(driver)
    assert (commanded, confirmed, running) == ("stop", False, False) and fault.startswith("stop not confirmed")
    # the reset re-sends the stop before it clears anything
    ok, msg = driver.reset_fault()
    assert ok, msg
    assert belt.calls[-2:] == [("acknowledge_fault", None), ("halt", None)]
    assert state(driver) == ("stop", True, False, None)


@pytest.mark.parametrize("call", ["halt", "emergency_stop"])
def test_a_stop_that_raises_anything_is_not_confirmed_and_latches(driver, belt, call) -> None:
    """Not only the backends' BackendError: a stop that raised at all (a backend's bug) must not look like a
    stopped belt, nor end the node."""
    belt.error = AttributeError
    belt.fail[call] = -1
    ok, msg = driver.stop() if call == "halt" else driver.emergency_stop()
    assert ok is False and "not confirmed" in msg.lower()
    assert driver.read().fault is not None


def test_a_start_that_raises_something_else_than_a_backend_error_is_not_taken_for_running(driver, belt) -> None:
    """Not the drive's answer but a bug: it propagates (the node reports it) and the belt is not confirmed."""
    belt.error = AttributeError
    belt.fail["run"] = 1
    with pytest.raises(AttributeError):
        driver.start()
    assert state(driver) == ("run", False, False, None)


def test_a_reset_fails_while_the_stop_still_is_not_confirmed(driver, belt) -> None:
    belt.fail["halt"] = -1
    driver.stop()
    assert driver.reset_fault() == (
        False,
        "fault kept: the drive still does not confirm a stop: halt not confirmed within 2.0 s",
    )
    assert state(driver)[3] is not None


def test_set_speed_while_running_reaches_the_drive_and_a_refusal_keeps_the_old_one(driver, belt) -> None:
    assert driver.set_speed(0.05) == (True, "speed set to 0.050 m/s")  # stopped: only the set-point
    assert ("run", 0.05) not in belt.calls
    assert driver.start()[0]
    assert driver.set_speed(0.04) == (True, "speed set to 0.040 m/s") and belt.calls[-1] == ("run", 0.04)
    belt.fail["run"] = 1
    ok, msg = driver.set_speed(0.06)
    assert ok is False and msg == "drive refused 0.060 m/s (kept 0.040 m/s): run not confirmed within 2.0 s"
    assert driver.set_speed_value == 0.04 and state(driver) == ("run", True, True, None)
    assert driver.set_speed(5.0) == (False, "belt speed 5.0 m/s outside [0, 0.2]")


def test_a_confirmed_emergency_stop_latches_until_reset(driver, belt) -> None:
    assert driver.start()[0]
    ok, msg = driver.emergency_stop()
    assert ok is True
    assert msg == "emergency stop: belt stopped (confirmed by the drive); reset_fault, then start, to run"
    assert state(driver) == ("emergency_stop", True, False, "emergency stop requested")
    assert driver.start() == (False, "conveyor in fault: emergency stop requested")
    assert driver.reset_fault() == (True, "fault cleared; conveyor stopped until started")
    assert driver.start()[0]


def test_an_unconfirmed_emergency_stop_is_resent_until_the_drive_confirms(driver, belt, caplog) -> None:
    belt.fail["emergency_stop"] = 3
    with caplog.at_level(logging.ERROR, logger="conveyor_driver.driver"):
        ok, msg = driver.emergency_stop()
        assert ok is False
        assert msg == ("EMERGENCY STOP NOT CONFIRMED by the drive (emergency_stop not confirmed within 2.0 s): "
                       "re-sending; use the hardware e-stop")  # fmt: skip
        unconfirmed = "emergency stop not confirmed by the drive: emergency_stop not confirmed within 2.0 s"
        assert state(driver)[3] == unconfirmed
        assert driver.reset_fault() == (
            False,
            "emergency stop not confirmed by the drive: emergency_stop not confirmed within 2.0 s: the belt may still "
            "run; use the hardware e-stop",
        )
        assert wait_for(lambda: state(driver)[1], 5.0)  # the fourth attempt got through
    assert [c for c, _ in belt.calls].count("emergency_stop") == 4
    assert sum("emergency stop not confirmed" in r.getMessage() for r in caplog.records) == 3
    assert state(driver) == ("emergency_stop", True, False, "emergency stop requested")
    time.sleep(0.1)
    assert [c for c, _ in belt.calls].count("emergency_stop") == 4  # and then it stops re-sending


def test_a_second_emergency_stop_does_not_start_a_second_retry_loop(driver, belt) -> None:
    belt.fail["emergency_stop"] = -1
    driver.emergency_stop()
    first = driver._estop_thread
    driver.emergency_stop()
    assert driver._estop_thread is first and first.is_alive()
    belt.fail["emergency_stop"] = 0
    assert wait_for(lambda: not first.is_alive(), 5.0)


def test_close_ends_the_retries(driver, belt) -> None:
    belt.fail["emergency_stop"] = -1
    driver.emergency_stop()
    thread = driver._estop_thread
    driver.close()
    assert wait_for(lambda: not thread.is_alive(), 2.0)
    assert belt.calls[-1][0] in ("close", "emergency_stop")


def test_a_drive_fault_latches_and_the_belt_is_stopped_off_the_reading_thread(driver, belt) -> None:
    assert driver.start()[0]
    belt.fault = "fault code 7"
    assert state(driver) == ("run", True, False, "fault code 7")
    assert wait_for(lambda: ("halt", None) in belt.calls, 2.0)
    assert wait_for(lambda: state(driver)[:2] == ("stop", True), 2.0)
    belt.fault = None
    assert state(driver)[3] == "fault code 7"  # latched until the operator resets
    assert [c for c, _ in belt.calls].count("halt") == 1  # once, not on every read
    assert driver.reset_fault()[0]


def test_a_drive_fault_after_an_emergency_stop_sends_no_plain_stop(driver, belt) -> None:
    assert driver.start()[0]
    driver._running = True  # as if the fault arrived while the e-stop was going out
    driver._commanded = "emergency_stop"
    belt.fault = "fault code 7"
    driver.read()
    time.sleep(0.1)
    assert ("halt", None) not in belt.calls


def test_a_failed_stop_after_a_drive_fault_is_logged(driver, belt, caplog) -> None:
    assert driver.start()[0]
    belt.fail["halt"] = 1
    belt.fault = "fault code 9"
    with caplog.at_level(logging.ERROR, logger="conveyor_driver.driver"):
        driver.read()
        assert wait_for(lambda: any("stop after a drive fault not confirmed" in r.getMessage() for r in caplog.records))
    assert state(driver)[:2] == ("stop", False)


def test_a_reset_the_drive_refuses_keeps_the_fault(driver, belt) -> None:
    driver.emergency_stop()
    belt.fail["acknowledge_fault"] = 1
    assert driver.reset_fault() == (False, "drive refused the reset: acknowledge_fault not confirmed within 2.0 s")
    belt.fault = "fault code 3"
    assert driver.reset_fault() == (False, "fault still present: fault code 3")


# ------------------------------------------------------------------ limits and the running flag
@pytest.mark.parametrize("speed", [0.0, 0.2])
def test_speeds_on_either_end_of_the_range_are_accepted(speed) -> None:
    assert driver_module.check_speed(speed, 0.2) == speed


@pytest.mark.parametrize("speed", [-1e-9, 0.2 + 1e-9, float("nan"), float("inf")])
def test_speeds_just_outside_the_range_are_refused(speed) -> None:
    with pytest.raises(driver_module.ConveyorError, match=r"belt speed .* m/s outside \[0, 0.2\]"):
        driver_module.check_speed(speed, 0.2)


@pytest.mark.parametrize("max_speed", [0.0, -0.1, float("nan"), float("inf")])
def test_a_max_speed_that_is_not_a_positive_number_is_refused(max_speed) -> None:
    with pytest.raises(driver_module.ConveyorError, match=r"^max_speed must be positive, got "):
        ConveyorConfig(speed=0.0, max_speed=max_speed)


def _runs(belt: ScriptedBelt) -> int:
    return sum(c == "run" for c, _ in belt.calls)


def _set_speed_sends_nothing(driver: ConveyorDriver, belt: ScriptedBelt) -> None:
    """A belt that was confirmed stopped must stay stopped when its set speed changes."""
    runs = _runs(belt)
    assert driver.set_speed(0.05) == (True, "speed set to 0.050 m/s")
    assert _runs(belt) == runs and not belt.running


def test_after_a_confirmed_stop_a_new_speed_does_not_start_the_belt(driver, belt) -> None:
    assert driver.start()[0]
    assert driver.stop()[0]
    _set_speed_sends_nothing(driver, belt)


def test_after_a_refused_start_and_its_stop_a_new_speed_does_not_start_the_belt(driver, belt) -> None:
    belt.fail["run"] = 1
    belt.running = True  # the drive took the run after all, then the stop
    assert not driver.start()[0]
    _set_speed_sends_nothing(driver, belt)


def test_after_an_emergency_stop_and_reset_a_new_speed_does_not_start_the_belt(driver, belt) -> None:
    assert driver.start()[0]
    assert driver.emergency_stop()[0]
    assert driver.reset_fault()[0]
    _set_speed_sends_nothing(driver, belt)


def test_after_a_resent_stop_at_reset_a_new_speed_does_not_start_the_belt(driver, belt) -> None:
    assert driver.start()[0]
    belt.fail["halt"] = 1
    assert not driver.stop()[0]
    assert driver.reset_fault()[0]  # re-sends the stop, confirmed this time
    _set_speed_sends_nothing(driver, belt)


def test_after_a_drive_fault_stopped_the_belt_a_new_speed_does_not_start_it(driver, belt) -> None:
    assert driver.start()[0]
    belt.fault = "fault code 7"
    driver.read()
    assert wait_for(lambda: state(driver)[:2] == ("stop", True), 2.0)
    belt.fault = None
    assert driver.reset_fault()[0]
    _set_speed_sends_nothing(driver, belt)


def test_a_drive_fault_whose_stop_fails_leaves_the_belt_not_running(driver, belt) -> None:
    assert driver.start()[0]
    belt.fail["halt"] = -1
    belt.fault = "fault code 7"
    driver.read()
    assert wait_for(lambda: ("halt", None) in belt.calls, 2.0)
    belt.fault = None
    belt.fail["halt"] = 0
    assert driver.reset_fault()[0]  # the stop goes through now
    _set_speed_sends_nothing(driver, belt)


def test_the_error_logs_say_what_was_not_confirmed(driver, belt, caplog) -> None:
    belt.fail["emergency_stop"] = 1
    with caplog.at_level(logging.ERROR, logger="conveyor_driver.driver"):
        driver.emergency_stop()
        assert wait_for(lambda: state(driver)[1], 5.0)
    assert caplog.records[0].getMessage() == (
        "conveyor: emergency stop not confirmed by the drive: emergency_stop not confirmed within 2.0 s"
    )
    caplog.clear()
    assert driver.reset_fault()[0] and driver.start()[0]
    belt.fail["halt"] = 1
    belt.fault = "fault code 9"
    with caplog.at_level(logging.ERROR, logger="conveyor_driver.driver"):
        driver.read()
        assert wait_for(lambda: bool(caplog.records), 2.0)
    assert caplog.records[0].getMessage() == (
        "conveyor: stop after a drive fault not confirmed: halt not confirmed within 2.0 s"
    )


def test_background_threads_never_keep_the_process_alive(driver, belt) -> None:
    belt.fail["emergency_stop"] = -1
    driver.emergency_stop()
    assert driver._estop_thread.name == "conveyor-estop-retry" and driver._estop_thread.daemon
    belt.fail["emergency_stop"] = 0
    assert wait_for(lambda: not driver._estop_thread.is_alive(), 2.0)
    assert driver.reset_fault()[0] and driver.start()[0]
    belt.fail["halt"] = -1  # the fault-halt thread stays in its (failing) stop long enough to be seen
    seen: list[threading.Thread] = []
    original = belt.halt

    def slow_halt() -> None:
        seen.extend(t for t in threading.enumerate() if t.name == "conveyor-fault-halt")
        original()

    belt.halt = slow_halt
    belt.fault = "fault code 7"
    driver.read()
    assert wait_for(lambda: bool(seen), 2.0)
    assert seen[0].daemon
