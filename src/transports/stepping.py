"""A node's control step, on the wall clock (the physical cell) or on the world's ticks (sim lockstep).

On hardware a source or a recorder runs its step at ``control_hz`` on absolute wall-clock deadlines and uses
the newest inputs. On the simulated workcell in lockstep (:mod:`transports.sim_lockstep`) the same step runs once
per control step of the world, on the observation of that step exactly (the robot state and camera frames
stamped with its sim time), and the world does not move on until the step is done. Same node code, one
switch: the :class:`Step` a body is given says which it is.

:class:`StampedInputs` keeps the recent stamped inputs a step needs and waits for the ones of its step. A step
that waits for another participant's message which a callback of its node handles (the arm bridge, the active
source's action) asks :func:`await_source_action`: whether the source sent one for this step, then until the
callback reported it to :class:`Arrivals`.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from libero_workcell.rate import SHUTDOWN_JOIN, RateLoop, run_loop

READY_POLL = 0.05  # s between checks that a participant's topics are matched, before it registers


@dataclass(frozen=True)
class Step:
    """One control step: what it answers and on which clock."""

    index: int  # control steps so far (lockstep: the world's control step index)
    time_ns: int  # the observation's time: the sim clock in lockstep, time.time_ns() otherwise
    frames_ns: Mapping[str, int] | None = None  # lockstep: each camera's frame of this step (its stamp)
    lockstep: bool = False
    paused: bool = False  # lockstep: the episode is over, the physics stands still
    episode: int = 0  # lockstep: the world's episode counter (a reset starts the next one on a control step)

    @property
    def time(self) -> float:
        return self.time_ns * 1e-9


class StepRunner:
    """Run ``body(step) -> acted`` once per control step until :meth:`stop`.

    ``lockstep``: take part in the world's control steps on ``sim_link`` as ``name`` (``source``: the action
    source this node publishes as, so the arm driver and the recorder know whether to wait for its action);
    registration waits until ``ready()`` says the node's topics are matched. Otherwise: a wall-clock loop at
    ``hz`` (SCHED_FIFO ``priority`` if allowed).
    """

    def __init__(self, name: str, hz: float, body: Callable[[Step], bool], *, lockstep: bool = False,
                 sim_link: str = "", source: str = "", ready: Callable[[], bool] = lambda: True,
                 priority: int = 0, attach_timeout: float = 60.0) -> None:  # fmt: skip
        self.name, self.hz, self.body = name, float(hz), body
        self.lockstep = bool(lockstep)
        self._sim_link, self._source, self._ready, self._priority = sim_link, source, ready, priority
        self._attach_timeout = attach_timeout
        self._stop = threading.Event()
        self.loop: RateLoop | None = None
        self._thread: threading.Thread | None = None  # the wall-clock loop's
        self._ticks: TickThread | None = None  # lockstep
        self._count = 0

    def start(self) -> None:
        if not self.lockstep:
            self._thread, self.loop = run_loop(self.hz, self._wall_step, self._stop, self.name, priority=self._priority)
            return
        self._ticks = TickThread(self._register, self._lockstep_step, self.name, self._stop, ready=self._ready)

    @property
    def priority_note(self) -> str | None:
        return None if self.loop is None else self.loop.priority_note

    @property
    def participant(self) -> Any:
        """Lockstep: this node's participant, once registered (None before, and on the wall clock)."""
        return None if self._ticks is None else self._ticks.participant

    @property
    def errors(self) -> int:
        return 0 if self._ticks is None else self._ticks.errors

    @property
    def last_error(self) -> str:
        return "" if self._ticks is None else self._ticks.last_error

    def _wall_step(self) -> None:
        self._count += 1
        self.body(Step(self._count, time.time_ns()))

    def _register(self) -> Any:
        from transports.sim_lockstep import CONTROL, LockstepParticipant

        return LockstepParticipant(self._sim_link, self.name, CONTROL, source=self._source,
                                   attach_timeout=self._attach_timeout)  # fmt: skip

    def _lockstep_step(self, tick: Any) -> bool:
        from libero_workcell.contract import CAMERA_NAMES

        step = Step(int(tick.control_step), tick.time_ns, dict(zip(CAMERA_NAMES, tick.frame_time_ns, strict=True)),
                    True, tick.paused, tick.episode)  # fmt: skip
        return bool(self.body(step))

    def waiting(self, code: int) -> None:
        """Tell the supervisor what the step is waiting for (lockstep only)."""
        if self.participant is not None:
            self.participant.waiting(code)

    def source_acted(self, source: str, step: Step) -> bool:
        """Lockstep: whether ``source`` sent an action for ``step`` (:func:`source_acted`); never on a paused
        step (the episode is over: no source acts)."""
        return not step.paused and source_acted(self.participant, source, step.index, self._stop)

    def stop(self) -> None:
        self._stop.set()
        if self._ticks is not None:
            self._ticks.stop()
        if self._thread is not None:
            self._thread.join(timeout=SHUTDOWN_JOIN)

    @property
    def stopping(self) -> threading.Event:
        return self._stop


