"""Subtasks from gripper events: each grasp (the command closing) and the release that ends it (the command
opening), and which workpiece was carried.

The workpiece is the one the scene saw between the fingers, where the recording has the scene; otherwise the
task's workpiece whose width is nearest the gap the closed fingers left (the coordinate times the stroke of the
workcell's gripper, gripper.registry's default model): the workcell's workpieces differ in width by 5 mm or more
within every combination. A grasp whose fingers closed on nothing carried nothing and is not a subtask.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from gripper.registry import default_model
from libero_workcell.task import WORKPIECE_CATALOG
from preferences.trajectory import Trajectory

EMPTY_COORD: Final = 0.95  # closed this far, the fingers hold nothing (the widest workpiece leaves ~0.48)
SETTLE_STEPS: Final = 6  # control steps the fingers take to close on a part
REST_SPEED: Final = 0.015  # m/s: slower, the arm is waiting (a subtask starts when it sets off)


@dataclass(frozen=True)
class Subtask:
    start: int  # step the arm set off for the workpiece (after the previous release, or its last rest)
    grasp: int  # step the gripper command closed
    release: int | None  # step it opened again (None: still carrying at the end)
    workpiece: int | None  # index into the task's workpieces (None: not identified)


def edges(closed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps where a boolean signal turns on, and where it turns off (a signal on at step 0 turns on there)."""
    c = np.asarray(closed, bool).astype(np.int8)
    d = np.diff(np.concatenate([[0], c]))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def grasp_width(traj: Trajectory, grasp: int, end: int) -> float | None:
    """The gap between the closed fingers (m), or None when they closed on nothing."""
    lo = min(grasp + SETTLE_STEPS, end - 1)
    if lo < grasp or end <= grasp:
        return None
    coord = float(np.median(traj.gripper_coord[lo:end]))
    return None if coord >= EMPTY_COORD else (1.0 - coord) * default_model().stroke


def identify(traj: Trajectory, grasp: int, end: int) -> tuple[bool, int | None]:
    """(something was carried, which of the task's workpieces)."""
    if traj.scene_held is not None:
        held = traj.scene_held[grasp:end].sum(axis=0)
        return (bool(held.max() > 0), int(np.argmax(held)) if held.max() > 0 else None)
    width = grasp_width(traj, grasp, end)
    if width is None:
        return False, None
    widths = np.array([WORKPIECE_CATALOG[w].size[0] for w in traj.task.workpieces])
    return True, int(np.argmin(np.abs(widths - width)))


def subtasks(traj: Trajectory) -> list[Subtask]:
    """The episode's pick-and-place subtasks, in order."""
    ons, offs = edges(traj.grip_command > 0.0)
    speed = np.linalg.norm(traj.velocity(), axis=1)
    out: list[Subtask] = []
    previous = 0
    for g in ons:
        later = offs[offs > g]
        r = int(later[0]) if later.size else None
        carried, which = identify(traj, int(g), r if r is not None else traj.steps)
        if carried:
            resting = np.flatnonzero(speed[previous:g] < REST_SPEED)
            start = previous + int(resting[-1]) + 1 if resting.size else previous
            out.append(Subtask(min(start, int(g)), int(g), r, which))
        previous = r if r is not None else traj.steps
    return out
