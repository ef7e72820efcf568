"""A recorded AUBO expert demo for the replay tests (written once per test session, images included)."""

from __future__ import annotations

from pathlib import Path

from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import write_aubo_demos

REPLAY_SPEC = TaskSpec.from_seed(0)


def expert_demo_file(folder: Path) -> Path:
    """``folder/aubo_expert.hdf5``: one full scripted-expert episode on the simulated AUBO (all three placed)."""
    path = folder / "aubo_expert.hdf5"
    if not path.exists():
        outcomes = write_aubo_demos(path, [REPLAY_SPEC])
        assert outcomes[0]["placed"] == [True, True, True], outcomes  # a demo worth replaying
    return path


def followable_demo_file(folder: Path) -> Path:
    """``folder/aubo_followable.hdf5``: the expert at the speed the retargeting law follows closely
    (sim_bridge.retarget.FOLLOWABLE_SPEED), headless; it places two of the three within the horizon."""
    path = folder / "aubo_followable.hdf5"
    if not path.exists():
        outcomes = write_aubo_demos(path, [REPLAY_SPEC], render=False, followable=True)
        assert sum(outcomes[0]["placed"]) >= 1, outcomes
    return path
