"""The paper's physical evaluation protocol as a list of trials (seed 002, Appendix D/E).

Four three-workpiece combinations x two held-out slot permutations (never collected for training:
libero_workcell.task.held_out) = 8 object-order configurations; 24 trials per belt speed, so 3 per
configuration, each with its own seed (the arrivals' lateral jitter); 72 planned placements per speed. A
trial's rollout horizon is its task's (libero_workcell.task.TaskSpec.horizon): the belt schedule (first
arrival, one interval per further workpiece) plus the time to complete the last transfer and a buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from libero_workcell.task import COMBINATIONS, SPEEDS, TaskSpec, held_out
from preferences.catalogue import Catalogue

TRIALS_PER_SPEED: Final = 24
SEED_BASE: Final = 1000  # trial seeds: SEED_BASE + index, apart from anything the tests or demos use


@dataclass(frozen=True)
class Trial:
    index: int  # position in the protocol (the results' key)
    combination: int
    slot_permutation: tuple[int, ...]
    belt_speed: float
    seed: int
    preference: str = ""

    @property
    def spec(self) -> TaskSpec:
        spec = TaskSpec.from_seed(
            self.seed, self.belt_speed, combination=self.combination, slot_permutation=self.slot_permutation
        )
        return Catalogue.load().condition(self.preference).apply(spec)  # the preference, checked against the task

    @property
    def configuration(self) -> tuple[int, tuple[int, ...]]:
        return self.combination, self.slot_permutation

    def as_dict(self) -> dict[str, Any]:
        s = self.spec
        return {
            "index": self.index,
            "combination": self.combination,
            "slot_permutation": list(self.slot_permutation),
            "belt_speed": self.belt_speed,
            "seed": self.seed,
            "preference": self.preference,
            "workpieces": list(s.workpieces),
            "language_instruction": s.language_instruction,
            "horizon": s.horizon,
        }


def configurations() -> list[tuple[int, tuple[int, ...]]]:
    """The 8 held-out object-order configurations: (combination, slot permutation)."""
    return [(c, perm) for c in range(len(COMBINATIONS)) for perm in held_out(c)]


def protocol_trials(
    speeds: tuple[float, ...] = SPEEDS, trials_per_speed: int = TRIALS_PER_SPEED, preference: str = ""
) -> list[Trial]:
    """Every trial, configuration by configuration within each speed (an interrupted run has covered the
    configurations evenly)."""
    configs = configurations()
    if trials_per_speed < 1:
        raise ValueError(f"trials_per_speed must be >= 1, got {trials_per_speed}")
    trials = []
    for speed in speeds:
        for k in range(trials_per_speed):
            combination, perm = configs[k % len(configs)]
            index = len(trials)
            trials.append(Trial(index, combination, perm, float(speed), SEED_BASE + index, preference))
    return trials
