"""The lockstep barrier (src/transports/sim_lockstep.py) and the world's clock (sim_cell/world_clock.py), without ROS.

Participants run in other processes, as the nodes do: each tick reaches exactly the participants that have a
part in it, the world waits for each part, a participant that died is named at once and one that stopped
answering after the stall timeout, with what it was waiting for; a participant whose world is gone stops.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
import uuid
from typing import TYPE_CHECKING

import numpy as np
import pytest

from libero_workcell.contract import CAMERA_NAMES
from transports.sim_lockstep import (
    CAMERA,
    CONTROL,
    OBSERVER,
    SERVO,
    LockstepError,
    LockstepParticipant,
    LockstepWorld,
    Tick,
    lockstep_path,
    registered,
)

if TYPE_CHECKING:
    from sim_cell.world_clock import WorldClock

SERVO_NS, CONTROL_NS = 10_000_000, 50_000_000
CTX = multiprocessing.get_context("spawn")


def _tick(k: int, rendered: int = 0, paused: bool = False) -> Tick:
    step = k // 5 if k % 5 == 0 else None
    return Tick(k, k * SERVO_NS, 1, step, (k, k), (k * SERVO_NS,) * len(CAMERA_NAMES), rendered, paused)


def _participant(link: str, name: str, kinds: int, source: str, cameras: tuple[str, ...], out, behaviour: str) -> None:
    """A stand-in node: records each tick it is given; ``behaviour`` says how it answers."""
    p = LockstepParticipant(link, name, kinds, source=source, cameras=cameras)
    out.put(("registered", name, os.getpid()))
    while (tick := p.next_tick()) is not None:
        out.put(("tick", name, tick.index, tick.control_step))
        if behaviour == "hang" and tick.index >= 3:
            p.waiting(2)
            time.sleep(3600)
        p.done(tick, acted=behaviour == "act")
    out.put(("gone", name, None))


@pytest.fixture
def world():
    link = f"t{uuid.uuid4().hex[:10]}"
    w = LockstepWorld(link, SERVO_NS, CONTROL_NS, stall_timeout=1.5)
    procs: list = []
    yield link, w, procs
    w.close()
    for p in procs:
        if p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
        p.join(5)


def _start(ctx, link, name, kinds, out, behaviour="act", source="", cameras=()):
    proc = CTX.Process(target=_participant, args=(link, name, kinds, source, cameras, out, behaviour), daemon=True)
    proc.start()
    ctx.append(proc)
    return proc


def _drain(q, gone: set[str], timeout: float = 30.0) -> list:
    """What the participants put on ``q`` until each of ``gone`` said it is gone (its world closed): all it put,
    in order, since a process's puts arrive in the order made."""
    items, deadline = [], time.monotonic() + timeout
    while gone and time.monotonic() < deadline:
        try:
            items.append(q.get(timeout=0.05))
        except Exception:
            continue
        if items[-1][0] == "gone":
            gone.discard(items[-1][1])
    assert not gone, f"{sorted(gone)} never went: {items}"
    return items


def test_each_tick_reaches_exactly_the_participants_that_have_a_part_in_it_and_is_waited_for(world):
    link, w, procs = world
    out = CTX.Queue()
    _start(procs, link, "arm", SERVO, out)
    _start(procs, link, "cam", CAMERA, out, cameras=("wrist",))
    _start(procs, link, "src", CONTROL, out, source="expert")
    assert w.wait_for(["arm", "cam", "src"], timeout=30) == []
    wrist = 1 << CAMERA_NAMES.index("wrist")
    for k in range(11):
        if k % 5 == 0:  # new frames: only once the camera took the last ones (their slot is overwritten)
            assert w.wait_frames_taken() == []
            assert k == 0 or {p.name: p.done_tick for p in w.participants()}["cam"] == k - 5
        w.publish(_tick(k, rendered=wrist if k % 5 == 0 else 0))
        assert w.wait_done() == []
        done = {p.name: p.done_tick for p in w.participants()}
        # the world never passes a tick before every part of it is done; a camera's part in its frames is
        # waited for before the next frames, so publishing them overlaps the ticks between
        assert done["arm"] == k and (done["src"] == k) == (k % 5 == 0)
    assert w.wait_frames_taken() == [] and {p.name: p.done_tick for p in w.participants()}["cam"] == 10
    src = next(p for p in w.participants() if p.name == "src")
    assert src.source == "expert" and src.done_step == 2 and src.acted_step == 2
    w.close()  # every tick each one was given is on the queue before its "gone"
    seen = [e for e in _drain(out, {"arm", "cam", "src"}) if e[0] == "tick"]
    assert [e[2] for e in seen if e[1] == "arm"] == list(range(11))
    assert [e[2] for e in seen if e[1] == "cam"] == [0, 5, 10]
    assert [(e[2], e[3]) for e in seen if e[1] == "src"] == [(0, 0), (5, 1), (10, 2)]


