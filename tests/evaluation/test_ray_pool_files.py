"""An actor on a machine that does not share the head's output folder sends its trial's files with its row, and the
head writes them: the actor itself is run here, in this process, without Ray (it is a plain class until Ray wraps
it), so this is the same code a cluster node runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from evaluation_fakes import trial_writing_files

from evaluation.protocol import protocol_trials
from evaluation.ray_pool import TOKEN_FILE, TrialActor, land_files
from evaluation.scheduler import function_host


def test_an_actor_without_the_heads_folder_sends_the_files_and_the_head_lands_them(tmp_path: Path) -> None:
    head = tmp_path / "head"
    head.mkdir()
    (head / TOKEN_FILE).write_text("the head's token")
    trial = protocol_trials((0.05,), trials_per_speed=1)[0]

    shared = TrialActor(function_host(trial_writing_files), str(head), "the head's token")
    kind, row, files = shared.run(trial)
    assert shared.shared and kind == "row" and files == {}  # the same folder: written in place
    assert Path(row["rollout"]) == head / "rollouts" / "trial_000.hdf5"
    shared.close()

    elsewhere = TrialActor(function_host(trial_writing_files), str(head), "another run's token")
    kind, row, files = elsewhere.run(trial)
    assert not elsewhere.shared and kind == "row"
    assert files == {"rollouts/trial_000.hdf5": b"rollout 0", "timing/trial_000.jsonl": b"timing 0\n"}
    assert row["rollout"] == "rollouts/trial_000.hdf5"  # relative: the head makes it its own
    scratch = elsewhere.out_dir
    elsewhere.close()
    assert not scratch.exists()  # the actor's scratch folder goes with it

    (head / "rollouts" / "trial_000.hdf5").write_text("an earlier attempt")
    landed = land_files(head, row, files)
    assert landed["rollout"] == str(head / "rollouts" / "trial_000.hdf5")
    assert (head / "rollouts" / "trial_000.hdf5").read_bytes() == b"rollout 0"
    (aside,) = head.glob("rollouts/trial_000.interrupted-*.hdf5")  # kept, never overwritten
    assert aside.read_text() == "an earlier attempt"
    assert not list(head.rglob("*.partial"))


def test_a_file_an_actor_names_outside_the_output_folder_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    head = tmp_path / "head"
    head.mkdir()
    files = {"rollouts/trial_000.hdf5": b"fine", "../outside.txt": b"not here"}
    with pytest.raises(ValueError, match="outside the output folder"):
        land_files(head, {"rollout": "rollouts/trial_000.hdf5"}, files)
    assert not (tmp_path / "outside.txt").exists() and not (head / "rollouts").exists()


def test_a_trial_that_raises_on_an_actor_is_a_failure_and_its_host_is_closed(tmp_path: Path) -> None:
    from evaluation_fakes import trial_failing_at_2

    actor = TrialActor(function_host(trial_failing_at_2), str(tmp_path), "token")
    trials = protocol_trials((0.05,), trials_per_speed=3)
    kind, (reason, tb), files = actor.run(trials[2])
    assert kind == "failed" and reason.startswith("TimeoutError: timed out") and "trial_failing_at_2" in tb
    assert actor.host is None and files == {}
    assert actor.run(trials[0])[0] == "row"  # a fresh host for the next trial
    actor.close()
