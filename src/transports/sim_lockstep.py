"""Lockstep between the simulated world and the nodes that close the loop: the world is the clock.

The world advances in servo ticks. At each tick it publishes the tick here and waits until every
participant that has a part in it has said it is done: the arm driver at every tick (its servo target),
a camera node at the ticks its camera rendered (the frame published), the action sources and the recorder
at every control step (the action for that step's observation, the recorded step). Load therefore slows a
simulated episode down and never changes it.

Data still flows where it always does (targets and frames over the shared-memory link, observations and
actions over ROS); only the barrier lives here, beside the link, so the 100 Hz servo handshake never pays a
DDS round trip. It is two things in ``/dev/shm``:

- a block of aligned int64 words (a header the world writes under a sequence counter, and one slot per
  participant that only that participant writes after registering under a file lock);
- a directory of FIFOs that wake the sleeper: one the world reads, one per participant. A wake is one byte;
  what happened is always read from the block, so a lost or merged wake costs nothing.

Nothing here reads the wall clock except the supervision: a participant that died is named at once, one that
stopped answering after ``stall_timeout`` wall seconds, and a participant whose world is gone stops waiting.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import stat
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import numpy as np

from libero_workcell.contract import CAMERA_NAMES
from libero_workcell.processes import pid_alive
from transports.sim_link import ATTACH_TIMEOUT, SHM_DIR, LinkError, link_path

MAGIC: Final = 0x4C4F434B53544550  # "LOCKSTEP"
VERSION: Final = 1
MAX_PARTICIPANTS: Final = 16
NAME_WORDS: Final = 4  # 32 bytes of ASCII per name

# Kinds of participant: which ticks it has a part in (a bit mask).
SERVO: Final = 1  # every tick (the arm driver)
CAMERA: Final = 2  # the ticks its cameras rendered
CONTROL: Final = 4  # every control step (sources, recorders)
# No part in any tick: registering says it listens (the session log, once it follows the others' topics), so the
# first tick waits for it; it is never waited for after that, and its death stops nothing.
OBSERVER: Final = 0
KIND_NAMES: Final = {OBSERVER: "observer", SERVO: "servo", CAMERA: "camera", CONTROL: "control"}

# What a participant is waiting for, for the supervisor's message when it stops answering.
WAITING: Final = {0: "", 1: "the world's next tick", 2: "its observation (state and frames)",
                  3: "the active source's action", 4: "the policy server's reply", 5: "its own work"}  # fmt: skip

# Header words
_H_MAGIC, _H_VERSION, _H_WORLD_PID, _H_SEQ, _H_TICK, _H_TIME_NS, _H_EPISODE, _H_STEP = range(8)
_H_PAUSED, _H_STATE, _H_SERVO_NS, _H_CONTROL_NS, _H_RENDERED, _H_EPISODE_TICK = range(8, 14)
_H_REGISTRY = 14  # bumped (under the file lock) whenever a slot is taken or freed: cached member lists renew
_H_FRAMES = 16  # per camera: frame counter of the newest frame
_H_FRAME_NS = _H_FRAMES + len(CAMERA_NAMES)  # per camera: its sim time, ns
_H_FRAMES_TICK = _H_FRAME_NS + len(CAMERA_NAMES)  # the tick whose frames are the newest rendered (-1: none yet)
_H_FRAMES_MASK = _H_FRAMES_TICK + 1  # bit i: camera i rendered at that tick
_H_FRAMES_TIME = _H_FRAMES_MASK + 1  # that tick's sim time, ns (the frames' stamp)
HEADER_WORDS: Final = 32
# World states
STARTING, RUNNING, CLOSED = 0, 1, 2

# Slot words
_S_STATE, _S_PID, _S_KINDS, _S_CAMERAS, _S_DONE_TICK, _S_DONE_STEP, _S_ACTED_STEP, _S_WAITING = range(8)
_S_NAME = 8
_S_SOURCE = _S_NAME + NAME_WORDS
SLOT_WORDS: Final = 24
FREE, ACTIVE = 0, 1
TOTAL_WORDS: Final = HEADER_WORDS + MAX_PARTICIPANTS * SLOT_WORDS

WAKE_POLL: Final = 0.5  # s: how often a sleeper looks at the clock-free facts (peer alive, stop asked)


class LockstepError(LinkError):
    """The lockstep block is missing, of another version, or its world is gone."""


def lockstep_path(name: str) -> Path:
    return link_path(name).with_suffix(".lockstep")


def fifo_dir(name: str) -> Path:
    return link_path(name).with_suffix(".lockstep.d")


def _encode(text: str) -> np.ndarray:
    raw = text.encode("ascii", "replace")[: NAME_WORDS * 8].ljust(NAME_WORDS * 8, b"\0")
    return np.frombuffer(raw, dtype=np.int64)


def _decode(words: np.ndarray) -> str:
    return np.asarray(words, dtype=np.int64).tobytes().rstrip(b"\0").decode("ascii", "replace")


def _make_fifo(path: Path) -> int:
    """Create (or reuse) a FIFO and open it for reading without blocking: opened read-write, it always has a
    writer (us), so a sleeper never sees end-of-file when a waker goes away."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISFIFO(path.stat().st_mode):
            path.unlink()
    if not path.exists():
        os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def _drain(fd: int) -> None:
    with contextlib.suppress(BlockingIOError):
        while os.read(fd, 4096):
            pass


