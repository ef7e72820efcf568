"""A recorded AUBO expert demo for the replay tests (written once per module, images included)."""

from __future__ import annotations

from pathlib import Path

from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import write_aubo_demos

REPLAY_SPEC = TaskSpec.from_seed(0)


def followable_demo_file(folder: Path) -> Path:
    """``folder/aubo_followable.hdf5``: the expert at the speed the retargeting law follows closely
    (sim_bridge.retarget.FOLLOWABLE_SPEED), both cameras rendered; it places two of the three within the horizon."""
    path = folder / "aubo_followable.hdf5"
    if not path.exists():
        outcomes = write_aubo_demos(path, [REPLAY_SPEC], followable=True)
        assert sum(outcomes[0]["placed"]) >= 1, outcomes
    return path
