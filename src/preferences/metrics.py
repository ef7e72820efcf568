"""The preference metrics: each scores what the robot did, per step, from the trajectory alone.

A metric returns the *satisfaction curve*: its value re-evaluated on the trace up to each step (NaN while
it is undefined: before the first grasp, say), so the curve's last value is the episode's score. Values are
in physical units; ``better`` says which way satisfies the preference more; ``resolution`` is the smallest
difference that means something on this workcell (the floor of a calibrated bin's width, preferences.labels).

Geometry the metrics need and a physical recording has too: the belt top (a grasped part's bottom is there
at the grasp and moves with the TCP afterwards), the belt speed (a part on the belt moves with it), the
slot centres, the workpieces' sizes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from libero_workcell import layout
from libero_workcell.task import WORKPIECE_CATALOG
from preferences.segment import Subtask, subtasks
from preferences.trajectory import Trajectory

LATERAL_SPEED: Final = 0.05  # m/s in xy: faster is a lateral move
MOVING_SPEED: Final = 0.01  # m/s: slower is standing still (not counted in the acceleration)
APPROACH_PATH: Final = 0.04  # m of path relative to the part before the grasp that the approach angle looks at
RELEASE_LOOKAHEAD: Final = 0.1  # s: the release's speed counts as the height it covers in this time
GRASP_SETTLE: Final = 10  # steps after the close command in which the fingers meet the part

Curve = np.ndarray
MetricFn = Callable[[Trajectory, list[Subtask], Mapping[str, Any], Mapping[str, Any]], Curve]


@dataclass(frozen=True)
class MetricDef:
    fn: MetricFn
    unit: str
    better: str  # "lower" / "higher" (a catalogue entry may say otherwise: keep_low vs keep_high)
    resolution: float  # in ``unit``
    binary: bool = False  # 0/1, no calibration (user profiles: the choice is made or not)
    params: tuple[str, ...] = ()  # parameters the metric reads
    what: str = ""


# ---- curve helpers -----------------------------------------------------------------------
def event_mean(steps: int, at: list[int], values: list[float]) -> Curve:
    """Mean of the values whose event has happened by each step; NaN before the first."""
    curve = np.full(steps, np.nan)
    total, n = 0.0, 0
    order = sorted((a, v) for a, v in zip(at, values, strict=True) if np.isfinite(v))
    for i, (a, v) in enumerate(order):
        total, n = total + v, n + 1
        end = order[i + 1][0] if i + 1 < len(order) else steps
        curve[a:end] = total / n
    return curve


def running_mean(x: np.ndarray, mask: np.ndarray) -> Curve:
    count = np.cumsum(mask)
    total = np.cumsum(np.where(mask, x, 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def carried(segs: list[Subtask]) -> list[Subtask]:
    return [s for s in segs if s.release is not None]


# ---- motion ----------------------------------------------------------------------------------
def time_per_subtask(traj: Trajectory, segs: list[Subtask], params, catalogue) -> Curve:
    """s from setting off for a workpiece to releasing it, mean over the subtasks done."""
    done = carried(segs)
    return event_mean(traj.steps, [s.release for s in done], [(s.release - s.start) * traj.dt for s in done])


def tcp_acceleration(traj: Trajectory, segs, params, catalogue) -> Curve:
    """RMS of the TCP's acceleration (m/s^2) over the steps it moves."""
    v = traj.velocity()
    a = np.zeros_like(v)
    a[2:] = np.diff(v[1:], axis=0) * traj.control_hz
    moving = np.linalg.norm(v, axis=1) > MOVING_SPEED
    moving[:2] = False
    return np.sqrt(running_mean(np.sum(a * a, axis=1), moving))


def lateral_height(traj: Trajectory, segs, params, catalogue) -> Curve:
    """Mean TCP height (m) while it moves sideways (xy speed above LATERAL_SPEED)."""
    lateral = np.linalg.norm(traj.velocity()[:, :2], axis=1) > LATERAL_SPEED
    return running_mean(traj.tcp_pos[:, 2], lateral)


def carry_straightness(traj: Trajectory, segs, params, catalogue) -> Curve:
    """Largest sideways deviation (m) of each carry's xy path from the straight line grasp -> release, mean."""
    done = carried(segs)
    values = []
    for s in done:
        xy = traj.tcp_pos[s.grasp : s.release + 1, :2]
        chord = xy[-1] - xy[0]
        length = float(np.linalg.norm(chord))
        rel = xy - xy[0]
        if length < 1e-6:
            values.append(float(np.max(np.linalg.norm(rel, axis=1))))
            continue
        t = np.clip(rel @ chord / length**2, 0.0, 1.0)
        values.append(float(np.max(np.linalg.norm(rel - t[:, None] * chord, axis=1))))
    return event_mean(traj.steps, [s.release for s in done], values)


def clearance(traj: Trajectory, segs, params, catalogue) -> Curve:
    """Smallest distance (m) of the TCP from the named region so far (negative inside it)."""
    region = catalogue["regions"][params["region"]]
    if region.get("shape") != "cylinder":
        raise ValueError(f"region {params['region']!r}: only vertical cylinders are measured, got {region}")
    d = np.linalg.norm(traj.tcp_pos[:, :2] - np.asarray(region["center"], float), axis=1) - float(region["radius"])
    return np.minimum.accumulate(d)


def carry_rotation(traj: Trajectory, segs, params, catalogue) -> Curve:
    """Largest turn (rad) of the TCP away from its orientation at the grasp during each carry, mean."""
    done = carried(segs)
    R = traj.rotations()
    values = []
    for s in done:
        rel = R[s.grasp].inv() * R[s.grasp : s.release + 1]
        values.append(float(np.max(rel.magnitude())))
    return event_mean(traj.steps, [s.release for s in done], values)