def _sleep_on(fd: int, timeout: float) -> None:
    """Block until a wake byte arrives on ``fd`` or ``timeout`` s pass; consume what arrived."""
    ready, _, _ = select.select([fd], [], [], timeout)
    if ready:
        _drain(fd)


class _Waker:
    """Write ends of other parties' FIFOs, opened lazily; a wake to a party that is gone is dropped."""

    def __init__(self) -> None:
        self._fds: dict[Path, int] = {}

    def wake(self, path: Path) -> bool:
        fd = self._fds.get(path)
        if fd is None:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:  # no reader (ENXIO) or no FIFO: the party is gone or not there yet
                return False
            self._fds[path] = fd
        try:
            os.write(fd, b"\1")
        except BlockingIOError:  # its pipe is full of unread wakes: it is awake already
            return True
        except OSError as exc:
            self.forget(path)
            if exc.errno not in (errno.EPIPE, errno.EBADF):
                raise
            return False
        return True

    def forget(self, path: Path) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for path in list(self._fds):
            self.forget(path)


@dataclass(frozen=True)
class Tick:
    """One servo tick as the world published it."""

    index: int  # servo ticks since the world started (monotonic across episodes)
    time_ns: int  # the sim clock at this tick, ns (monotonic across episodes: ROS stamps and /clock)
    episode: int
    control_step: int | None  # the control step this tick starts, None between control steps
    frames: tuple[int, ...]  # per camera (CAMERA_NAMES): the newest frame's counter
    frame_time_ns: tuple[int, ...]  # per camera: the newest frame's sim time, ns
    rendered: int  # bit i: camera i rendered at this tick
    paused: bool  # the episode is over and the physics stands still (the clock runs on)
    frames_tick: int = -1  # the tick of the newest rendered frames (a camera's part: read and publish them)
    frames_mask: int = 0  # bit i: camera i rendered then
    frames_time_ns: int = 0  # their sim time (later ticks may have announced newer frames still being rendered)

    @property
    def time(self) -> float:
        return self.time_ns * 1e-9

    def needs(self, kinds: int, cameras: int) -> bool:
        """Whether a participant of ``kinds`` (watching ``cameras``) has a part in this tick."""
        if kinds & SERVO:
            return True
        if kinds & CONTROL and self.control_step is not None:
            return True
        return bool(kinds & CAMERA and self.rendered & cameras)


@dataclass(frozen=True)
class SlotView:
    """A participant as the others see it."""

    index: int
    name: str
    source: str
    pid: int
    kinds: int
    cameras: int
    done_tick: int
    done_step: int
    acted_step: int
    waiting: int


