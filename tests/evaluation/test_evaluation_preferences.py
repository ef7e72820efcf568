"""SR and SA of an evaluation with a preference, from its trials' rollouts and outcomes (no graph)."""

from __future__ import annotations

import numpy as np
import pytest
from preference_trajectories import pick_place

from evaluation.preference_scores import score_trials
from evaluation.protocol import protocol_trials
from libero_workcell.libero_format import Demo, write_demo_file


def rollout(path, traj) -> str:
    t = traj.steps
    actions = np.zeros((t, 7))
    actions[:, 6] = traj.grip_command
    demo = Demo("demo_0", actions, traj.tcp_pos, traj.tcp_rotvec, traj.gripper_coord[:, None], np.zeros((t, 6)),
                np.zeros((t, 8)), attrs={"control_hz": 20.0})  # fmt: skip
    write_demo_file(path, [demo], {}, {})
    return str(path)


def test_sa_counts_the_trials_outcomes_and_a_lost_rollout_scores_zero(tmp_path) -> None:
    trials = protocol_trials((0.03,), 3, "keep_high")[:3]
    high = pick_place(task=trials[0].spec, height=0.34)
    low = pick_place(task=trials[1].spec, height=0.20)
    paths = [rollout(tmp_path / "a.hdf5", high), rollout(tmp_path / "b.hdf5", low), str(tmp_path / "lost.hdf5")]
    rows = [{"trial": t.as_dict(), "outcome": {"placed": [True] * 3}, "rollout": p}
            for t, p in zip(trials, paths, strict=True)]
    summary = score_trials(rows, tmp_path)
    labels = [e["label"] for e in summary["episodes"]]
    assert labels == [1.0, 0.0, 0.0] and summary["unscored_trials"] == [2]
    assert summary["overall"]["SA_all_preferences"] == pytest.approx(1 / 3)
    # a failed trial adds nothing to SA, however high it carried: success is the trial's outcome
    rows[0]["outcome"] = {"placed": [True, False, True]}
    summary = score_trials(rows, tmp_path)
    assert summary["overall"]["SA_all_preferences"] == 0.0 and summary["overall"]["SR"] == pytest.approx(2 / 3)
    assert (tmp_path / "preferences" / "report.html").is_file()
    assert score_trials([{**r, "trial": {**r["trial"], "preference": ""}} for r in rows], tmp_path) is None