# ---- skill -----------------------------------------------------------------------------------
def approach_angle(traj: Trajectory, segs: list[Subtask], params, catalogue) -> Curve:
    """Angle (deg) from straight down of the TCP's path relative to the part over its last APPROACH_PATH before
    each grasp (the part moves with the belt), mean."""
    belt = np.array([traj.task.belt_speed, 0.0, 0.0])
    rel = traj.tcp_pos - np.arange(traj.steps)[:, None] * traj.dt * belt
    at, values = [], []
    for s in segs:
        k, path = s.grasp, 0.0
        while k > s.start and path < APPROACH_PATH:
            path += float(np.linalg.norm(rel[k] - rel[k - 1]))
            k -= 1
        d = rel[s.grasp] - rel[k]
        norm = float(np.linalg.norm(d))
        if norm < 0.5 * APPROACH_PATH:
            continue  # it barely moved: no approach to judge
        at.append(s.grasp)
        values.append(float(np.degrees(np.arccos(np.clip(-d[2] / norm, -1.0, 1.0)))))
    return event_mean(traj.steps, at, values)


def release_drop(traj: Trajectory, segs, params, catalogue) -> Curve:
    """How hard each part is let go (m): its bottom's height above the tray floor at the release, plus the
    TCP's speed at the release times RELEASE_LOOKAHEAD; mean."""
    done = carried(segs)
    speed = np.linalg.norm(traj.velocity(), axis=1)
    values = []
    for s in done:
        bottom = layout.BELT_TOP_Z + traj.tcp_pos[s.release, 2] - traj.tcp_pos[s.grasp, 2]
        values.append(max(0.0, bottom - layout.TRAY_FLOOR_Z) + float(speed[s.release]) * RELEASE_LOOKAHEAD)
    return event_mean(traj.steps, [s.release for s in done], values)


def grasp_offset(traj: Trajectory, segs: list[Subtask], params, catalogue) -> Curve:
    """Distance (m) between where the fingers closed on each part (the lowest TCP while closing) and the named
    part of it (a fraction of its height above the belt top), mean."""
    fraction = float(catalogue["parts"][params["part"]]["height_fraction"])
    at, values = [], []
    for s in segs:
        if s.workpiece is None:
            continue
        end = min(s.grasp + GRASP_SETTLE, s.release if s.release is not None else traj.steps)
        z = float(np.min(traj.tcp_pos[s.grasp : max(end, s.grasp + 1), 2]))
        height = WORKPIECE_CATALOG[traj.task.workpieces[s.workpiece]].size[2]
        at.append(s.grasp)
        values.append(abs(z - (layout.BELT_TOP_Z + fraction * height)))
    return event_mean(traj.steps, at, values)


# ---- user profile ------------------------------------------------------------------------------
def first_pick(traj: Trajectory, segs: list[Subtask], params, catalogue) -> Curve:
    """1 from the first grasp on when the first workpiece carried is the named one, 0 when it is another."""
    curve = np.full(traj.steps, np.nan)
    if segs:
        first = segs[0]
        name = traj.task.workpieces[first.workpiece] if first.workpiece is not None else None
        curve[first.grasp :] = 1.0 if name == params["workpiece"] else 0.0
    return curve


def placement_slot(traj: Trajectory, segs: list[Subtask], params, catalogue) -> Curve:
    """1 from the release on when the named workpiece was let go over the named slot, 0 when elsewhere."""
    curve = np.full(traj.steps, np.nan)
    want = int(catalogue["slots"][params["slot"]])
    for s in carried(segs):
        if s.workpiece is not None and traj.task.workpieces[s.workpiece] == params["workpiece"]:
            curve[s.release :] = 1.0 if layout.slot_index_at(traj.tcp_pos[s.release]) == want else 0.0
    return curve


METRICS: Final[dict[str, MetricDef]] = {
    "time_per_subtask": MetricDef(time_per_subtask, "s", "lower", 0.5, what="time per subtask"),
    "tcp_acceleration": MetricDef(tcp_acceleration, "m/s^2", "lower", 0.05, what="TCP acceleration (RMS)"),
    "lateral_height": MetricDef(lateral_height, "m", "lower", 0.01, what="height during lateral moves"),
    "carry_straightness": MetricDef(carry_straightness, "m", "lower", 0.005, what="carry's deviation from straight"),
    "clearance": MetricDef(clearance, "m", "higher", 0.01, params=("region",), what="clearance from the region"),
    "carry_rotation": MetricDef(carry_rotation, "rad", "lower", 0.03, what="rotation while carrying"),
    "approach_angle": MetricDef(approach_angle, "deg", "lower", 3.0, what="approach angle from vertical"),
    "release_drop": MetricDef(release_drop, "m", "lower", 0.003, what="release height and speed"),
    "grasp_offset": MetricDef(grasp_offset, "m", "lower", 0.002, params=("part",), what="offset at the grasp"),
    "first_pick": MetricDef(first_pick, "", "higher", 1.0, True, ("workpiece",), "the named workpiece first"),
    "placement_slot": MetricDef(placement_slot, "", "higher", 1.0, True, ("workpiece", "slot"),
                                "the named workpiece in the named slot"),
}


def satisfaction_curve(traj: Trajectory, metric: str, params: Mapping[str, Any], catalogue: Mapping[str, Any],
                       segs: list[Subtask] | None = None) -> Curve:  # fmt: skip
    """The metric's per-step curve on ``traj`` (``catalogue``: its regions, parts and slots)."""
    return METRICS[metric].fn(traj, subtasks(traj) if segs is None else segs, params, catalogue)