class _FileLock:
    def __init__(self, path: Path) -> None:
        self._path = path

    def __enter__(self) -> None:
        self._f = open(self._path, "r+b")
        fcntl.flock(self._f, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        fcntl.flock(self._f, fcntl.LOCK_UN)
        self._f.close()


class _Block:
    """The mapped block of int64 words."""

    def __init__(self, path: Path, create: bool) -> None:
        self.path = path
        mode = "w+" if create else "r+"
        self.words = np.memmap(path, dtype=np.int64, mode=mode, shape=(TOTAL_WORDS,))
        self.header = self.words[:HEADER_WORDS]
        self.slots = self.words[HEADER_WORDS:].reshape(MAX_PARTICIPANTS, SLOT_WORDS)
        self._members: list[SlotView] = []
        self._registry = -1

    def members(self) -> list[SlotView]:
        """The active participants as they registered (name, source, pid, kinds, cameras), cached until a slot
        is taken or freed; their progress (done_tick ...) is read live with :meth:`word`."""
        registry = int(self.header[_H_REGISTRY])
        if registry != self._registry:
            self._members, self._registry = self.active(), registry
        return self._members

    def word(self, index: int, field: int) -> int:
        return int(self.slots[index, field])

    def bump_registry(self) -> None:
        """A slot was taken or freed (call under the file lock: the increment is not atomic)."""
        self.header[_H_REGISTRY] += 1

    def locked(self) -> Any:
        """The block's file lock (registrations, frees), as a context manager."""
        return _FileLock(self.path)

    def slot_view(self, i: int) -> SlotView:
        s = np.array(self.slots[i])
        return SlotView(i, _decode(s[_S_NAME:_S_NAME + NAME_WORDS]), _decode(s[_S_SOURCE:_S_SOURCE + NAME_WORDS]),
                        int(s[_S_PID]), int(s[_S_KINDS]), int(s[_S_CAMERAS]), int(s[_S_DONE_TICK]),
                        int(s[_S_DONE_STEP]), int(s[_S_ACTED_STEP]), int(s[_S_WAITING]))  # fmt: skip

    def active(self) -> list[SlotView]:
        return [self.slot_view(i) for i in range(MAX_PARTICIPANTS) if int(self.slots[i, _S_STATE]) == ACTIVE]

    def read_tick(self) -> Tick | None:
        """The newest published tick, read consistently (None before the first). The world may be preempted
        mid-write: spin a little, then yield, until it finishes; LockstepError if it died there."""
        h = self.header
        spins = 0
        while True:
            s1 = int(h[_H_SEQ])
            if not s1 & 1:
                v = np.array(h)
                if int(h[_H_SEQ]) == s1:
                    break
            spins += 1
            if spins > 100:
                if not pid_alive(int(h[_H_WORLD_PID])):
                    raise LockstepError(f"the world of {self.path} died while publishing a tick")
                time.sleep(0.0001)
        if int(v[_H_TICK]) < 0:
            return None
        n = len(CAMERA_NAMES)
        step = int(v[_H_STEP])
        return Tick(int(v[_H_TICK]), int(v[_H_TIME_NS]), int(v[_H_EPISODE]), None if step < 0 else step,
                    tuple(int(x) for x in v[_H_FRAMES:_H_FRAMES + n]),
                    tuple(int(x) for x in v[_H_FRAME_NS:_H_FRAME_NS + n]), int(v[_H_RENDERED]),
                    bool(v[_H_PAUSED]), int(v[_H_FRAMES_TICK]), int(v[_H_FRAMES_MASK]),
                    int(v[_H_FRAMES_TIME]))  # fmt: skip


# ----------------------------------------------------------------------------------------------- the world
@dataclass(frozen=True)
class Stall:
    """A participant that did not do its part: dead, or silent for ``stall_timeout``."""

    name: str
    pid: int
    dead: bool
    waiting: str
    tick: Tick

    @property
    def waits_on_others(self) -> bool:
        """It was waiting for another participant (a source's action): a consequence, not the cause."""
        return self.waiting == WAITING[3]

    def __str__(self) -> str:
        what = "died" if self.dead else "stopped answering"
        on = f" (waiting for {self.waiting})" if self.waiting else ""
        return f"node {self.name} (pid {self.pid}) {what} at sim time {self.tick.time:.3f} s{on}"


class LockstepWorld:
    """The world's side: publishes ticks and waits for the participants' parts."""

    def __init__(self, name: str, servo_period_ns: int, control_period_ns: int, stall_timeout: float = 30.0) -> None:
        if control_period_ns % servo_period_ns:
            raise ValueError("the control period must be a whole number of servo periods")
        self.name = name
        self.stall_timeout = float(stall_timeout)
        self._dir = fifo_dir(name)
        self._dir.mkdir(mode=0o700, exist_ok=True)
        self._fd = _make_fifo(self._dir / "world")
        self._block = _Block(lockstep_path(name), create=True)
        h = self._block.header
        h[:] = 0
        self._block.slots[:] = 0
        h[_H_VERSION], h[_H_WORLD_PID] = VERSION, os.getpid()
        h[_H_SERVO_NS], h[_H_CONTROL_NS] = servo_period_ns, control_period_ns
        h[_H_TICK], h[_H_STEP], h[_H_FRAMES_TICK] = -1, -1, -1
        h[_H_MAGIC] = MAGIC  # last: attachers wait for it
        self._waker = _Waker()
        self._self_waker = _Waker()  # for other threads of the world (one waker per thread: its fds are its own)
        self._given_up: set[tuple[int, int]] = set()  # (slot, pid) of participants no longer waited for
        self.tick: Tick | None = None
        self.frames_tick: Tick | None = None  # the last tick that rendered frames
        self._closed = False

    # ---- participants
    def participants(self) -> list[SlotView]:
        """The active participants, their progress read now."""
        return self._block.active()

    def wait_for(self, names: Iterable[str], timeout: float, stop: object | None = None) -> list[str]:
        """Wait (wall clock, before the first tick) until every participant in ``names`` registered; returns
        those still missing after ``timeout`` s (a node that never came up)."""
        wanted = set(names)
        deadline = time.monotonic() + timeout
        while True:
            missing = sorted(wanted - {p.name for p in self.participants()})
            if not missing or time.monotonic() >= deadline or getattr(stop, "is_set", lambda: False)():
                return missing
            _sleep_on(self._fd, min(WAKE_POLL, max(0.0, deadline - time.monotonic())))

    # ---- ticks
    def publish(self, tick: Tick) -> None:
        """Make ``tick`` the current one and wake the participants that have a part in it."""
        h = self._block.header
        n = len(CAMERA_NAMES)
        h[_H_SEQ] += 1
        h[_H_TIME_NS], h[_H_EPISODE] = tick.time_ns, tick.episode
        h[_H_STEP] = -1 if tick.control_step is None else tick.control_step
        h[_H_FRAMES:_H_FRAMES + n] = tick.frames
        h[_H_FRAME_NS:_H_FRAME_NS + n] = tick.frame_time_ns
        h[_H_RENDERED], h[_H_PAUSED], h[_H_STATE] = tick.rendered, int(tick.paused), RUNNING
        if tick.rendered:
            h[_H_FRAMES_TICK], h[_H_FRAMES_MASK], h[_H_FRAMES_TIME] = tick.index, tick.rendered, tick.time_ns
            self.frames_tick = tick
        h[_H_TICK] = tick.index
        h[_H_SEQ] += 1
        self.tick = tick
        for p in self._block.members():
            if tick.needs(p.kinds, p.cameras):
                self._waker.wake(self._dir / f"slot{p.index}")

    def frames_ready(self, frames_tick: Tick) -> None:
        """The frames ``frames_tick`` announced are in the link now (rendered on a thread while the world went
        on): the cameras take them, whatever tick it is now."""
        h = self._block.header
        n = len(CAMERA_NAMES)
        h[_H_SEQ] += 1
        h[_H_FRAMES:_H_FRAMES + n] = frames_tick.frames
        h[_H_FRAMES_TICK], h[_H_FRAMES_MASK] = frames_tick.index, frames_tick.rendered
        h[_H_FRAMES_TIME] = frames_tick.time_ns
        h[_H_SEQ] += 1
        self.frames_tick = frames_tick
        for p in self._block.members():
            if p.kinds & CAMERA and p.cameras & frames_tick.rendered:
                self._waker.wake(self._dir / f"slot{p.index}")

    def wake(self) -> None:
        """Wake the world's wait (from another thread of the world: a renderer that finished)."""
        self._self_waker.wake(self._dir / "world")

    def _owes(self, p: SlotView, tick: Tick) -> bool:
        """Whether ``p`` has yet to do its part in ``tick``. A camera's part (the frames of a tick) is not waited
        for at that tick: only before the next frames are rendered over them (:meth:`wait_frames_taken`), so
        publishing them overlaps the ticks that follow."""
        if (p.index, p.pid) in self._given_up or p.kinds == CAMERA or not tick.needs(p.kinds, p.cameras):
            return False
        return self._block.word(p.index, _S_DONE_TICK) < tick.index

    def _owes_frames(self, p: SlotView, tick: Tick) -> bool:
        if (p.index, p.pid) in self._given_up or not p.kinds & CAMERA or not tick.frames_mask & p.cameras:
            return False
        return self._block.word(p.index, _S_DONE_TICK) < tick.frames_tick

    def wait_done(self, stop: object | None = None, poll: Any = None) -> list[Stall]:
        """Block until every participant has done its part in the current tick (the cameras' part in the
        frames: :meth:`wait_frames_taken`). Returns the ones that died or stayed silent for ``stall_timeout``
        (they are not waited for again), [] when all answered. ``poll()`` runs at every wake (frames that
        became ready are announced from there: a participant of this tick may be waiting for them)."""
        return self._wait(self._owes, self.tick, stop, poll)

    def wait_frames_taken(self, stop: object | None = None) -> list[Stall]:
        """Block until every camera has taken the newest frames (before new ones are rendered over them)."""
        tick = self.frames_tick
        return [] if tick is None else self._wait(self._owes_frames, replace(tick, frames_tick=tick.index,
                                                                             frames_mask=tick.rendered), stop)

    def _wait(self, owes: Any, tick: Tick | None, stop: object | None, poll: Any = None) -> list[Stall]:
        if tick is None:
            return []
        started = time.monotonic()
        check_at = started + WAKE_POLL  # whether the owing are alive: after a first wait, then every WAKE_POLL
        while True:
            if poll is not None:
                poll()
            owing = [p for p in self._block.members() if owes(p, tick)]
            if not owing:
                return []
            if getattr(stop, "is_set", lambda: False)():
                return []
            now = time.monotonic()
            if now >= check_at:
                check_at = now + WAKE_POLL
                dead = [p for p in owing if not pid_alive(p.pid)]
                silent = owing if now - started > self.stall_timeout else []
                if dead or silent:
                    stalls = []
                    for p in dead or silent:
                        self._given_up.add((p.index, p.pid))
                        self._release(p)
                        waiting = WAITING.get(self._block.word(p.index, _S_WAITING), "")
                        stalls.append(Stall(p.name, p.pid, p in dead, waiting, tick))
                    return stalls
            _sleep_on(self._fd, max(0.0, check_at - time.monotonic()))

    def _release(self, p: SlotView) -> None:
        """Free a participant's slot that is gone (a restarted node registers afresh); one given up on keeps
        its slot (it is no longer waited for)."""
        if not pid_alive(p.pid):
            with self._block.locked():
                self._block.slots[p.index, _S_STATE] = FREE
                self._block.bump_registry()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        h = self._block.header
        h[_H_SEQ] += 1
        h[_H_STATE] = CLOSED
        h[_H_SEQ] += 1
        for p in self.participants():  # wake every sleeper: it sees the world closed
            self._waker.wake(self._dir / f"slot{p.index}")
        self._waker.close()
        self._self_waker.close()
        os.close(self._fd)
        self._block.words.flush()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._block.path)
        for child in self._dir.glob("*"):
            with contextlib.suppress(FileNotFoundError):
                child.unlink()
        with contextlib.suppress(OSError):
            self._dir.rmdir()


