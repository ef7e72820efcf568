"""The simulated world as the clock: servo tick after servo tick, each one waited for, paced or not.

:class:`WorldClock` drives a :class:`~sim_cell.world.SimWorld` one servo period at a time: the physics
steps of the period (the arm's target for it was sent at the previous tick), the frames due, then the tick
published to the participants (:mod:`transports.sim_lockstep`) and their parts waited for. The sim clock is the
tick count times the servo period in integer nanoseconds, monotonic across episodes (ROS stamps and
``/clock``); every episode starts on a control step. ``real_time_factor`` only caps the speed: the wall clock
decides when a tick may start, never what happens in it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from libero_workcell.contract import CAMERA_NAMES
from sim_cell.frame_renderer import FrameRenderer
from sim_cell.scene import TIMESTEP
from sim_cell.world import SimWorld
from transports.sim_lockstep import LockstepWorld, Stall, Tick

MAX_LAG = 0.25  # s behind the pace before it re-anchors (the world was slower than asked for a while)
PAUSED_RTF = 1.0  # the fastest a paused world's clock runs


def period_ns(hz: float) -> int:
    """A rate's period in whole nanoseconds (the clock never accumulates rounding)."""
    if not hz > 0:
        raise ValueError(f"rate must be positive, got {hz}")
    return round(1e9 / hz)


