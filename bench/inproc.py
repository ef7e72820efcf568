"""In-process measurements: a RateLoop, SimWorld stepping with cameras, the watchdog on sim time.

No ROS here: these are the exact figures of the building blocks, to compare
with what the same blocks do inside the running graph.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
from dataclasses import fields
from typing import Any

import numpy as np

from bench.common import percentiles


# --------------------------------------------------------------------------
# 1a: a 20 Hz RateLoop
# --------------------------------------------------------------------------
class RateLoopProbe:
    """A :class:`libero_workcell.rate.RateLoop` with an empty body on its own thread."""

    def __init__(self, hz: float) -> None:
        from libero_workcell.rate import RateLoop

        self.loop = RateLoop(hz, history=1 << 16)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"bench-rate-{hz:g}", daemon=True)

    def _run(self) -> None:
        while self.loop.sleep(self._stop):
            pass

    def start(self) -> RateLoopProbe:
        self._thread.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(timeout=2.0)
        stats = self.loop.period_error_stats()
        errors = np.abs(np.asarray(self.loop.periods) - self.loop.period) * 1e3
        return {**percentiles(errors), "rate_loop_stats": stats, "overruns": self.loop.overruns}


def rate_loop(hz: float, seconds: float) -> dict[str, Any]:
    probe = RateLoopProbe(hz).start()
    time.sleep(seconds)
    return probe.stop()


# --------------------------------------------------------------------------
# 2a: SimWorld real-time factor with both cameras rendering
# --------------------------------------------------------------------------
def sim_rtf(seconds: float, camera_hz: float, render: bool = True, steps_per_call: int = 10) -> dict[str, Any]:
    """Sim seconds per wall second of ``SimWorld.step`` (as the free-running world node calls it)."""
    from libero_workcell.task import TaskSpec
    from sim_cell.world import SimWorld
    from transports.sim_link import SimLink

    t_build = time.perf_counter()
    world = SimWorld(TaskSpec.from_seed(0), link=SimLink.in_memory(), render=render, camera_hz=camera_hz)
    build_s = time.perf_counter() - t_build
    try:
        world.step(50)  # warm-up (first renders allocate)
        frames0 = list(world._frame_count)
        c0 = time.process_time()  # all threads of this process (Mesa's render threads too)
        t0, s0 = time.perf_counter(), world.sim_time
        marks = [(t0, s0)]
        while (now := time.perf_counter()) - t0 < seconds:
            world.step(steps_per_call)
            if now - marks[-1][0] >= 0.5:
                marks.append((now, world.sim_time))
        t1, s1 = time.perf_counter(), world.sim_time
        cpu = time.process_time() - c0
        marks.append((t1, s1))
        frames = [b - a for a, b in zip(frames0, world._frame_count, strict=True)]
    finally:
        world.close()
    windows = [(sb - sa) / (tb - ta) for (ta, sa), (tb, sb) in itertools.pairwise(marks) if tb - ta > 0.2]
    sim_s = s1 - s0
    return {
        "rtf": sim_s / (t1 - t0),
        "rtf_windows": percentiles(windows, (10, 50, 90)),
        "sim_seconds": sim_s,
        "cpu_cores": cpu / (t1 - t0),
        "sim_s_per_cpu_s": sim_s / cpu if cpu > 0 else math.nan,
        "wall_seconds": t1 - t0,
        "frames_per_sim_second": [f / sim_s for f in frames] if sim_s > 0 else [],
        "render": render,
        "camera_hz": camera_hz,
        "build_seconds": build_s,
    }


# --------------------------------------------------------------------------
# 4b: the watchdog, in process, on sim time
# --------------------------------------------------------------------------
def stop_time(times: np.ndarray, pos: np.ndarray, t_from: float, speed_thr: float, window: float,
              hold_for: float) -> tuple[float, np.ndarray]:
    """When the TCP stopped: the start of the first ``window``-s interval ending after ``t_from`` over which
    the mean TCP speed is below ``speed_thr`` and stays so for ``hold_for`` s (NaN if never).
    Also returns the speed series (mean speed over the ``window`` s before each sample)."""
    k = np.searchsorted(times, times - window, side="right") - 1
    valid = k >= 0
    speed = np.full(times.shape, np.nan)
    kk = k[valid]
    dt = times[valid] - times[kk]
    with np.errstate(divide="ignore", invalid="ignore"):
        speed[valid] = np.linalg.norm(pos[valid] - pos[kk], axis=1) / dt
    for i in np.flatnonzero(times >= t_from):
        if not speed[i] < speed_thr:
            continue
        later = (times >= times[i]) & (times <= times[i] + hold_for)
        if times[-1] >= times[i] + hold_for and np.all(speed[later] < speed_thr):
            return float(times[i]) - window, speed  # the start of the first quiet window
    return math.nan, speed


def watchdog_sim_time(arm_params: dict[str, Any], stream_steps: int = 10, after: float = 0.4,
                      magnitude: float = 0.2, speed_fraction: float = 0.05) -> dict[str, Any]:
    """Stream ``stream_steps`` actions at the control rate, stop, and time the hold, on sim time.

    Same pieces as :mod:`sim_cell.episode` (SimWorld + ArmDriver over a SimLink,
    driver clock = sim time). Per direction (+-x, +-y, +-z): the sim time from the
    last accepted action to the servo tick where ``watchdog_holds`` increments,
    and to the start of the first 10 ms over which the TCP speed is below ``speed_fraction`` of the
    commanded stream speed and stays so for 50 ms.
    """
    from aubo_bridge.config import ArmConfig
    from libero_workcell.contract import ACTION_DIM, ACTION_POS_SCALE, GRIPPER_OPEN, SOURCE_POLICY
    from libero_workcell.task import TaskSpec
    from sim_cell.episode import make_sim_rig

    known = {f.name for f in fields(ArmConfig)}
    cfg = ArmConfig.from_mapping({k: v for k, v in arm_params.items() if k in known})
    rig = make_sim_rig(TaskSpec.from_seed(0), cfg, active_source=SOURCE_POLICY)
    world, driver = rig.world, rig.driver
    speed_thr = speed_fraction * magnitude * ACTION_POS_SCALE * cfg.control_hz
    servo_per_control, physics_per_servo = rig.servo_per_control, rig.physics_per_servo
    times: list[float] = []
    positions: list[np.ndarray] = []

    def tick() -> None:
        driver.tick()
        for _ in range(physics_per_servo):
            world.step(1)
            times.append(world.sim_time)
            positions.append(world.tcp_pos)

    for _ in range(20):  # settle
        tick()
    reps = []
    for axis in range(3):
        for sign in (1.0, -1.0):
            action = np.zeros(ACTION_DIM)
            action[axis] = sign * magnitude
            action[-1] = GRIPPER_OPEN
            holds0 = driver.counters["watchdog_holds"]
            rejected = 0
            t_last = math.nan
            for _ in range(stream_steps):
                res = driver.submit_action(action, SOURCE_POLICY)
                if res.accepted:
                    t_last = world.sim_time
                else:
                    rejected += 1
                for _ in range(servo_per_control):
                    tick()
            fired_at = math.nan
            n_ticks = round(after * cfg.servo_hz)
            for _ in range(n_ticks):
                t_tick = world.sim_time  # the driver's clock during this tick
                tick()
                if math.isnan(fired_at) and driver.counters["watchdog_holds"] > holds0:
                    fired_at = t_tick
            t = np.asarray(times)
            p = np.asarray(positions)
            t_stop, speed = stop_time(t, p, t_last, speed_thr, window=0.01, hold_for=0.05)
            before = (t > t_last - 0.1) & (t <= t_last)
            reps.append({
                "axis": "xyz"[axis], "sign": sign, "rejected": rejected,
                "watchdog_delay_ms": (fired_at - t_last) * 1e3,
                "tcp_stop_delay_ms": (t_stop - t_last) * 1e3,
                "holds": driver.counters["watchdog_holds"] - holds0,
                "speed_before_stop_mps": float(np.nanmedian(speed[before])) if before.any() else math.nan,
            })
            times.clear()
            positions.clear()
    world.close()
    wd = [r["watchdog_delay_ms"] for r in reps]
    st = [r["tcp_stop_delay_ms"] for r in reps]
    return {
        "watchdog_delay_ms": percentiles(wd),
        "tcp_stop_delay_ms": percentiles(st),
        "watchdog_timeout_s": cfg.watchdog_timeout,
        "control_period_s": cfg.control_period,
        "servo_period_s": cfg.servo_period,
        "speed_threshold_mps": speed_thr,
        "reps": reps,
    }
