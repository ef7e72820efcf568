"""The scripted expert asked a preference: how each catalogue preference changes the way it works.

No-preference demonstrations are not all alike (LIBERO-PeRM's come from a planner with randomised starts;
operators differ): :func:`no_preference_style` draws, from the seed, the incidental choices an unasked
demonstrator makes (speeds, how high it carries, how steeply it comes down on a part, how far above the
floor it lets go, a turn of the wrist while carrying, where on the part it closes). A preference then sets
the choices it is about and leaves the rest as drawn, so a pair of demos with and without it differs in what
the preference asks and in nothing else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

import numpy as np

from libero_workcell.layout import BELT_Y
from libero_workcell.task import COMBINATIONS, TaskSpec
from preferences.catalogue import Catalogue, Condition, Preference
from sim_cell.expert import ExpertConfig, ScriptedExpert

# The task family of the preference demos: two workpieces of a catalogue combination arriving 8 s apart on a
# 0.03 m/s belt (so the second is there while the first can still wait), the slots left to the robot.
PREFERENCE_BELT_SPEED: Final = 0.03
PREFERENCE_ARRIVAL_INTERVAL: Final = 8.0
PREFERENCE_T_COMPLETE: Final = 25.0  # s after the last arrival (a carry picked downstream, straight_carry, fits)


def preference_task(seed: int) -> TaskSpec:
    """The seed's task of the preference demos (a combination's first two workpieces, free slots)."""
    combo = seed % len(COMBINATIONS)
    return TaskSpec(workpieces=COMBINATIONS[combo][:2], slot_permutation=(0, 1), belt_speed=PREFERENCE_BELT_SPEED,
                    arrival_interval=PREFERENCE_ARRIVAL_INTERVAL, seed=seed, combination=combo,
                    t_complete=PREFERENCE_T_COMPLETE, slot_rule="free")  # fmt: skip


def no_preference_style(seed: int) -> dict[str, Any]:
    """The incidental choices of an unasked demonstrator, drawn from ``seed`` (ExpertConfig fields)."""
    rng = np.random.default_rng([seed, 0x5E1F])
    base = ExpertConfig()
    height = float(rng.uniform(0.20, 0.26))
    return {
        "max_speed": base.max_speed * float(rng.uniform(0.9, 1.1)),
        "carry_speed": base.carry_speed * float(rng.uniform(0.9, 1.1)),
        "hover": float(rng.uniform(0.04, 0.06)),
        "approach_slant": float(rng.choice([-1.0, 1.0]) * rng.uniform(0.6, 1.0)),  # comes down on the part at a slant
        "transfer_height": height,
        "wait_pos": np.array([-0.30, BELT_Y, height]),
        "place_clearance": float(rng.uniform(0.025, 0.045)),  # lets go a few cm above the floor
        "carry_yaw": float(rng.choice([-1.0, 1.0]) * rng.uniform(0.35, 0.7)),  # turns the part while carrying
        "grasp_depth": float(rng.uniform(-0.002, 0.002)),
    }


def honour(style: dict[str, Any], pref: Preference, catalogue: Catalogue) -> dict[str, Any]:
    """``style`` changed to do what ``pref`` asks."""
    s, p = dict(style), pref.params
    match pref.id:
        case "speed_up":
            # The arm's top speed is the action's range (LIBERO's response: ~0.25 m/s), so faster means a shorter
            # way: a firmer gain, a lower carry on a tighter arc round the base, looser tolerances, shorter holds
            s["gain"] = 3.0 * p["factor"]
            s["max_speed"] *= p["factor"]
            s["transfer_height"], s["hover"] = 0.16, 0.03
            s["wait_pos"] = np.array([-0.38, BELT_Y, 0.16])
            s["min_radius"], s["via_radius"], s["arc_step"] = 0.25, 0.36, 0.6
            s["xy_tol"], s["z_tol"] = 0.01, 0.01
            s["grasp_steps"], s["release_steps"] = 4, 4
        case "smooth_motion":  # a softer tracking gain and slower moves: no abrupt starts at each goal
            s["gain"] = 1.5
            s["max_speed"] *= 0.8
            s["carry_speed"] *= 0.8
        case "keep_low" | "keep_high":
            s["transfer_height"] = p["height"]
            s["wait_pos"] = np.array([-0.30, BELT_Y, p["height"]])
        case "straight_carry":
            # No detour around the base, and picked where the straight line to the tray passes clear of it (from
            # upstream it would cross the base axis, the shoulder's singularity)
            s["min_radius"], s["pick_x_min"] = 0.12, -0.05
        case "keep_clear":
            region = catalogue.regions[p["region"]]
            if not np.allclose(region["center"], [0.0, 0.0]):
                raise ValueError(f"keep_clear: the expert detours only around the base axis, not {region}")
            s["min_radius"] = float(region["radius"]) + p["margin"]
            s["via_radius"] = s["min_radius"] + 0.1
        case "no_rotation":
            s["carry_yaw"] = 0.0
        case "vertical_approach":
            s["hover"], s["approach_slant"] = 0.10, 0.0
        case "gentle_release":
            s["place_clearance"] = 0.002
            s["release_z_tol"] = 0.003
        case "grasp_part":
            s["grasp_height_fraction"] = float(catalogue.parts[p["part"]]["height_fraction"])
            s["descend_speed"], s["approach_slant"], s["hover"] = 0.04, 0.0, 0.08  # comes down slowly, stops there
        case "first_workpiece":
            s["first_type"] = p["workpiece"]
        case "slot_for":
            s["slot_for"] = {**s.get("slot_for", {}), p["workpiece"]: int(catalogue.slots[p["slot"]])}
        case _:
            raise ValueError(f"the scripted expert cannot honour {pref.id!r}")
    return s


def preference_expert(seed: int, condition: Condition, catalogue: Catalogue) -> ScriptedExpert:
    """The expert for one demo: the seed's no-preference style, with the condition's preferences honoured."""
    style = no_preference_style(seed)
    for pref in condition.preferences:
        style = honour(style, pref, catalogue)
    return ScriptedExpert(replace(ExpertConfig(), **style))
