"""The collection plan: the seed's physical design, what to set up next, and what each demo records."""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_workcell_plan_reads_the_session_being_collected(tmp_path, capsys) -> None:
    """`workcell plan next | status` against a session file's saved episodes (read-only: a recorder may be
    writing it): the next setup in words and the JSON a recorder's `task` takes, and the progress."""
    import json

    import h5py

    from recorder.session_file import episodes_dir_of
    from workcell import cli

    session = tmp_path / "d2s.hdf5"
    plan = CollectionPlan(per_config=1)
    first, second = plan.configurations[:2]
    folder = episodes_dir_of(session)
    folder.mkdir()
    with h5py.File(folder / "demo_0.hdf5", "w") as f:  # one saved demo of the first configuration
        demo = f.create_group("data").create_group("demo_0")
        for key, value in first.attrs().items():
            demo.attrs[key] = json.dumps(value) if isinstance(value, list) else value
    (folder / "demo_1.hdf5.partial").write_bytes(b"")  # an episode being written is not counted
    assert cli.main(["plan", "next", "--session", str(session), "--per-config", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"set up {second.setup()}")
    task = json.loads(out.split("task: ", 1)[1])
    assert task == second.attrs() and task["language_instruction"] and json.loads(task["task_spec"])
    assert cli.main(["plan", "status", "--session", str(session), "--per-config", "1"]) == 0
    status = capsys.readouterr().out
    assert status.splitlines()[0].endswith("1 of 16 plan demos (1 demos in the file)")
    assert "done  combination 0 slots" in status and "held out for evaluation" in status


@pytest.mark.parametrize(
    "attrs, reason",
    [({"slot_permutation": "[1e999]"}, r"slot_permutation \[inf\]: element inf is not an integer"),
     ({"slot_permutation": [1e999, 0, 1]}, "element inf is not an integer"),
     ({"combination": 10**400}, "combination 1000.* is not a number"),
     ({"belt_speed": float("nan")}, "belt_speed nan is not a finite number"),
     ({"level": 1.5}, "level 1.5 is not an integer"),
     ({"slot_permutation": "[0, 1"}, r"slot_permutation '\[0, 1' is not JSON"),
     ({"slot_permutation": 7}, "slot_permutation 7 is not a list of slot indices")],
)  # fmt: skip
def test_a_demo_recording_no_configuration_says_why_and_is_no_plan_demo(attrs, reason) -> None:
    """Issue 35, item 13: attributes from a demo file are outside input; ``slot_permutation: [1e999]`` raised
    OverflowError (a traceback from `workcell plan status`)."""
    recorded = {**CollectionPlan().configurations[0].attrs(), **attrs}
    with pytest.raises(ValueError, match=reason):
        Configuration.parse(recorded)
    assert Configuration.of(recorded) is None


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["combination", "slot_permutation", "belt_speed", "level"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
                                    lambda inner: st.lists(inner, max_size=4), max_leaves=8)
                       | st.lists(st.floats() | st.integers(), max_size=4).map(json.dumps)))  # fmt: skip
def test_any_recorded_attributes_give_a_configuration_or_say_why(attrs) -> None:
    try:
        config = Configuration.parse(attrs)
    except ValueError:
        assert Configuration.of(attrs) is None
    else:
        assert Configuration.of(attrs) == config and all(type(i) is int for i in config.slot_permutation)