@dataclass(frozen=True)
class ClockPlan:
    """The periods of the simulated graph, in ns and in each other."""

    servo_ns: int
    control_ns: int
    physics_per_servo: int
    servo_per_control: int

    @classmethod
    def of(cls, servo_hz: float, control_hz: float) -> ClockPlan:
        servo_ns, control_ns = period_ns(servo_hz), period_ns(control_hz)
        physics = servo_ns / (TIMESTEP * 1e9)
        if control_ns % servo_ns or abs(physics - round(physics)) > 1e-9:
            raise ValueError(f"servo_hz {servo_hz:g} must divide control_hz {control_hz:g} periods and be a whole "
                             f"number of physics steps ({TIMESTEP * 1e3:g} ms)")  # fmt: skip
        return cls(servo_ns, control_ns, round(physics), control_ns // servo_ns)


class WorldClock:
    """Advance ``world`` tick by tick; with ``lockstep``, each tick waits for its participants."""

    def __init__(self, world: SimWorld, plan: ClockPlan, lockstep: LockstepWorld | None = None,
                 real_time_factor: float = 1.0, wall: Callable[[], float] = time.monotonic,
                 render_thread: bool = False) -> None:  # fmt: skip
        if world.auto_render:
            raise ValueError("a WorldClock renders the frames itself: build the SimWorld with auto_render=False")
        self.world = world
        self.plan = plan
        self.lockstep = lockstep
        self._wall = wall
        self.rtf = max(0.0, float(real_time_factor))
        self.index = -1  # the last tick published
        self.episode_tick = 0  # the first tick of the current episode
        self.pause_at_done = True
        self.overruns = 0  # times the world fell MAX_LAG behind its pace
        self._frame_ns = [0] * len(CAMERA_NAMES)
        self._due = False
        self._stalls: list[Stall] = []
        # lockstep: frames rendered on a thread of their own while the world steps on, announced when done
        self._renderer: FrameRenderer | None = None
        if render_thread and lockstep is not None and world.render_enabled:
            self._renderer = FrameRenderer(world, on_done=lockstep.wake)
        self._rendering: Tick | None = None  # the tick whose frames are being rendered
        self._anchor: tuple[float, int] | None = None  # (wall, tick) the pace is measured from
        self._paced_at = self.rtf  # the pace the anchor belongs to
        self._new_episode = True

    # ---- episodes
    def reset(self, spec: object | None = None) -> None:
        """A new episode, starting on the next control step (the clock jumps at most one control period)."""
        self._finish_frames()
        self.world.reset(spec)  # type: ignore[arg-type]
        self._new_episode = True
        self._anchor = None

    @property
    def time_ns(self) -> int:
        return max(self.index, 0) * self.plan.servo_ns

    @property
    def paused(self) -> bool:
        return self.world.done and self.pause_at_done

    # ---- ticks
    def advance(self) -> Tick:
        """Step the physics one servo period (not on an episode's first tick, nor when paused) and return the
        tick that follows, not yet published. Frames due at it are announced (their stamps) but rendered by
        :meth:`render`, after the tick is out: the nodes that need only the state get to work meanwhile."""
        if self._new_episode:
            spc = self.plan.servo_per_control
            self.index = (self.index // spc + 1) * spc  # the episode starts on a control step
            self.episode_tick = self.index
            self._new_episode = False
        else:
            self.index += 1
            if not self.paused:
                self.world.step(self.plan.physics_per_servo)
        self._due = self.world.frames_due() and not self.paused
        counts = self.world.frame_counts
        if self._due:
            counts = tuple(n + 1 for n in counts)
            self._frame_ns = [self.time_ns] * len(CAMERA_NAMES)
        step = self.index // self.plan.servo_per_control if self.index % self.plan.servo_per_control == 0 else None
        return Tick(self.index, self.time_ns, self.world.episode, step, counts, tuple(self._frame_ns), 0,
                    self.paused)  # fmt: skip

    def render(self, tick: Tick, stop: object | None = None) -> Tick:
        """Render the frames ``tick`` announced (once the cameras took the last ones: their slot in the link is
        overwritten); the tick again, now naming the cameras that rendered."""
        if not self._due:
            return tick
        self._due = False
        self._finish_frames()
        if self.lockstep is not None:
            self._stalls += self.lockstep.wait_frames_taken(stop)
        rendered = replace(tick, rendered=(1 << len(CAMERA_NAMES)) - 1)
        if self._renderer is None:
            self.world.render_due()
            return replace(rendered, frames=self.world.frame_counts)
        job = self.world.frame_job()
        self._rendering = replace(rendered, frames=job.counts)
        self._renderer.submit(job)
        return tick  # announced when done (poll)

    def poll(self) -> None:
        """Announce frames a thread finished rendering (the cameras take them, whatever tick it is now)."""
        if self._rendering is not None and self._renderer is not None and not self._renderer.busy:
            if self._renderer.error is not None:
                raise RuntimeError(f"rendering failed: {self._renderer.error!r}") from self._renderer.error
            assert self.lockstep is not None
            done, self._rendering = self._rendering, None
            self.lockstep.frames_ready(done)

    def _finish_frames(self) -> None:
        """Wait for frames still being rendered, and announce them."""
        if self._renderer is not None and self._rendering is not None:
            self._renderer.wait_idle()
            self.poll()

    def close(self) -> None:
        self._finish_frames()
        if self._renderer is not None:
            self._renderer.close()

    def publish(self, tick: Tick) -> None:
        if self.lockstep is not None:
            self.lockstep.publish(tick)

    def wait(self, stop: object | None = None) -> list[Stall]:
        """Wait for the participants' parts in the last tick published (nothing without lockstep); those that
        died or stopped answering since the last call."""
        stalls, self._stalls = self._stalls, []
        if self.lockstep is None:
            return stalls
        stalls += self.lockstep.wait_done(stop, self.poll)
        self.poll()
        return stalls

    @property
    def effective_rtf(self) -> float:
        """The pace of the next tick: ``real_time_factor``, but no faster than real time while paused (an
        episode that is over has nothing to compute: at 0 its clock would spin a core for nothing)."""
        return PAUSED_RTF if self.paused and (self.rtf <= 0 or self.rtf > PAUSED_RTF) else self.rtf

    def pace(self, stop: object | None = None) -> None:
        """Hold the next tick back until its wall time at :attr:`effective_rtf` (0: no wait)."""
        rtf = self.effective_rtf
        if rtf != self._paced_at:  # a new pace starts from here
            self._paced_at, self._anchor = rtf, None
        if rtf <= 0:
            return
        now = self._wall()
        if self._anchor is None:  # the next tick is due now; each later one a period (over rtf) after it
            self._anchor = (now, self.index + 1)
            return
        anchor_wall, anchor_tick = self._anchor
        due = anchor_wall + (self.index + 1 - anchor_tick) * self.plan.servo_ns * 1e-9 / rtf
        lag = now - due
        if lag > MAX_LAG:
            self.overruns += 1
            self._anchor = (now, self.index + 1)
        elif lag < 0:
            wait = getattr(stop, "wait", None)
            if wait is not None:
                wait(-lag)
            else:
                time.sleep(-lag)

    def set_rtf(self, rtf: float) -> None:
        self.rtf = max(0.0, float(rtf))
        self._anchor = None