class TickThread:
    """A lockstep participant's part in the world, on a thread of its own: once ``ready()`` holds (looked at every
    READY_POLL s) it registers (``register()`` returns the participant), then runs ``body(tick) -> acted`` for
    every tick it has a part in. The part is done whatever the body raised (the world must not hang on it: the
    failure is counted), and ``world_gone()`` is called if the world ends first. One loop for every kind of
    participant: a node's control step (:class:`StepRunner`), a camera's frames, the arm bridge's servo ticks.
    ``stop`` (the node's, or its own) ends it: :meth:`stop` also wakes its wait, joins it and leaves the world."""

    def __init__(self, register: Callable[[], Any], body: Callable[[Any], Any], name: str,
                 stop: threading.Event | None = None, *, ready: Callable[[], bool] = lambda: True,
                 world_gone: Callable[[], None] | None = None) -> None:  # fmt: skip
        self.participant: Any = None
        self.errors = 0
        self.last_error = ""
        self._register, self._body, self._ready, self._world_gone = register, body, ready, world_gone
        self._stop = stop or threading.Event()
        self._registered = threading.Lock()  # registration and stop() never cross: a stopped loop never registers
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._ready():
            if self._stop.wait(READY_POLL):
                return
        with self._registered:
            if self._stop.is_set():
                return
            self.participant = p = self._register()
        while (tick := p.next_tick(self._stop)) is not None:
            acted = False
            try:
                acted = bool(self._body(tick))
            except Exception as exc:  # a part that failed is done all the same: the world must not hang on it
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            p.done(tick, acted)
        if not self._stop.is_set() and self._world_gone is not None:
            self._world_gone()

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def stop(self) -> None:
        self._stop.set()
        with self._registered:
            p = self.participant
        if p is not None:
            p.interrupt()
        self._thread.join(timeout=SHUTDOWN_JOIN)
        if p is not None:
            p.close()


class StampedInputs:
    """The recent inputs of a step, each kept by its stamp (ns): the newest for the wall clock, the exact
    ones for a lockstep step. Thread-safe: callbacks put, the step thread waits."""

    def __init__(self, keys: Sequence[str], depth: int = 32) -> None:
        self._keys = tuple(keys)
        self._depth = depth
        self._data: dict[str, OrderedDict[int, Any]] = {k: OrderedDict() for k in self._keys}
        self._cond = threading.Condition()

    def put(self, key: str, stamp_ns: int, value: Any) -> None:
        with self._cond:
            d = self._data[key]
            d[int(stamp_ns)] = value
            while len(d) > self._depth:
                d.popitem(last=False)
            self._cond.notify_all()

    def latest(self, key: str) -> tuple[int, Any] | None:
        with self._cond:
            d = self._data[key]
            if not d:
                return None
            stamp = next(reversed(d))
            return stamp, d[stamp]

    def get(self, key: str, stamp_ns: int) -> Any | None:
        with self._cond:
            return self._data[key].get(int(stamp_ns))

    def clear(self) -> None:
        with self._cond:
            for d in self._data.values():
                d.clear()

    def wait(self, wanted: Mapping[str, int], stop: threading.Event | None = None,
             timeout: float | None = None) -> dict[str, Any] | None:  # fmt: skip
        """The value of each ``key`` stamped exactly ``wanted[key]``, once all are here; None if ``stop`` was
        set or ``timeout`` (wall s) passed first. In lockstep every one of them is on its way: the world waits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while True:
                got = {k: self._data[k].get(int(t)) for k, t in wanted.items()}
                if all(v is not None for v in got.values()):
                    return got
                if stop is not None and stop.is_set():
                    return None
                remaining = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                if remaining <= 0:
                    return None
                self._cond.wait(remaining)

    def notify(self) -> None:
        """Wake a waiter (to look at its stop event)."""
        with self._cond:
            self._cond.notify_all()


def source_acted(participant: Any, source: str, step: int, stop: threading.Event) -> bool:
    """Lockstep: wait until the participant publishing as ``source`` is done with control step ``step``; whether
    it sent an action for it (False: it did not, no such participant takes part, or the wait was stopped)."""
    participant.waiting(3)  # (sim_lockstep.WAITING: the active source's action)
    return bool(participant.wait_source(source, step, stop))


class Arrivals:
    """The newest stamp each key's message came with, once a callback handled it, and a wait for a stamp: a
    lockstep step whose message is handled by a callback (not kept in :class:`StampedInputs`) waits here."""

    def __init__(self) -> None:
        self._newest: dict[str, int] = {}
        self._cond = threading.Condition()

    def came(self, key: str, stamp_ns: int) -> None:
        with self._cond:
            self._newest[key] = max(self._newest.get(key, -1), int(stamp_ns))
            self._cond.notify_all()

    def wait(self, key: str, stamp_ns: int, stop: threading.Event, alive: Callable[[], bool],
             poll: float = 0.5) -> bool:  # fmt: skip
        """Until ``key``'s message stamped ``stamp_ns`` (or newer) came: True; False once ``stop`` is set or,
        looked at every ``poll`` s, ``alive()`` says what would send it is gone."""
        with self._cond:
            while self._newest.get(key, -1) < stamp_ns:
                if stop.is_set():
                    return False
                if not self._cond.wait(poll) and not alive():
                    return False
            return True

    def notify(self) -> None:
        """Wake a waiter (to look at its stop event)."""
        with self._cond:
            self._cond.notify_all()


def await_source_action(participant: Any, arrivals: Arrivals, source: str, tick: Any,
                        stop: threading.Event) -> None:  # fmt: skip
    """Lockstep, a control step's ``tick``: if ``source`` says it sent an action for it, until a callback
    reported that action to ``arrivals`` (taken or refused); at once if it sent none or the world is gone."""
    if source_acted(participant, source, tick.control_step, stop):
        arrivals.wait(source, tick.time_ns, stop, participant.world_alive)
