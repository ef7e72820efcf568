"""The scripted expert's options for other arms: its goal box and the TCP orientation it holds."""

from __future__ import annotations

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell import layout
from libero_workcell.contract import make_state
from sim_bridge.expert import ExpertConfig, SceneView, ScriptedExpert, WorkpieceView

DOWN = Rotation.from_matrix(layout.HOME_TCP_ROTMAT).as_rotvec()


def scene(x: float) -> SceneView:
    wp = WorkpieceView("wp_0", np.array([x, layout.BELT_Y, 0.06]), np.zeros(3), 0.02, True, False, np.zeros(3))
    return SceneView(0.0, 0.0, (wp,))


def test_a_goal_box_keeps_the_expert_inside_it() -> None:
    state = make_state(np.array([-0.35, layout.BELT_Y, 0.20]), DOWN, 0)
    free = ScriptedExpert().act(scene(-0.45), state)
    boxed = ScriptedExpert(ExpertConfig(goal_box=(layout.WORKSPACE_MIN, layout.WORKSPACE_MAX))).act(scene(-0.45), state)
    assert free[0] < -0.1  # toward the workpiece beyond the box's -0.35 face
    assert boxed[0] == 0.0  # held on the face: the workpiece comes to it on the belt


def test_the_held_orientation_is_the_configured_one() -> None:
    turned = np.diag([-1.0, 1.0, -1.0])
    state = make_state(np.array([0.0, 0.3, 0.2]), DOWN, 0)
    a_home = ScriptedExpert().act(scene(0.0), state)
    a_turned = ScriptedExpert(ExpertConfig(tcp_rotmat=turned)).act(scene(0.0), state)
    np.testing.assert_allclose(a_home[3:6], 0.0, atol=1e-9)  # already there
    assert abs(a_turned[5]) == 1.0  # half a turn about z to go: saturated yaw
