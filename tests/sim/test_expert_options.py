"""The scripted expert's options for other arms: its goal box and the TCP orientation it holds."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from libero_workcell import layout
from libero_workcell.contract import make_state
from sim_cell.expert import ExpertConfig, Phase, SceneView, ScriptedExpert, WorkpieceView

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


def yaw_of(R: np.ndarray, cfg: ExpertConfig) -> float:
    M = R @ cfg.tcp_rotmat.T
    return float(np.arctan2(M[1, 0], M[0, 0]))


def wrap(a: float) -> float:
    return (a + np.pi) % (2 * np.pi) - np.pi


def test_with_yaw_with_base_the_yaw_turns_with_the_base_between_goals() -> None:
    """Waiting (no grasp or place ahead), the TCP's yaw follows its azimuth: the wrist is left where it is."""
    cfg = ExpertConfig(yaw_with_base=True)
    expert = ScriptedExpert(cfg)
    start = np.array([0.3, 0.3, 0.2])  # azimuth pi/4, the TCP at yaw 0: base-relative yaw -pi/4
    expert._yaw_with_base(cfg.tcp_rotmat, start, None)
    there = np.array([-0.3, 0.3, 0.2])  # azimuth 3 pi/4
    held = expert._yaw_with_base(cfg.tcp_rotmat, there, None)
    assert abs(wrap(yaw_of(held, cfg) - np.pi / 2)) < 1e-9  # turned with the base by pi/2
    np.testing.assert_allclose(held[:, 2], cfg.tcp_rotmat[:, 2], atol=1e-12)  # still pointing down
    plain = ScriptedExpert(ExpertConfig())
    plain.act(scene(-0.45), make_state(there, DOWN, 0))
    np.testing.assert_array_equal(plain._grasp_R, cfg.tcp_rotmat)  # off: the yaw held in the world


@given(
    start_az=st.floats(-np.pi, np.pi), start_yaw=st.floats(-np.pi, np.pi), anchor_az=st.floats(-np.pi, np.pi),
    radius=st.floats(0.3, 0.8),
)  # fmt: skip
def test_at_a_goal_the_yaw_is_a_grasp_and_within_a_quarter_turn_of_the_start_relative_to_the_base(
    start_az: float, start_yaw: float, anchor_az: float, radius: float
) -> None:
    cfg = ExpertConfig(yaw_with_base=True)
    expert = ScriptedExpert(cfg)
    R0 = Rotation.from_rotvec([0.0, 0.0, start_yaw]).as_matrix() @ cfg.tcp_rotmat
    expert._yaw_with_base(R0, radius * np.array([np.cos(start_az), np.sin(start_az), 0.2]), None)
    anchor = radius * np.array([np.cos(anchor_az), np.sin(anchor_az), 0.05])
    at_goal = expert._yaw_with_base(R0, anchor, anchor)
    flipped = np.diag([-1.0, -1.0, 1.0]) @ cfg.tcp_rotmat
    assert min(np.abs(at_goal - cfg.tcp_rotmat).max(), np.abs(at_goal - flipped).max()) < 1e-9  # a grasp
    assert abs(wrap(expert._base_yaw - wrap(start_yaw - start_az))) <= np.pi / 2 + 1e-9  # the wrist's bound


def test_the_yaw_anchor_is_the_grasp_then_the_place_and_nothing_while_waiting_or_retreating() -> None:
    expert = ScriptedExpert(ExpertConfig(yaw_with_base=True))
    slot = np.array([0.4, -0.3, 0.0])
    wp = WorkpieceView("wp_0", np.array([-0.3, 0.39, 0.06]), np.zeros(3), 0.02, True, False, slot)
    anchors = {"track": wp.pos, "descend": wp.pos, "grasp": wp.pos, "lift": slot, "transfer": slot, "lower": slot}
    for phase, anchor in {**anchors, "release": slot, "wait": None, "retreat": None}.items():
        expert.phase = Phase(phase)
        got = expert._yaw_anchor(wp)
        assert (got is None) if anchor is None else np.allclose(got, anchor), phase
    assert expert._yaw_anchor(None) is None
