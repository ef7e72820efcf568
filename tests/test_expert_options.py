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


def test_a_turn_rate_cap_shortens_the_rotation_it_asks_for() -> None:
    turned = np.diag([-1.0, 1.0, -1.0])
    state = make_state(np.array([0.0, 0.3, 0.2]), DOWN, 0)
    free = ScriptedExpert(ExpertConfig(tcp_rotmat=turned)).act(scene(0.0), state)
    expert = ScriptedExpert(ExpertConfig(tcp_rotmat=turned, max_rot_speed=1.0))
    capped = expert.act(scene(0.0), state)
    held = np.linalg.norm(capped[3:6]) * 0.5  # rad of goal offset (ACTION_ROT_SCALE)
    assert abs(held - 1.0 / 20 / expert._ratio) < 1e-9  # the offset that, held, turns the TCP at 1 rad/s
    assert np.linalg.norm(free[3:6]) > 2 * np.linalg.norm(capped[3:6])
    np.testing.assert_allclose(capped[:3], free[:3])  # the translation is not touched
    axis = capped[3:6] / np.linalg.norm(capped[3:6])
    np.testing.assert_allclose(axis, free[3:6] / np.linalg.norm(free[3:6]), atol=1e-9)  # shortened, not turned


def test_the_detour_is_only_for_paths_that_dip_near_the_base_axis() -> None:
    expert = ScriptedExpert(ExpertConfig(min_radius=0.45, via_radius=0.55))
    across = expert._route(np.array([-0.40, 0.30, 0.2]), np.array([0.40, -0.30, 0.2]))  # through the axis
    assert abs(np.linalg.norm(across[:2]) - 0.55) < 1e-9  # a waypoint on the via arc
    inner = np.array([0.0, 0.39, 0.1])  # the belt passes nearer the base than min_radius
    np.testing.assert_array_equal(expert._route(np.array([0.3, 0.45, 0.2]), inner), inner)  # reached straight
    outer = np.array([0.5, 0.1, 0.2])
    np.testing.assert_array_equal(expert._route(np.array([0.45, 0.3, 0.2]), outer), outer)  # clear path


def test_the_grasp_yaw_is_chosen_for_the_whole_cycle_and_kept_while_carrying() -> None:
    """Of the two grasp yaws, the one whose wrist stays nearest mid-range at the grasp and, after the carry's
    sweep around the base, at the place; never changed while a workpiece is held."""
    cfg = ExpertConfig(either_grasp_yaw=True, wrist_joint=5, wrist_sign=-1.0)
    R = Rotation.from_rotvec([0.0, 0.0, -0.1]).as_matrix() @ layout.HOME_TCP_ROTMAT  # 0.1 rad off: no +-pi tie
    expert = ScriptedExpert(cfg)
    tcp = np.array([-0.3, 0.39, 0.2])
    grasp, place = np.array([-0.3, 0.39, 0.05]), np.array([0.4, -0.3, 0.0])  # the carry sweeps the base -2.87 rad
    q = np.zeros(6)
    q[5] = 1.5  # kept: the wrist ends the carry at -1.47 rad (flipped it would start at +4.5)
    np.testing.assert_array_equal(expert._choose_yaw(R, tcp, grasp, place, q), cfg.tcp_rotmat)
    q[5] = -1.0  # kept, the carry would end at -3.97 (past the limit); flipped: +2.04 at the grasp, -0.83 placed
    flipped = expert._choose_yaw(R, tcp, grasp, place, q)
    np.testing.assert_allclose(flipped, np.diag([-1.0, -1.0, 1.0]) @ cfg.tcp_rotmat)
    expert._grasp_R = flipped
    expert.phase, expert.target_name, expert._carry_offset = expert.phase.__class__("lift"), "wp_0", 0.02
    for z in (0.08, 0.3, 0.3):  # lifting, then transferring (the workpiece in the fingers): the yaw stays
        wp = WorkpieceView("wp_0", np.array([-0.3, 0.39, z - 0.02]), np.zeros(3), 0.02, True, False, place)
        expert.act(SceneView(0.0, 0.0, (wp,), arm_q=np.zeros(6)), make_state(np.array([-0.3, 0.39, z]), DOWN, 1.0))
    assert expert.phase.value in ("transfer", "lower")
    np.testing.assert_allclose(expert._grasp_R, flipped)
