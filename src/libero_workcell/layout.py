"""Workcell layout: where the belt, the tray and the home pose are (base frame, metres).

One home for the geometry the sim world builds, the scripted expert aims at
and the safety workspace is checked against. On the physical workcell these
are measured once at installation and set in the arm config.
"""

from __future__ import annotations

from typing import Final

import numpy as np

ROBOT: Final = "AUBO-i5H"  # the workcell's arm: the ``robot`` attribute of its demos (LIBERO's env_args too)

# Conveyor: belt runs along +x at y = BELT_Y; workpieces enter at BELT_X_START.
BELT_Y: Final = 0.40
BELT_X_MIN: Final = -0.70
BELT_X_MAX: Final = 0.70
BELT_WIDTH: Final = 0.16
BELT_TOP_Z: Final = 0.04
BELT_X_START: Final = -0.45  # arriving workpieces appear here, upstream of the arm's reach (REACH_X_MIN)

# Level-1 tray: NUM_SLOTS slots in a row along +x (left to right as seen
# from the external camera), centred at TRAY_CENTER.
TRAY_CENTER: Final = np.array([0.40, -0.30, 0.0])
NUM_SLOTS: Final = 3
SLOT_PITCH: Final = 0.12  # m between slot centres along x
SLOT_SIZE: Final = np.array([0.10, 0.12])  # inner x, y extent of one slot
TRAY_WALL_HEIGHT: Final = 0.03
TRAY_FLOOR_Z: Final = 0.005

# Home: TCP above the workspace, gripper pointing straight down.
HOME_TCP_POS: Final = np.array([0.35, 0.05, 0.30])
# Tool z axis points down (-z base); tool x along base +x.
HOME_TCP_ROTMAT: Final = np.array([[1.0, 0.0, 0.0], [0.0, -1.0, 0.0], [0.0, 0.0, -1.0]])

# Safety workspace box for the TCP goal (min, max per axis).
REACH_X_MIN: Final = -0.35  # the arm's reach along the belt starts here: the workspace box's upstream face
WORKSPACE_MIN: Final = np.array([REACH_X_MIN, -0.55, 0.015])
WORKSPACE_MAX: Final = np.array([0.75, 0.60, 0.65])


def slot_centers() -> np.ndarray:
    """(NUM_SLOTS, 3) slot centres on the tray floor, left to right."""
    offsets = (np.arange(NUM_SLOTS) - (NUM_SLOTS - 1) / 2) * SLOT_PITCH
    centers = np.tile(TRAY_CENTER, (NUM_SLOTS, 1)).astype(float)
    centers[:, 0] += offsets
    centers[:, 2] = TRAY_FLOOR_Z
    return centers


def slot_index_at(
    pos: np.ndarray | list[float] | tuple[float, ...],
    xy_margin: float = 0.0,
    centers: np.ndarray | None = None,
    slot_size: np.ndarray = SLOT_SIZE,
) -> int | None:
    """Index of the slot whose xy region (shrunk by ``xy_margin``) contains ``pos``, or None."""
    centers = slot_centers() if centers is None else np.asarray(centers, float)
    p = np.asarray(pos, float)
    half = np.asarray(slot_size, float) / 2.0 - xy_margin
    hits = np.flatnonzero(np.all(np.abs(centers[:, :2] - p[:2]) <= half, axis=1))
    return int(hits[0]) if hits.size else None