# ----------------------------------------------------------------------------------------- a participant
class LockstepParticipant:
    """A node's side: take part in the ticks of ``kinds``; say when done."""

    def __init__(self, name: str, participant: str, kinds: int, source: str = "",
                 cameras: Sequence[str] = (), attach_timeout: float = ATTACH_TIMEOUT) -> None:  # fmt: skip
        path = lockstep_path(name)
        deadline = time.monotonic() + attach_timeout
        while True:
            if path.exists() and path.stat().st_size == TOTAL_WORDS * 8:
                block = _Block(path, create=False)
                if int(block.header[_H_MAGIC]) == MAGIC:
                    break
            if time.monotonic() >= deadline:
                raise LockstepError(f"no lockstep world at {path} after {attach_timeout:.1f} s: is sim_world running?")
            time.sleep(0.05)
        if int(block.header[_H_VERSION]) != VERSION:
            raise LockstepError(f"lockstep block {path} is version {int(block.header[_H_VERSION])}, expected {VERSION}")
        self.name = participant
        self.kinds = int(kinds)
        self.cameras = sum(1 << CAMERA_NAMES.index(c) for c in cameras)
        self._block = block
        self._dir = fifo_dir(name)
        self.world_pid = int(block.header[_H_WORLD_PID])
        self.servo_period_ns = int(block.header[_H_SERVO_NS])
        self.control_period_ns = int(block.header[_H_CONTROL_NS])
        self._waker = _Waker()
        self._handled = -1
        self._closed = False
        self.index = self._register(participant, source)
        self._waker.wake(self._dir / "world")

    def _register(self, participant: str, source: str) -> int:
        with self._block.locked():
            for i in range(MAX_PARTICIPANTS):
                s = self._block.slots[i]
                if int(s[_S_STATE]) == ACTIVE and pid_alive(int(s[_S_PID])):
                    if _decode(s[_S_NAME:_S_NAME + NAME_WORDS]) == participant:
                        raise LockstepError(f"a participant named {participant!r} is already registered "
                                            f"(pid {int(s[_S_PID])})")  # fmt: skip
                    continue
                s[:] = 0
                s[_S_PID], s[_S_KINDS], s[_S_CAMERAS] = os.getpid(), self.kinds, self.cameras
                s[_S_DONE_TICK], s[_S_DONE_STEP], s[_S_ACTED_STEP] = -1, -1, -1
                s[_S_NAME:_S_NAME + NAME_WORDS] = _encode(participant)
                s[_S_SOURCE:_S_SOURCE + NAME_WORDS] = _encode(source)
                self._slot = s
                self._fd = _make_fifo(self._dir / f"slot{i}")
                s[_S_STATE] = ACTIVE  # last: the world sees a complete slot
                self._block.bump_registry()
                return i
        raise LockstepError(f"all {MAX_PARTICIPANTS} lockstep slots are taken")

    # ---- the world
    def world_alive(self) -> bool:
        return int(self._block.header[_H_STATE]) != CLOSED and pid_alive(self.world_pid)

    def current(self) -> Tick | None:
        return self._block.read_tick()

    def next_tick(self, stop: object | None = None) -> Tick | None:
        """The next tick this participant has a part in (blocks); None once ``stop`` is set or the world is
        gone. A participant never misses one: the world does not pass a tick before its part is done."""
        self.waiting(1)
        while True:
            try:
                tick = self._block.read_tick()
            except LockstepError:
                return None
            if tick is not None and self.kinds == CAMERA:  # the newest frames, whichever tick it is now
                if tick.frames_tick > self._handled and tick.frames_mask & self.cameras:
                    self._handled = tick.frames_tick
                    self.waiting(5)
                    return replace(tick, index=tick.frames_tick, rendered=tick.frames_mask,
                                   frame_time_ns=(tick.frames_time_ns,) * len(CAMERA_NAMES))  # fmt: skip
            elif tick is not None and tick.index > self._handled and tick.needs(self.kinds, self.cameras):
                self._handled = tick.index
                self.waiting(5)
                return tick
            if getattr(stop, "is_set", lambda: False)() or self._closed:
                return None
            if not self.world_alive():
                return None
            _sleep_on(self._fd, WAKE_POLL)

    def done(self, tick: Tick, acted: bool = False) -> None:
        """This participant's part in ``tick`` is done (``acted``: it published an action for its control step)."""
        s = self._slot
        if tick.control_step is not None:
            if acted:
                s[_S_ACTED_STEP] = tick.control_step
            s[_S_DONE_STEP] = tick.control_step
        s[_S_DONE_TICK] = tick.index
        s[_S_WAITING] = 1
        self._waker.wake(self._dir / "world")
        if tick.control_step is not None:  # whoever waits on a source's decision (arm driver, recorder)
            for p in self._block.members():
                if p.index != self.index and p.kinds & (CONTROL | SERVO):
                    self._waker.wake(self._dir / f"slot{p.index}")

    def waiting(self, code: int) -> None:
        """Say what this participant is waiting for (named by the supervisor should it stop answering)."""
        self._slot[_S_WAITING] = code

    # ---- other participants
    def source_slot(self, source: str) -> SlotView | None:
        """The participant that publishes actions as ``source``, if one takes part."""
        return next((p for p in self._block.members() if p.source == source), None)

    def wait_source(self, source: str, step: int, stop: object | None = None) -> bool | None:
        """Wait until the participant acting as ``source`` is done with control step ``step``: True if it
        published an action for it, False if it did not, None if no such participant (or it went away)."""
        while True:
            p = self.source_slot(source)
            if p is None:
                return None
            if self._block.word(p.index, _S_DONE_STEP) >= step:
                return self._block.word(p.index, _S_ACTED_STEP) == step
            if getattr(stop, "is_set", lambda: False)() or not self.world_alive() or not pid_alive(p.pid):
                return None
            _sleep_on(self._fd, WAKE_POLL)

    def interrupt(self) -> None:
        """Wake this participant's own wait now (after its node set the ``stop`` it waits with): the thread in
        :meth:`next_tick` or :meth:`wait_source` returns at once instead of at its next look (WAKE_POLL), so a
        node's shutdown joins it before it tears down what that thread uses. (Once closed its FIFO is gone: the
        wake is dropped.)"""
        self._waker.wake(self._dir / f"slot{self.index}")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(Exception), self._block.locked():
            self._slot[_S_STATE] = FREE
            self._block.bump_registry()
        self._waker.wake(self._dir / "world")
        self._waker.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._dir / f"slot{self.index}")


def registered(name: str) -> set[str]:
    """The names of the live participants registered now in the lockstep world of link ``name`` (none while it
    has no world): what an observer waits for before it registers itself."""
    path = lockstep_path(name)
    try:
        if path.stat().st_size != TOTAL_WORDS * 8:
            return set()
        block = _Block(path, create=False)
    except (OSError, ValueError):  # not there (yet), or gone between the look and the map
        return set()
    if int(block.header[_H_MAGIC]) != MAGIC or int(block.header[_H_STATE]) == CLOSED:
        return set()
    return {p.name for p in block.active() if pid_alive(p.pid)}


def available(name: str) -> bool:
    """Whether a lockstep world serves the link ``name`` (the sim graph in lockstep)."""
    path = lockstep_path(name)
    return path.exists() and SHM_DIR.exists()
