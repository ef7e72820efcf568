"""Success predicates and metrics of the D2S unloading task (LIBERO-Industry Sec. 3.5).

Pure functions over workpiece poses and velocities: no MuJoCo, so they are
unit-tested on hand-made poses and the same code scores the sim world and,
given measured poses, a physical trial.

- Placement predicate (Level-1 tray): workpiece j is *in slot k* when its
  centre lies inside slot k's xy region (shrunk by ``xy_margin``), it rests
  low in the tray (centre no higher than the tray floor + its largest half
  extent + ``z_tolerance``: on the floor, not on a wall or on another part),
  it is not held by the gripper and it is nearly at rest
  (speed <= ``max_speed``). It is *placed* when it is in its assigned slot.
- SR: 1 when every target workpiece is placed, else 0.
- PCR_T: share of target transfers completed (placed target workpieces /
  target workpieces).
- PCR_S: share of destination slots holding a valid workpiece: a slot is
  valid when a workpiece assigned to it rests in it and no workpiece assigned
  elsewhere does. ``pcr_s_init`` is PCR_S of the initial state, the baseline
  (non-zero only when the task starts with pre-existing destination parts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np

from libero_workcell import layout

XY_MARGIN: Final = 0.0  # m the centre must lie inside the slot border
Z_TOLERANCE: Final = 0.01  # m above the resting height still counted as resting
MAX_SPEED: Final = 0.05  # m/s: faster is not "at rest"


@dataclass(frozen=True)
class PieceState:
    """What the metrics need to know about one workpiece."""

    pos: np.ndarray  # (3,) centre, m, base frame
    target_slot: int | None  # assigned slot, None = no goal
    max_half_extent: float  # m, see WorkpieceType.max_half_extent
    lin_vel: np.ndarray | None = None  # (3,) m/s; None = at rest
    held: bool = False  # in the gripper's grasp
    is_target: bool = True  # a target workpiece (False: pre-existing destination part)


def slot_index_at(
    pos: Sequence[float] | np.ndarray,
    xy_margin: float = XY_MARGIN,
    centers: np.ndarray | None = None,
    slot_size: np.ndarray = layout.SLOT_SIZE,
) -> int | None:
    """Index of the slot whose xy region contains ``pos`` (centre), or None (libero_workcell.layout's)."""
    return layout.slot_index_at(pos, xy_margin, centers, slot_size)


def resting_in_tray(
    piece: PieceState,
    max_speed: float = MAX_SPEED,
    z_tolerance: float = Z_TOLERANCE,
    floor_z: float = layout.TRAY_FLOOR_Z,
) -> bool:
    """Low in the tray (on its floor), not held and nearly at rest."""
    if piece.held:
        return False
    if piece.lin_vel is not None and float(np.linalg.norm(piece.lin_vel)) > max_speed:
        return False
    z = float(np.asarray(piece.pos, float)[2])
    return floor_z - z_tolerance <= z <= floor_z + piece.max_half_extent + z_tolerance


def in_slot(
    piece: PieceState,
    slot: int,
    xy_margin: float = XY_MARGIN,
    max_speed: float = MAX_SPEED,
    z_tolerance: float = Z_TOLERANCE,
    centers: np.ndarray | None = None,
) -> bool:
    """The placement predicate: ``piece`` rests in slot ``slot``."""
    return slot_index_at(piece.pos, xy_margin, centers) == slot and resting_in_tray(piece, max_speed, z_tolerance)


def placed(piece: PieceState, **kwargs: Any) -> bool:
    """``piece`` rests in its assigned slot."""
    return piece.target_slot is not None and in_slot(piece, piece.target_slot, **kwargs)


def slot_occupants(pieces: Sequence[PieceState], num_slots: int = layout.NUM_SLOTS, **kwargs: Any) -> list[list[int]]:
    """For each slot, the indices of the pieces resting in it."""
    occ: list[list[int]] = [[] for _ in range(num_slots)]
    for i, p in enumerate(pieces):
        k = slot_index_at(p.pos, kwargs.get("xy_margin", XY_MARGIN), kwargs.get("centers"))
        if k is not None and k < num_slots and in_slot(p, k, **kwargs):
            occ[k].append(i)
    return occ


def free_targets(pieces: Sequence[PieceState], num_slots: int = layout.NUM_SLOTS, **kwargs: Any) -> list[PieceState]:
    """A task whose instruction leaves the slots free (TaskSpec.slot_rule "free"): each piece's target is the slot
    it rests in alone, None while it rests in none or shares one (so it is placed exactly then)."""
    occ = slot_occupants(pieces, num_slots, **kwargs)
    alone = {o[0]: k for k, o in enumerate(occ) if len(o) == 1}
    return [replace(p, target_slot=alone.get(i)) for i, p in enumerate(pieces)]


def pcr_s(pieces: Sequence[PieceState], num_slots: int = layout.NUM_SLOTS, **kwargs: Any) -> tuple[float, list[bool]]:
    """(PCR_S, per destination slot validity) over the slots some piece is assigned to."""
    dest = sorted({p.target_slot for p in pieces if p.target_slot is not None})
    if not dest:
        return 0.0, []
    occ = slot_occupants(pieces, num_slots, **kwargs)
    valid = []
    for k in dest:
        targets = [pieces[i].target_slot for i in occ[k]]
        valid.append(bool(targets) and all(t == k for t in targets))
    return float(np.mean(valid)), valid


def evaluate(
    pieces: Sequence[PieceState],
    initial: Sequence[PieceState] | None = None,
    num_slots: int = layout.NUM_SLOTS,
    **kwargs: Any,
) -> dict[str, Any]:
    """SR, PCR_T, PCR_S (and its initial-state baseline) for one state of an episode.

    ``initial`` is the episode's initial state (for ``pcr_s_init``); when it
    is None the baseline is reported as 0.0 (an empty tray).
    """
    is_placed = [placed(p, **kwargs) for p in pieces]
    targets = [i for i, p in enumerate(pieces) if p.is_target]
    n_placed = sum(1 for i in targets if is_placed[i])
    pcr_t = n_placed / len(targets) if targets else 0.0
    success = bool(targets) and n_placed == len(targets)
    pcr_s_value, slot_valid = pcr_s(pieces, num_slots, **kwargs)
    pcr_s_init = pcr_s(initial, num_slots, **kwargs)[0] if initial is not None else 0.0
    return {
        "SR": 1.0 if success else 0.0,
        "success": success,
        "PCR_T": float(pcr_t),
        "PCR_S": float(pcr_s_value),
        "pcr_s_init": float(pcr_s_init),
        "placed": is_placed,
        "slot_valid": slot_valid,
        "num_placed": n_placed,
        "num_targets": len(targets),
    }
