"""The AUBO world and the Panda world hold the same task: corresponding task bodies agree after settling."""

from __future__ import annotations

import pytest

from libero_workcell.task import TaskSpec
from sim_bridge.panda.agreement import POS_TOL, ROT_TOL_DEG, compare_worlds, task_pose_agreement
from sim_bridge.panda.world import PandaWorld
from sim_cell.world import SimWorld


@pytest.mark.parametrize("seed", [0, 3])
def test_the_two_worlds_agree_within_the_seeds_bound(seed) -> None:
    result = task_pose_agreement(TaskSpec.from_seed(seed))
    assert result.agrees, result.summary()
    assert max(result.pos_error.values()) <= POS_TOL and max(result.rot_error_deg.values()) <= ROT_TOL_DEG
    assert set(result.pos_error) == {"wp_0", "wp_1", "wp_2", "belt"}
    assert "agree at t = 4.00 s" in result.summary()


def test_worlds_that_do_not_hold_the_same_task_are_reported() -> None:
    """Another seed's lateral jitter puts the riding workpiece elsewhere: the check must say so."""
    spec = TaskSpec.from_seed(0)
    other = spec.replace(seed=1)
    assert spec.workpieces == other.workpieces
    result = compare_worlds(SimWorld(spec, render=False), PandaWorld(other, render=False))
    assert not result.agrees
    assert result.pos_error["wp_0"] > 1e-4 and "DISAGREE" in result.summary()
