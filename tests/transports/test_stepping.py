"""A lockstep step's waits for another participant (src/transports/stepping.py): whether the source sent an action
for this step, then until the callback that handles it reported it. Without ROS and without a world: the
participant's side (``wait_source``) is tests/transports/test_lockstep.py's."""

from __future__ import annotations

import threading
import time

from transports.stepping import Arrivals, Step, StepRunner, TickThread, await_source_action, source_acted


class FakeParticipant:
    """What the waits ask of a lockstep participant: its source's decision, whether the world lives, and what it
    says it waits for."""

    def __init__(self, decision: bool | None, alive: bool = True) -> None:
        self.decision, self.alive = decision, alive
        self.asked: list[tuple[str, int]] = []
        self.codes: list[int] = []
        self.ticks: list = []
        self.done_ticks: list = []
        self.interrupted = self.closed = False

    def waiting(self, code: int) -> None:
        self.codes.append(code)

    def wait_source(self, source: str, step: int, stop: object) -> bool | None:
        self.asked.append((source, step))
        return self.decision

    def world_alive(self) -> bool:
        return self.alive

    # the loop's side: the ticks it is given (``ticks``), then the world ends (None)
    def next_tick(self, stop: threading.Event) -> object | None:
        return self.ticks.pop(0) if self.ticks and not stop.is_set() else None

    def done(self, tick: object, acted: bool = False) -> None:
        self.done_ticks.append((tick, acted))

    def interrupt(self) -> None:
        self.interrupted = True

    def close(self) -> None:
        self.closed = True


class Tick:
    control_step = 7
    time_ns = 350_000_000


def _in_thread(fn) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_a_stamp_that_came_or_a_newer_one_ends_the_wait_an_older_one_does_not() -> None:
    arrivals, stop = Arrivals(), threading.Event()
    arrivals.came("teleop", 200)
    assert arrivals.wait("teleop", 200, stop, lambda: True)
    assert arrivals.wait("teleop", 100, stop, lambda: True)  # a newer one came: that step is long handled
    arrivals.came("teleop", 150)  # a late, older message never moves it back
    got: list[bool] = []
    waiter = _in_thread(lambda: got.append(arrivals.wait("teleop", 250, stop, lambda: True, poll=0.05)))
    waiter.join(0.3)
    assert waiter.is_alive() and not got  # 250 is not here: still waiting
    arrivals.came("expert", 250)  # another key's stamp is not this one's
    waiter.join(0.3)
    assert waiter.is_alive()
    arrivals.came("teleop", 250)
    waiter.join(5.0)
    assert got == [True]


def test_a_wait_ends_false_once_stopped_or_once_the_sender_is_gone() -> None:
    arrivals, stop = Arrivals(), threading.Event()
    got: list[bool] = []
    waiter = _in_thread(lambda: got.append(arrivals.wait("policy", 50, stop, lambda: True, poll=10.0)))
    time.sleep(0.1)
    stop.set()
    arrivals.notify()  # a shutdown wakes it: it looks at its stop at once, not at its next poll
    waiter.join(2.0)
    assert got == [False]
    alive = [True]
    waiter = _in_thread(lambda: got.append(arrivals.wait("policy", 50, threading.Event(), lambda: alive[0],
                                                         poll=0.05)))  # fmt: skip
    waiter.join(0.3)
    assert waiter.is_alive()  # the world lives: it waits on
    alive[0] = False
    waiter.join(2.0)
    assert got == [False, False]


def test_a_step_waits_for_the_action_only_when_its_source_says_it_sent_one() -> None:
    stop = threading.Event()
    for decision in (False, None):  # sent none for this step, or no such source takes part: no wait at all
        p, arrivals = FakeParticipant(decision), Arrivals()
        done = _in_thread(lambda p=p, a=arrivals: await_source_action(p, a, "teleop", Tick(), stop))
        done.join(2.0)
        assert not done.is_alive() and p.asked == [("teleop", 7)] and p.codes == [3]
    p, arrivals = FakeParticipant(True), Arrivals()
    done = _in_thread(lambda: await_source_action(p, arrivals, "teleop", Tick(), stop))
    done.join(0.3)
    assert done.is_alive()  # sent: the step waits until the callback handled it
    arrivals.came("teleop", Tick.time_ns)
    done.join(2.0)
    assert not done.is_alive()
    p, arrivals = FakeParticipant(True, alive=False), Arrivals()  # sent, but the world is gone: it ends
    done = _in_thread(lambda: await_source_action(p, arrivals, "teleop", Tick(), stop))
    done.join(2.0)
    assert not done.is_alive()


def test_a_paused_step_has_no_source_decision_to_wait_for() -> None:
    fake = FakeParticipant(True)
    runner = StepRunner("rec", 20.0, lambda step: False, lockstep=True)
    runner._ticks = TickThread(lambda: fake, lambda tick: False, "rec", ready=lambda: False)  # never registers
    runner._ticks.participant = fake
    assert runner.source_acted("expert", Step(4, 200_000_000, lockstep=True))
    assert not runner.source_acted("expert", Step(5, 250_000_000, lockstep=True, paused=True))
    assert fake.asked == [("expert", 4)]  # the paused step never asked
    runner._ticks.stop()
    assert source_acted(FakeParticipant(None), "expert", 4, threading.Event()) is False


def test_every_tick_is_done_whatever_the_body_did_and_a_world_that_ends_is_said_once() -> None:
    fake, gone = FakeParticipant(True), []
    fake.ticks = [1, 2, 3]

    def body(tick: int) -> bool:
        if tick == 2:
            raise RuntimeError("frame lost")
        return tick == 3

    loop = TickThread(lambda: fake, body, "t", world_gone=lambda: gone.append(True))
    loop.thread.join(5.0)
    assert fake.done_ticks == [(1, False), (2, False), (3, True)]  # the failed part is done all the same
    assert (loop.errors, loop.last_error) == (1, "RuntimeError: frame lost") and gone == [True]
    loop.stop()
    assert fake.interrupted and fake.closed  # it left the world


def test_a_loop_stopped_before_it_was_ready_never_registers_and_a_stopped_one_is_not_a_world_gone() -> None:
    registered, gone = [], []
    loop = TickThread(lambda: registered.append(True), lambda tick: False, "t", ready=lambda: False,
                      world_gone=lambda: gone.append(True))  # fmt: skip
    time.sleep(0.2)
    loop.stop()
    assert not loop.thread.is_alive() and registered == [] and gone == []
    stop = threading.Event()
    fake = FakeParticipant(True)
    fake.ticks = [1]
    stop.set()  # the node stopped: the loop ends without a world-gone
    loop = TickThread(lambda: fake, lambda tick: False, "t", stop, world_gone=lambda: gone.append(True))
    loop.thread.join(5.0)
    assert gone == [] and fake.done_ticks == []