def test_a_participant_that_dies_is_named_at_once_and_the_others_go_on(world, wait_for):
    link, w, procs = world
    out = CTX.Queue()
    _start(procs, link, "arm", SERVO, out)
    victim = _start(procs, link, "victim", CONTROL, out, behaviour="hang")
    assert w.wait_for(["arm", "victim"], timeout=30) == []
    for k in range(3):
        w.publish(_tick(k))
        assert w.wait_done() == []
    w.publish(_tick(5))  # the victim hangs in this step; then it is killed
    assert wait_for(lambda: {p.name: p.waiting for p in w.participants()}["victim"] == 2, 30)
    os.kill(victim.pid, signal.SIGKILL)
    t0 = time.monotonic()
    stalls = w.wait_done()
    assert time.monotonic() - t0 < 1.4  # named before the stall timeout: a dead process needs no waiting
    assert [(s.name, s.dead, s.tick.index) for s in stalls] == [("victim", True, 5)]
    assert "victim" in str(stalls[0]) and "died at sim time 0.050 s" in str(stalls[0])
    w.publish(_tick(6))
    assert w.wait_done() == []  # the world goes on without it


def test_a_participant_that_stops_answering_is_named_after_the_stall_timeout_with_what_it_waited_for(world):
    link, w, procs = world
    out = CTX.Queue()
    stuck = _start(procs, link, "recorder", CONTROL, out, behaviour="hang")
    assert w.wait_for(["recorder"], timeout=30) == []
    w.publish(_tick(5))
    t0 = time.monotonic()
    stalls = w.wait_done()
    waited = time.monotonic() - t0
    assert 1.4 <= waited < 5.0  # stall_timeout 1.5 s
    assert len(stalls) == 1 and stalls[0].name == "recorder" and not stalls[0].dead and stalls[0].pid == stuck.pid
    assert "stopped answering" in str(stalls[0]) and "its observation" in str(stalls[0])
    w.publish(_tick(10))
    assert w.wait_done() == []  # given up on: the episode ends, the world does not hang


def test_a_source_says_whether_it_acted_and_a_watcher_waits_for_its_decision(world):
    link, w, procs = world
    out = CTX.Queue()
    _start(procs, link, "teleop", CONTROL, out, behaviour="act", source="teleop")
    _start(procs, link, "quiet", CONTROL, out, behaviour="skip", source="policy")
    watcher = LockstepParticipant(link, "arm", SERVO)
    try:
        assert w.wait_for(["teleop", "quiet", "arm"], timeout=30) == []
        w.publish(_tick(5))
        tick = watcher.next_tick()
        assert tick is not None and tick.control_step == 1
        assert watcher.wait_source("teleop", 1) is True
        assert watcher.wait_source("policy", 1) is False
        assert watcher.wait_source("expert", 1) is None  # no such participant: nothing to wait for
        watcher.done(tick)
        assert w.wait_done() == []
    finally:
        watcher.close()


def test_an_observer_is_waited_for_at_the_start_only_and_its_death_stops_nothing(world):
    link, w, procs = world
    out = CTX.Queue()
    assert registered(link) == set() and registered(f"none{uuid.uuid4().hex[:8]}") == set()
    _start(procs, link, "arm", SERVO, out)
    assert w.wait_for(["arm"], timeout=30) == []  # (a spawned process takes its time on a loaded machine)
    # the first tick would wait for the observer (not started yet: any timeout shows it missing)
    assert w.wait_for(["arm", "log"], timeout=0.2) == ["log"]
    assert registered(link) == {"arm"}  # what an observer looks at before it registers itself
    log = _start(procs, link, "log", OBSERVER, out)
    assert w.wait_for(["arm", "log"], timeout=30) == [] and registered(link) == {"arm", "log"}
    for k in range(6):  # servo ticks and a control step: never the observer's
        w.publish(_tick(k))
        assert w.wait_done() == []
    os.kill(log.pid, signal.SIGKILL)
    log.join(5)
    w.publish(_tick(6))
    assert w.wait_done() == []  # nothing owed, so nothing named
    assert registered(link) == {"arm"}  # a dead one is not listed
    w.close()
    seen = [e for e in _drain(out, {"arm"}) if e[0] == "tick"]
    assert {e[1] for e in seen} == {"arm"} and len(seen) == 7


def test_names_are_unique_and_a_closed_world_ends_every_wait(world):
    link, w, _ = world
    p = LockstepParticipant(link, "arm", SERVO)
    with pytest.raises(LockstepError, match="already registered"):
        LockstepParticipant(link, "arm", SERVO)
    w.close()
    assert p.next_tick() is None and not p.world_alive() and registered(link) == set()
    p.close()
    with pytest.raises(LockstepError, match="no lockstep world"):
        LockstepParticipant(f"none{uuid.uuid4().hex[:8]}", "x", SERVO, attach_timeout=0.2)
    assert not lockstep_path(link).exists()


