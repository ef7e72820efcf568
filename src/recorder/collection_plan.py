"""The physical collection design as a session plan: what the operator sets up next, recorded with each demo.

LIBERO-Industry's physical D2S design (seed 002, Appendix E): four three-workpiece combinations; per
combination four slot permutations for training and two held out for evaluation (never collected); the belt
speeds (0.03, 0.05 m/s) balanced across the training configurations rather than crossed with every factor. The
seed's Table 18 (which two permutations are held out) is not in the text we have, so the held-out pair here is
this project's fixed choice, documented and deterministic: for combination c, the permutations at indices c
and c + 3 of :data:`libero_workcell.task.PERMUTATIONS` (every permutation is held out for some combination;
:func:`libero_workcell.task.held_out`, which evaluation reads too). Within a combination the speeds alternate
over its training permutations, starting at the other speed for odd combinations: of the sixteen training
configurations, each combination has two at each speed.

A session file's demos carry their configuration (``combination``, ``slot_permutation``, ``belt_speed``,
``level``); :meth:`CollectionPlan.next` is the first configuration with fewer than ``per_config`` accepted
demos, in plan order (so collection sweeps the design evenly), and :meth:`CollectionPlan.progress` counts
them. A demo the arm did not perform is not one (:func:`not_counted`): every action refused (the arm disabled,
in fault, another source's), or the arm faulted while it was recorded; it stays in the file, and ``workcell plan
status`` names it with the reason.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from libero_workcell.task import COMBINATIONS, LEVEL, PERMUTATIONS, SPEEDS, TaskSpec, held_out
from recorder.step import ACCEPTED_STEPS, FAULT_DURING, REFUSED_STEPS


@dataclass(frozen=True)
class Configuration:
    combination: int
    slot_permutation: tuple[int, ...]
    belt_speed: float
    level: int = LEVEL

    @property
    def spec(self) -> TaskSpec:
        return TaskSpec.from_seed(0, self.belt_speed, combination=self.combination,
                                  slot_permutation=self.slot_permutation, level=self.level)  # fmt: skip

    def attrs(self) -> dict[str, Any]:
        """What a demo of this configuration records (the recorder's ``task``)."""
        s = self.spec
        return {
            "combination": self.combination, "slot_permutation": list(self.slot_permutation),
            "belt_speed": self.belt_speed, "level": self.level, "workpieces": list(s.workpieces),
            "language_instruction": s.language_instruction, "split": "train", "task_spec": s.to_json(),
        }  # fmt: skip

    def setup(self) -> str:
        """What the operator sets up, in words."""
        s = self.spec
        return (
            f"combination {self.combination}: feed {', '.join(s.arriving_words)} (in that order) at "
            f"{self.belt_speed} m/s; tray left to right: {', '.join(s.tray_words)}"
        )

    @classmethod
    def parse(cls, attrs: Mapping[str, Any]) -> Configuration:
        """The configuration a demo's attributes record; ValueError naming the attribute that records none (a
        demo file comes from elsewhere: ``slot_permutation: [1e999]`` is an answer, not an OverflowError)."""
        missing = [k for k in ("combination", "slot_permutation", "belt_speed") if k not in attrs]
        if missing:
            raise ValueError(f"no {', '.join(missing)}: not a plan demo")
        perm = attrs["slot_permutation"]
        try:
            perm = json.loads(perm) if isinstance(perm, (str, bytes)) else perm
        except ValueError:
            raise ValueError(f"slot_permutation {perm!r:.60} is not JSON") from None
        if isinstance(perm, (str, bytes, Mapping)) or not isinstance(perm, Iterable):
            raise ValueError(f"slot_permutation {perm!r:.60} is not a list of slot indices")
        slots = tuple(_whole(i, f"slot_permutation {perm!r:.60}: element") for i in perm)
        combination, speed = _whole(attrs["combination"], "combination"), _number(attrs["belt_speed"], "belt_speed")
        return cls(combination, slots, speed, _whole(attrs.get("level", LEVEL), "level"))

    @classmethod
    def of(cls, attrs: Mapping[str, Any]) -> Configuration | None:
        """The configuration a demo's attributes record, or None (not a plan demo: :meth:`parse` says why)."""
        try:
            return cls.parse(attrs)
        except ValueError:
            return None


def _number(value: Any, what: str, whole: bool = False) -> float:
    """A finite number an attribute records (``whole``: an integer); ValueError naming ``what`` otherwise."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond any float
        raise ValueError(f"{what} {value!r:.60} is not a number") from None
    if not math.isfinite(x) or (whole and not x.is_integer()):
        raise ValueError(f"{what} {value!r:.60} is not {'an integer' if whole else 'a finite number'}")
    return x


def _whole(value: Any, what: str) -> int:
    return int(_number(value, what, whole=True))


def not_counted(attrs: Mapping[str, Any]) -> str | None:
    """Why a saved demo (its attributes as the session reads them: recorder.session_file.demo_record) does not
    count toward the plan, or None: interrupted, the arm faulted while it was recorded, or the arm accepted none of
    its actions (at least one refused). A demo with no verdict at all (no report came) counts: nothing says the
    arm did not perform it, and the export keeps such steps too."""
    if attrs.get("interrupted"):
        return f"interrupted ({attrs['interrupted']})"
    if attrs.get(FAULT_DURING):
        return f"the arm faulted while it was recorded ({attrs[FAULT_DURING]})"
    try:
        accepted = _whole(attrs.get(ACCEPTED_STEPS, 0), ACCEPTED_STEPS)
        refused = _whole(attrs.get(REFUSED_STEPS, 0), REFUSED_STEPS)
    except ValueError as exc:
        return f"what the arm did is unreadable: {exc}"
    if accepted == 0 and refused > 0:
        return f"the arm refused every action it answered ({refused} refused, none accepted)"
    return None


class CollectionPlan:
    def __init__(self, per_config: int = 5) -> None:
        if per_config < 1:
            raise ValueError(f"per_config must be >= 1, got {per_config}")
        self.per_config = int(per_config)
        self.configurations: tuple[Configuration, ...] = tuple(
            Configuration(c, perm, SPEEDS[(k + c) % len(SPEEDS)])
            for c in range(len(COMBINATIONS))
            for k, perm in enumerate(p for p in PERMUTATIONS if p not in held_out(c))
        )

    def progress(self, demo_attrs: Iterable[Mapping[str, Any]]) -> dict[Configuration, int]:
        """Accepted demos per configuration of the plan (demos of other configurations, and those
        :func:`not_counted` names, are not counted)."""
        counts = dict.fromkeys(self.configurations, 0)
        for attrs in demo_attrs:
            if not_counted(attrs) is not None:
                continue
            config = Configuration.of(attrs)
            if config in counts:
                counts[config] += 1
        return counts

    def next(self, demo_attrs: Iterable[Mapping[str, Any]]) -> Configuration | None:
        """The next configuration to record, or None when the plan is complete."""
        counts = self.progress(demo_attrs)
        return next((c for c in self.configurations if counts[c] < self.per_config), None)

    def is_held_out(self, config: Configuration) -> bool:
        return config.slot_permutation in held_out(config.combination)


# ------------------------------------------------------------------------------------ `workcell plan`
def plan_report(path: str, per_config: int, what: str) -> str:
    """``next``: the configuration to set up next (words, and the JSON a recorder's ``task`` takes);
    ``status``: demos per configuration of the plan, held-out ones named, each demo not counted with why, and
    the interrupted episodes beside the session (never counted: recorder.session_file)."""
    from recorder.session_file import demo_number, interrupted_episodes, saved_demos

    plan = CollectionPlan(per_config)
    demos = saved_demos(path)
    attrs = [a for _, a in demos]
    if what == "next":
        config = plan.next(attrs)
        if config is None:
            return f"the plan is complete: {per_config} demos of each of its {len(plan.configurations)} configurations"
        return f"set up {config.setup()}\ntask: {json.dumps(config.attrs())}"
    counts = plan.progress(attrs)
    done = sum(min(n, per_config) for n in counts.values())
    aside = [f"demo_{demo_number(p.name)}" for p in interrupted_episodes(path)]
    beside = (f"; {len(aside)} interrupted episode{'s' * (len(aside) > 1)} beside it, not counted: {', '.join(aside)}"
              if aside else "")  # fmt: skip
    lines = [f"{path}: {done} of {per_config * len(counts)} plan demos ({len(attrs)} demos in the file{beside})"]
    for name, a in demos:
        if (why := not_counted(a)) is not None:
            config = Configuration.of(a)
            which = f" (combination {config.combination} slots {list(config.slot_permutation)} at " \
                    f"{config.belt_speed} m/s)" if config else ""  # fmt: skip
            lines.append(f"  not counted: {name}{which}: {why}")
    for config, n in counts.items():
        mark = "done" if n >= per_config else f"{n}/{per_config}"
        lines.append(f"  {mark:>6s}  combination {config.combination} slots {list(config.slot_permutation)} "
                     f"at {config.belt_speed} m/s")  # fmt: skip
    held = ", ".join(f"combination {c}: {[list(p) for p in held_out(c)]}" for c in range(len(COMBINATIONS)))
    lines.append(f"  held out for evaluation (never collected): {held}")
    return "\n".join(lines)
