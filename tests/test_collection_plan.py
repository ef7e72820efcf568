"""The collection plan: the seed's physical design, what to set up next, and what each demo records."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from libero_workcell.task import COMBINATIONS, PERMUTATIONS
from recorder.collection_plan import SPEEDS, CollectionPlan, Configuration, held_out


def test_the_plan_is_the_seeds_design() -> None:
    plan = CollectionPlan()
    configs = plan.configurations
    assert len(configs) == 16 and len(set(configs)) == 16  # 4 combinations x 4 training permutations
    for c in range(len(COMBINATIONS)):
        mine = [x for x in configs if x.combination == c]
        assert len(mine) == 4 and len(held_out(c)) == 2 and held_out(c)[0] != held_out(c)[1]
        assert {x.slot_permutation for x in mine}.isdisjoint(held_out(c))  # held out: never collected
        assert {x.slot_permutation for x in mine} | set(held_out(c)) == set(PERMUTATIONS)
        assert Counter(x.belt_speed for x in mine) == {SPEEDS[0]: 2, SPEEDS[1]: 2}  # speeds balanced
    assert {p for c in range(4) for p in held_out(c)} == set(PERMUTATIONS)  # every permutation held out somewhere
    assert not any(plan.is_held_out(x) for x in configs)


def test_next_sweeps_the_design_and_counts_only_plan_demos() -> None:
    plan = CollectionPlan(per_config=2)
    first = plan.next([])
    assert first == plan.configurations[0]
    done = [first.attrs()]
    assert plan.next(done) == first  # two per configuration
    done.append({**first.attrs(), "slot_permutation": str(list(first.slot_permutation))})  # as HDF5 attrs hold it
    assert plan.next(done) == plan.configurations[1]
    done += [{"combination": 9}, {}]  # not plan demos: ignored
    assert plan.progress(done)[first] == 2
    everything = [c.attrs() for c, _ in itertools.product(plan.configurations, range(2))]
    assert plan.next(everything) is None


def test_a_configuration_tells_the_operator_and_records_itself() -> None:
    config = CollectionPlan().configurations[5]
    attrs = config.attrs()
    assert Configuration.of(attrs) == config
    assert attrs["language_instruction"] == config.spec.language_instruction and attrs["split"] == "train"
    text = config.setup()
    assert f"{config.belt_speed} m/s" in text and "tray left to right" in text
    with pytest.raises(ValueError, match="per_config"):
        CollectionPlan(per_config=0)