def _blocked(thread) -> bool:
    """The thread sleeps in a system call (its wait's select), as the kernel reports it."""
    with open(f"/proc/self/task/{thread.native_id}/syscall") as f:
        return f.read().split()[0] not in ("running", "-1")


def test_an_interrupt_ends_a_wait_at_once_so_a_shutdown_joins_its_thread(world, monkeypatch, wait_for):
    """A node's shutdown sets its stop and interrupts: the thread waiting for a tick that never comes returns then,
    not at its next look at the clock-free facts (made an hour here: only the wake can end the wait)."""
    import threading

    import transports.sim_lockstep as lockstep

    link, _w, _ = world
    monkeypatch.setattr(lockstep, "WAKE_POLL", 3600.0)
    p = LockstepParticipant(link, "arm", SERVO)
    stop = threading.Event()
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(p.next_tick(stop)), daemon=True)
    waiter.start()
    assert wait_for(lambda: _blocked(waiter))  # asleep in its wait for the world's next tick
    stop.set()
    waiter.join(0.5)  # (a wait that saw the stop by itself would end within milliseconds)
    assert waiter.is_alive()  # the stop alone is seen only at the next look
    p.interrupt()
    waiter.join(30.0)
    assert not waiter.is_alive() and got == [None]
    p.close()
    p.interrupt()  # closed: nothing to wake, no error


# ----------------------------------------------------------------------------------------- the world's clock
def _clock(rtf: float = 0.0, wall=time.monotonic) -> WorldClock:
    # imported here: the participants' spawned processes import this module, and the model is not theirs to load
    from libero_workcell.task import TaskSpec
    from sim_cell.world import SimWorld
    from sim_cell.world_clock import ClockPlan, WorldClock

    world = SimWorld(TaskSpec.from_seed(0), render=True, camera_hz=20.0, auto_render=False)
    return WorldClock(world, ClockPlan.of(100.0, 20.0), real_time_factor=rtf, wall=wall)


def test_the_clock_is_the_tick_count_in_integer_nanoseconds_and_episodes_start_on_control_steps():
    clock = _clock()
    announced, published = [], []
    for _ in range(12):
        tick = clock.advance()
        announced.append(tick)
        published.append(clock.render(tick))
    assert [t.time_ns for t in announced] == [k * 10_000_000 for k in range(12)]
    assert [t.control_step for t in announced] == [0, None, None, None, None, 1, None, None, None, None, 2, None]
    # frames are due at the episode's first tick and every camera period after: announced (their stamp) before
    # they are rendered, then published again naming the cameras that rendered
    assert [t.frame_time_ns == (t.time_ns,) * 2 for t in announced] == [k % 5 == 0 for k in range(12)]
    assert all(t.rendered == 0 for t in announced)
    assert [t.rendered for t in published] == [0b11 if k % 5 == 0 else 0 for k in range(12)]
    assert published[10].frames == (3, 3) and announced[10].frames == (3, 3)  # three renders: ticks 0, 5, 10
    clock.reset()
    first = clock.advance()
    assert first.index == 15 and first.control_step == 3 and first.episode == 2  # the next control step
    assert np.isclose(clock.world.sim_time, 0.0)  # a new episode's first tick: no physics yet
    assert clock.render(first).rendered == 0b11  # and its first frames


def test_real_time_factor_only_caps_the_speed():
    now = [100.0]
    slept: list[float] = []

    class Stop:
        def wait(self, s: float) -> None:
            slept.append(s)
            now[0] += s

    clock = _clock(rtf=0.5, wall=lambda: now[0])
    for _ in range(10):
        clock.advance()
        clock.pace(Stop())
    # 10 ms of sim time take 20 ms of wall time at 0.5: paced by sleeping, nothing else changes
    assert sum(slept) == pytest.approx(9 * 0.02, rel=1e-6)
    fast = _clock(rtf=0.0, wall=lambda: now[0])
    before = len(slept)
    for _ in range(10):
        fast.advance()
        fast.pace(Stop())
    assert len(slept) == before
    # an episode that is over has nothing to compute: its clock runs no faster than real time, even at 0 or 5
    for rtf in (0.0, 5.0):
        paused = _clock(rtf=rtf, wall=lambda: now[0])
        paused.advance()
        paused.world.abort("test: the episode is over")
        slept.clear()
        for _ in range(11):
            paused.advance()
            paused.pace(Stop())
        assert sum(slept) == pytest.approx(10 * 0.01, rel=1e-6), rtf
        paused.reset()  # a new episode: back to the asked pace
        slept.clear()
        for _ in range(11):
            paused.advance()
            paused.pace(Stop())
        assert sum(slept) == pytest.approx(10 * 0.01 / rtf, rel=1e-6) if rtf else not slept