def test_workcell_plan_status_counts_a_demo_with_an_unreadable_configuration_as_none(tmp_path, capsys) -> None:
    import h5py

    from recorder.session_file import episodes_dir_of
    from workcell import cli

    session = tmp_path / "d2s.hdf5"
    folder = episodes_dir_of(session)
    folder.mkdir()
    with h5py.File(folder / "demo_0.hdf5", "w") as f:
        demo = f.create_group("data").create_group("demo_0")
        demo.attrs.update(combination=0, slot_permutation="[1e999]", belt_speed=0.03)
    assert cli.main(["plan", "status", "--session", str(session), "--per-config", "1"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith("0 of 16 plan demos (1 demos in the file)")


@pytest.mark.parametrize(
    "attrs, why",
    [({"arm_accepted_steps": 0, "arm_refused_steps": 92}, r"refused every action it answered \(92 refused"),
     ({"arm_accepted_steps": 1, "arm_refused_steps": 91}, None),
     ({"arm_accepted_steps": 0, "arm_refused_steps": 0}, None),  # no verdict came: nothing says otherwise
     ({}, None),  # a demo from elsewhere, without the arm's verdicts
     ({"arm_accepted_steps": 40, "arm_fault": "ARM-PSTOP protective stop"},
      r"the arm faulted while it was recorded \(ARM-PSTOP protective stop\)"),
     ({"interrupted": "the recorder was stopped (SIGINT)"}, r"interrupted \(the recorder was stopped \(SIGINT\)\)"),
     ({"arm_accepted_steps": "many", "arm_refused_steps": 3}, "what the arm did is unreadable: arm_accepted_steps"),
     ({"arm_accepted_steps": 0, "arm_refused_steps": 1e999}, "unreadable: arm_refused_steps inf")],
)  # fmt: skip
def test_a_demo_the_arm_did_not_perform_is_not_counted(attrs, why) -> None:
    """Issue 35, item 12: a demo whose 92 steps the arm all refused (it was in fault) was counted toward the plan."""
    from recorder.collection_plan import not_counted

    plan = CollectionPlan(per_config=1)
    recorded = {**plan.configurations[0].attrs(), **attrs}
    reason = not_counted(recorded)
    assert reason is None if why is None else re.search(why, reason), reason
    assert plan.progress([recorded])[plan.configurations[0]] == (1 if why is None else 0)


def test_workcell_plan_status_names_each_demo_it_does_not_count_and_why(tmp_path, capsys) -> None:
    """The session as a lab has it: a demo saved before the recorder summed the arm's verdicts (only its
    action_accepted says all 92 steps were refused), one in which the arm faulted, one the arm performed in part,
    one without any verdict. `workcell plan status` counts the last two and names the first two with why;
    `plan next` asks for the first configuration again."""
    import h5py
    import numpy as np

    from recorder.session_file import episodes_dir_of
    from workcell import cli

    session = tmp_path / "d2s.hdf5"
    plan = CollectionPlan(per_config=1)
    c = plan.configurations
    folder = episodes_dir_of(session)
    folder.mkdir()
    demos = [(c[0], {}, [0] * 92), (c[0], {"arm_fault": "ARM-PSTOP protective stop"}, [1] * 30),
             (c[1], {}, [1, 0, -1, 1] * 10), (c[2], {}, [-1] * 12)]  # fmt: skip
    for i, (config, extra, accepted) in enumerate(demos):
        with h5py.File(folder / f"demo_{i}.hdf5", "w") as f:
            demo = f.create_group("data").create_group(f"demo_{i}")
            for key, value in {**config.attrs(), **extra}.items():
                demo.attrs[key] = json.dumps(value) if isinstance(value, list) else value
            demo.create_dataset("action_accepted", data=np.array(accepted, np.int8))
    assert cli.main(["plan", "status", "--session", str(session), "--per-config", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("2 of 16 plan demos (4 demos in the file)"), lines[0]
    where = f"(combination 0 slots {list(c[0].slot_permutation)} at {c[0].belt_speed} m/s)"
    assert lines[1:3] == [
        f"  not counted: demo_0 {where}: the arm refused every action it answered (92 refused, none accepted)",
        f"  not counted: demo_1 {where}: the arm faulted while it was recorded (ARM-PSTOP protective stop)"]
    assert sum(ln.split()[:1] == ["done"] for ln in lines) == 2
    assert cli.main(["plan", "next", "--session", str(session), "--per-config", "1"]) == 0
    assert capsys.readouterr().out.startswith(f"set up {c[0].setup()}")
