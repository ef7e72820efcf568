"""Task spec / workpiece catalog and the success metrics, on hand-made poses (no MuJoCo)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from libero_workcell import layout
from libero_workcell.task import COMBINATIONS, PERMUTATIONS, WORKPIECE_CATALOG, TaskSpec
from sim_cell import metrics
from sim_cell.metrics import PieceState

# ---------------------------------------------------------------- catalog / spec


def test_catalog_is_industrial_and_graspable() -> None:
    assert len(WORKPIECE_CATALOG) >= 6
    assert len(COMBINATIONS) >= 4
    assert len(PERMUTATIONS) == 6
    rgbs = set()
    for wp in WORKPIECE_CATALOG.values():
        assert wp.shape in ("box", "cylinder")
        assert 0.025 <= wp.size[0] <= 0.050, wp.name  # grasp width (fingers close along x)
        assert 0.025 <= wp.size[2] <= 0.07, wp.name
        assert max(wp.size[:2]) <= min(layout.SLOT_SIZE) - 0.02, wp.name  # fits a slot with room
        assert 0.040 <= wp.mass <= 0.150, wp.name
        rgbs.add(wp.rgba)
    assert len(rgbs) == len(WORKPIECE_CATALOG)  # distinct colours
    for combo in COMBINATIONS:
        assert len(set(combo)) == 3 and all(c in WORKPIECE_CATALOG for c in combo)


def test_from_seed_is_deterministic_and_covers_the_catalog() -> None:
    assert TaskSpec.from_seed(7) == TaskSpec.from_seed(7)
    specs = [TaskSpec.from_seed(s) for s in range(60)]
    assert {s.combination for s in specs} == set(range(len(COMBINATIONS)))
    assert {s.slot_permutation for s in specs} == set(PERMUTATIONS)
    spec = TaskSpec.from_seed(3, belt_speed=0.05, combination=2, slot_permutation=(2, 0, 1), arrival_interval=8.0)
    assert spec.workpieces == COMBINATIONS[2] and spec.slot_permutation == (2, 0, 1)
    assert spec.belt_speed == 0.05 and spec.arrival_interval == 8.0 and spec.seed == 3 and spec.level == 1


def test_targets_arrivals_and_horizon() -> None:
    spec = TaskSpec(("gear_blank", "valve_block", "pipe_fitting"), (2, 0, 1), first_arrival=3.0, arrival_interval=9.0)
    # slot 0 gets workpiece 2, slot 1 workpiece 0, slot 2 workpiece 1.
    assert spec.target_slots == (1, 2, 0)
    assert spec.arrival_times == (3.0, 12.0, 21.0)
    # available once the belt (0.03 m/s) carried them 0.10 m from the belt start into the arm's reach
    travel = (layout.REACH_X_MIN - layout.BELT_X_START) / 0.03
    assert travel == pytest.approx(10 / 3)
    assert spec.availability_times == pytest.approx((6 + 1 / 3, 15 + 1 / 3, 24 + 1 / 3))
    # K_roll = t_start + T_event + T_complete + t_b, from the first availability
    assert spec.horizon == pytest.approx(3.0 + travel + 2 * 9.0 + spec.t_complete + spec.t_buffer)
    faster = spec.replace(belt_speed=0.05)
    assert faster.horizon == pytest.approx(3.0 + 2.0 + 2 * 9.0 + spec.t_complete + spec.t_buffer)
    text = spec.language_instruction
    order = text[text.index("left to right") :]
    assert order.index("brass pipe fitting") < order.index("red gear blank") < order.index("blue valve block")
    assert spec.prompt == text
    pref = spec.replace(preference="place gently")
    assert pref.prompt.endswith("Preference: place gently.") and pref.language_instruction == text


def test_json_round_trip() -> None:
    spec = TaskSpec.from_seed(11, belt_speed=0.05, preference="fast")
    d = json.loads(json.dumps(spec.to_dict()))
    assert TaskSpec.from_dict(d) == spec
    assert TaskSpec.from_json(spec.to_json()) == spec
    assert d["horizon"] == spec.horizon and d["language_instruction"] == spec.language_instruction


@pytest.mark.parametrize(
    "kwargs",
    [
        {"workpieces": ("nope", "valve_block", "pipe_fitting")},
        {"slot_permutation": (0, 0, 1)},
        {"belt_speed": -0.1},
        {"arrival_interval": 0.0},
        {"level": 2},
    ],
)
def test_invalid_specs_are_rejected(kwargs: dict) -> None:
    base = {"workpieces": ("gear_blank", "valve_block", "pipe_fitting"), "slot_permutation": (0, 1, 2)}
    with pytest.raises(ValueError):
        TaskSpec(**{**base, **kwargs})


# ---------------------------------------------------------------- metrics

CENTERS = layout.slot_centers()
HALF = 0.03  # max half extent of the hand-made pieces


def resting(slot: int, target: int | None, dx: float = 0.0, dy: float = 0.0, **kw) -> PieceState:
    pos = CENTERS[slot] + [dx, dy, HALF - 0.005]  # centre ~ floor + half height
    return PieceState(pos=np.array(pos), target_slot=target, max_half_extent=HALF, **kw)


def test_in_slot_predicate() -> None:
    assert metrics.in_slot(resting(1, 1), 1)
    assert metrics.placed(resting(1, 1))
    assert metrics.slot_index_at(CENTERS[2]) == 2
    assert metrics.slot_index_at(CENTERS[0] + [0.0, 0.2, 0.0]) is None
    # Near the slot border but inside.
    assert metrics.placed(resting(0, 0, dx=0.045, dy=-0.055))
    # Outside the slot region (over the divider / past the wall).
    assert not metrics.placed(resting(0, 0, dx=0.055))
    assert not metrics.placed(resting(0, 0, dy=0.065))
    # Wrong slot.
    assert not metrics.placed(resting(2, 0))
    # Held by the gripper, or still moving.
    assert not metrics.placed(resting(1, 1, held=True))
    assert not metrics.placed(resting(1, 1, lin_vel=np.array([0.0, 0.0, -0.3])))
    assert metrics.placed(resting(1, 1, lin_vel=np.array([0.01, 0.0, 0.0])))
    # Hovering above the slot (e.g. carried, or resting on a wall top) is not placed.
    high = PieceState(pos=CENTERS[1] + [0, 0, 0.08], target_slot=1, max_half_extent=HALF)
    assert not metrics.placed(high)
    # No target: never placed.
    assert not metrics.placed(resting(1, None))


def test_evaluate_sr_pcr_t_pcr_s() -> None:
    parked = PieceState(pos=np.array([0.0, 1.5, 4.0]), target_slot=2, max_half_extent=HALF)
    all_placed = [resting(0, 0), resting(1, 1), resting(2, 2)]
    r = metrics.evaluate(all_placed)
    assert r["SR"] == 1.0 and r["success"] and r["PCR_T"] == 1.0 and r["PCR_S"] == 1.0
    assert r["placed"] == [True, True, True] and r["slot_valid"] == [True, True, True]

    two = [resting(0, 0), resting(1, 1), parked]
    r = metrics.evaluate(two)
    assert r["SR"] == 0.0 and r["PCR_T"] == pytest.approx(2 / 3) and r["PCR_S"] == pytest.approx(2 / 3)
    assert r["num_placed"] == 2 and r["num_targets"] == 3

    # Pieces swapped: nothing placed, no valid slot.
    swapped = [resting(1, 0), resting(0, 1), parked]
    r = metrics.evaluate(swapped)
    assert r["PCR_T"] == 0.0 and r["PCR_S"] == 0.0 and r["placed"] == [False, False, False]

    # A wrong piece sharing a slot with the right one spoils that slot but not the transfer.
    crowded = [resting(0, 0, dx=-0.02), resting(0, 1, dx=0.02), parked]
    r = metrics.evaluate(crowded)
    assert r["placed"] == [True, False, False] and r["slot_valid"] == [False, False, False]


def test_pcr_s_baseline_with_preexisting_destination_parts() -> None:
    # Slot 2 holds a valid pre-existing part from the start: the baseline is 1/3.
    pre = resting(2, 2, is_target=False)
    initial = [PieceState(pos=np.array([-0.6, 0.4, 0.06]), target_slot=0, max_half_extent=HALF),
               PieceState(pos=np.array([-0.6, 0.4, 0.06]), target_slot=1, max_half_extent=HALF), pre]
    r0 = metrics.evaluate(initial, initial=initial)
    assert r0["pcr_s_init"] == pytest.approx(1 / 3) and r0["PCR_S"] == pytest.approx(1 / 3)
    assert r0["PCR_T"] == 0.0 and r0["num_targets"] == 2
    final = [resting(0, 0), initial[1], pre]
    r = metrics.evaluate(final, initial=initial)
    assert r["PCR_T"] == 0.5 and r["PCR_S"] == pytest.approx(2 / 3) and r["pcr_s_init"] == pytest.approx(1 / 3)
    assert r["SR"] == 0.0
    # An empty tray at the start: baseline 0.
    assert metrics.evaluate(final)["pcr_s_init"] == 0.0
