"""Task specification and workpiece catalog of the simulated D2S unloading task.

One :class:`TaskSpec` fully determines an episode of the LIBERO-Industry
physical D2S study in simulation: which three workpieces arrive on the
conveyor (in which order), which tray slot each belongs to (the slot
permutation: the left-to-right object order in the tray), the conveyor speed,
the arrival schedule and the seed of every random draw the world makes
(lateral jitter of arrivals). ``TaskSpec.from_seed`` picks a catalog
combination and a permutation deterministically from a seed.

The rollout horizon follows LIBERO-Industry's rollout budget::

    K_roll = t_start + T_event + T_complete + t_b

counted from availability: a workpiece j can be completed from its availability
time a_j, when the belt has carried it from the belt start into the arm's reach
(the workspace box's upstream face, layout.REACH_X_MIN): a_j = arrival_j +
(REACH_X_MIN - BELT_X_START) / belt speed, several seconds later at 0.03 m/s
than at 0.05 m/s. t_start = a_1, T_event = a_n - a_1 (the span of the
availability events), T_complete = a fixed completion allowance after the last
availability and t_b = a terminal buffer; the allowances are the same for every
policy (docs/evaluation.md).

Pure Python + numpy: no MuJoCo, no ROS.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

import numpy as np

from libero_workcell import layout
from libero_workcell.contract import format_prompt


@dataclass(frozen=True)
class WorkpieceType:
    """One kind of industrial part. Sizes in metres, mass in kg, rgba in [0, 1].

    ``size`` is (x, y, z) for a box (full extents) and (diameter, diameter,
    height) for an upright cylinder. The gripper closes along the belt
    direction (x) at the home orientation, so ``size[0]`` is the grasp width.
    """

    name: str
    shape: Literal["box", "cylinder"]
    size: tuple[float, float, float]
    mass: float
    rgba: tuple[float, float, float, float]
    description: str  # words used in the language instruction

    @property
    def half_extents(self) -> np.ndarray:
        return np.asarray(self.size, float) / 2.0

    @property
    def max_half_extent(self) -> float:
        """Largest half extent (any resting orientation: upright, lying, tilted)."""
        sx, sy, sz = self.size
        if self.shape == "cylinder":
            return float(np.hypot(sx / 2, sz / 2))  # corner of the side silhouette
        return float(np.linalg.norm([sx, sy, sz]) / 2)


# Industrial-part-like workpieces: 25-50 mm grasp width, 40-150 g, distinct colours.
WORKPIECE_CATALOG: Final[dict[str, WorkpieceType]] = {
    w.name: w
    for w in (
        WorkpieceType("gear_blank", "cylinder", (0.048, 0.048, 0.026), 0.140, (0.85, 0.20, 0.15, 1), "red gear blank"),
        WorkpieceType("valve_block", "box", (0.036, 0.036, 0.045), 0.130, (0.10, 0.35, 0.85, 1), "blue valve block"),
        WorkpieceType("pipe_fitting", "cylinder", (0.028, 0.028, 0.060), 0.070, (0.90, 0.75, 0.15, 1),
                      "brass pipe fitting"),
        WorkpieceType("sensor_housing", "box", (0.030, 0.060, 0.030), 0.060, (0.15, 0.70, 0.25, 1),
                      "green sensor housing"),
        WorkpieceType("motor_cap", "cylinder", (0.040, 0.040, 0.035), 0.100, (0.55, 0.25, 0.75, 1), "purple motor cap"),
        WorkpieceType("bracket_block", "box", (0.045, 0.070, 0.028), 0.120, (0.95, 0.50, 0.10, 1),
                      "orange bracket block"),
        WorkpieceType("bearing_ring", "cylinder", (0.044, 0.044, 0.030), 0.110, (0.15, 0.75, 0.80, 1),
                      "cyan bearing ring"),
        WorkpieceType("terminal_block", "box", (0.026, 0.050, 0.040), 0.045, (0.92, 0.92, 0.90, 1),
                      "white terminal block"),
    )
}

# The physical study uses four three-workpiece combinations.
COMBINATIONS: Final[tuple[tuple[str, str, str], ...]] = (
    ("gear_blank", "valve_block", "pipe_fitting"),
    ("sensor_housing", "motor_cap", "bracket_block"),
    ("bearing_ring", "terminal_block", "valve_block"),
    ("pipe_fitting", "bracket_block", "motor_cap"),
)

# All orderings of three slots; the study trains on four and holds out two per combination.
PERMUTATIONS: Final[tuple[tuple[int, int, int], ...]] = tuple(itertools.permutations(range(3)))  # type: ignore[assignment]

SPEEDS: Final = (0.03, 0.05)  # m/s, the study's belt speeds (collection and evaluation)
LEVEL: Final = 1  # the tray (Level 1)


def held_out(combination: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The two slot permutations of ``combination`` reserved for held-out evaluation (never collected): those at
    indices c and c + 3 of :data:`PERMUTATIONS`, this project's fixed choice (recorder.collection_plan)."""
    n = len(PERMUTATIONS)
    return PERMUTATIONS[combination % n], PERMUTATIONS[(combination + n // 2) % n]


DEFAULT_BELT_SPEED: Final = 0.03  # m/s (study speeds: 0.03, 0.05)
DEFAULT_ARRIVAL_INTERVAL: Final = 12.0  # s between arrivals: one scripted pick-and-place (~11 s, LIBERO response)
DEFAULT_FIRST_ARRIVAL: Final = 2.0  # s, t_start
DEFAULT_T_COMPLETE: Final = 15.0  # s, completion allowance after the last availability
DEFAULT_T_BUFFER: Final = 2.0  # s, terminal buffer t_b


def _words(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


@dataclass(frozen=True)
class TaskSpec:
    """One D2S unloading episode.

    ``workpieces[j]`` is the type of the j-th arriving workpiece.
    ``slot_permutation[k]`` is the index j of the workpiece that belongs in
    slot k (slots numbered left to right as seen from the external camera),
    i.e. the left-to-right object order in the tray.
    """

    workpieces: tuple[str, ...]
    slot_permutation: tuple[int, ...]
    belt_speed: float = DEFAULT_BELT_SPEED
    arrival_interval: float = DEFAULT_ARRIVAL_INTERVAL
    first_arrival: float = DEFAULT_FIRST_ARRIVAL
    seed: int = 0
    level: int = 1
    preference: str | None = None  # the prompt's preference language (LIBERO-PeRM)
    preference_specs: tuple[str, ...] = ()  # the catalogue specs it came from (src/preferences/catalogue.py)
    # "ordered": the instruction says which slot each workpiece goes in (slot_permutation); "free": it does not,
    # any workpiece resting alone in any slot is placed (the choice a user-profile preference makes)
    slot_rule: Literal["ordered", "free"] = "ordered"
    combination: int | None = None  # catalog index, when the workpieces come from COMBINATIONS
    t_complete: float = DEFAULT_T_COMPLETE
    t_buffer: float = DEFAULT_T_BUFFER
    lateral_jitter: float = 0.015  # m, max |y offset| of an arrival from the belt centre line

    def __post_init__(self) -> None:
        object.__setattr__(self, "workpieces", tuple(str(w) for w in self.workpieces))
        object.__setattr__(self, "slot_permutation", tuple(int(i) for i in self.slot_permutation))
        object.__setattr__(self, "preference_specs", tuple(str(p) for p in self.preference_specs))
        if self.slot_rule not in ("ordered", "free"):
            raise ValueError(f"slot_rule must be 'ordered' or 'free', got {self.slot_rule!r}")
        n = len(self.workpieces)
        if n == 0 or n > layout.NUM_SLOTS:
            raise ValueError(f"a task needs 1..{layout.NUM_SLOTS} workpieces, got {n}")
        unknown = [w for w in self.workpieces if w not in WORKPIECE_CATALOG]
        if unknown:
            raise ValueError(f"unknown workpiece types {unknown}; known: {sorted(WORKPIECE_CATALOG)}")
        if sorted(self.slot_permutation) != list(range(n)):
            raise ValueError(f"slot_permutation must be a permutation of 0..{n - 1}, got {self.slot_permutation}")
        if not (0.0 <= self.belt_speed <= 0.5):
            raise ValueError(f"belt_speed {self.belt_speed} m/s out of range [0, 0.5]")
        if self.arrival_interval <= 0 or self.first_arrival < 0:
            raise ValueError("arrival_interval must be > 0 and first_arrival >= 0")
        if self.level != 1:
            raise ValueError(f"only the Level-1 tray is simulated, got level {self.level}")
        if self.t_complete < 0 or self.t_buffer < 0 or self.lateral_jitter < 0:
            raise ValueError("t_complete, t_buffer and lateral_jitter must be >= 0")

    # ---- construction -----------------------------------------------------
    @classmethod
    def from_seed(
        cls,
        seed: int,
        belt_speed: float = DEFAULT_BELT_SPEED,
        combination: int | None = None,
        slot_permutation: tuple[int, ...] | None = None,
        **kwargs: Any,
    ) -> TaskSpec:
        """A catalog combination and a slot permutation picked deterministically from ``seed``.

        ``combination`` (index into COMBINATIONS) or ``slot_permutation``
        override the seeded choice; other keyword arguments go to the
        dataclass (arrival_interval, first_arrival, preference, ...).
        """
        rng = np.random.default_rng(int(seed))
        combo = int(rng.integers(len(COMBINATIONS)))
        perm = PERMUTATIONS[int(rng.integers(len(PERMUTATIONS)))]
        if combination is not None and combination >= 0:
            if combination >= len(COMBINATIONS):
                raise ValueError(f"combination {combination} out of range 0..{len(COMBINATIONS) - 1}")
            combo = int(combination)
        if slot_permutation:
            perm = tuple(int(i) for i in slot_permutation)
        return cls(
            workpieces=COMBINATIONS[combo],
            slot_permutation=perm,
            belt_speed=float(belt_speed),
            seed=int(seed),
            combination=combo,
            **kwargs,
        )

    def replace(self, **changes: Any) -> TaskSpec:
        return replace(self, **changes)

    # ---- derived quantities -------------------------------------------------
    @property
    def num_workpieces(self) -> int:
        return len(self.workpieces)

    @property
    def workpiece_types(self) -> tuple[WorkpieceType, ...]:
        return tuple(WORKPIECE_CATALOG[w] for w in self.workpieces)

    @property
    def target_slots(self) -> tuple[int, ...]:
        """target_slots[j] = the slot index workpiece j belongs in."""
        return tuple(self.slot_permutation.index(j) for j in range(self.num_workpieces))

    @property
    def arrival_times(self) -> tuple[float, ...]:
        """Sim time (s) at which each workpiece appears at the belt start."""
        return tuple(self.first_arrival + j * self.arrival_interval for j in range(self.num_workpieces))

    @property
    def availability_times(self) -> tuple[float, ...]:
        """Sim time (s) from which each workpiece can be completed: its arrival, plus the belt's travel from the
        belt start into the arm's reach (a_j of LIBERO-Industry's budget)."""
        travel = max(0.0, layout.REACH_X_MIN - layout.BELT_X_START) / self.belt_speed if self.belt_speed > 0 else 0.0
        return tuple(t + travel for t in self.arrival_times)

    @property
    def t_start(self) -> float:
        """The first availability (t_start of the budget)."""
        return self.availability_times[0]

    @property
    def t_event(self) -> float:
        """The span of the availability events."""
        a = self.availability_times
        return a[-1] - a[0]

    @property
    def horizon(self) -> float:
        """Rollout budget in seconds: t_start + T_event + T_complete + t_b, from the availability times."""
        return self.t_start + self.t_event + self.t_complete + self.t_buffer

    @property
    def language_instruction(self) -> str:
        """LIBERO-style task sentence, derived from the spec."""
        if self.slot_rule == "free":
            return f"pick up the {_words(self.arriving_words)} from the moving conveyor and place them in the tray"
        return (
            f"pick up the {_words(self.arriving_words)} from the moving conveyor and place them in the tray "
            f"from left to right: {_words(self.tray_words)}"
        )

    @property
    def arriving_words(self) -> list[str]:
        """The workpieces in arrival order, as the instruction names them."""
        return [WORKPIECE_CATALOG[w].description for w in self.workpieces]

    @property
    def tray_words(self) -> list[str]:
        """The workpieces in their tray slots, left to right (as the external camera sees the tray)."""
        return [WORKPIECE_CATALOG[self.workpieces[j]].description for j in self.slot_permutation]

    @property
    def prompt(self) -> str:
        """The policy prompt: the instruction, with the preference if one is set."""
        return format_prompt(self.language_instruction, self.preference)

    # ---- serialisation -----------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["workpieces"] = list(self.workpieces)
        d["slot_permutation"] = list(self.slot_permutation)
        d["preference_specs"] = list(self.preference_specs)
        d["language_instruction"] = self.language_instruction
        d["horizon"] = self.horizon
        d["target_slots"] = list(self.target_slots)
        d["arrival_times"] = list(self.arrival_times)
        d["availability_times"] = list(self.availability_times)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TaskSpec:
        derived = {"language_instruction", "horizon", "target_slots", "arrival_times", "availability_times"}
        names = set(cls.__dataclass_fields__)
        unknown = set(d) - names - derived
        if unknown:
            raise ValueError(f"unknown TaskSpec fields {sorted(unknown)}")
        return cls(**{k: v for k, v in d.items() if k in names})

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TaskSpec:
        return cls.from_dict(json.loads(text))
