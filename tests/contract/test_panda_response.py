"""The action response's Panda (libero_workcell.action_response.PandaResponse) and the model file it runs.

The file is the replica's Panda (sim_bridge.panda, robosuite 1.4.0's assembly) reduced to its dynamics: the
same mass matrix and TCP Jacobian at any pose, the same joint damping, armature and friction loss. The
response carries the Panda's TCP motion onto any arm pose, starts over before the Panda stretches out of
reach, does not depend on the servo rate, and raises where its state stops being finite.
"""

from __future__ import annotations

import math
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from libero_workcell.action_response import (
    PANDA_GRIP_SITE,
    PANDA_INIT_QPOS,
    PANDA_MODEL,
    RECENTRE_DISTANCE,
    Goal,
    PandaResponse,
    RefState,
    next_goal,
)
from libero_workcell.contract import ACTION_POS_SCALE, action_to_delta
from sim_bridge.panda.model import ARM_JOINTS, GRIP_SITE, INIT_QPOS, standalone_model

SERVO = 0.01  # the sim backend's servo period
TICKS = 5  # per 20 Hz control step


def run(response: PandaResponse, actions, ticks: int = TICKS) -> list[RefState]:
    ref = response.state()
    goal = Goal(ref.pos, ref.R)
    out = [ref]
    for a in actions:
        dpos, drot, _ = action_to_delta(np.asarray(a, float))
        goal = next_goal(ref, goal, dpos, drot)
        for _ in range(ticks):
            ref = response.step(goal)
        out.append(ref)
    return out


def test_the_model_file_is_the_replicas_panda() -> None:
    """M(q) and the TCP Jacobian at 20 random poses, damping, armature, friction loss and step, against the
    Panda as robosuite assembles it (fingers where they start)."""
    ours = PandaResponse(SERVO).model
    replica = standalone_model()
    rdofs = [replica.joint(n).dofadr[0] for n in ARM_JOINTS]
    rq = [replica.joint(n).qposadr[0] for n in ARM_JOINTS]
    np.testing.assert_allclose(ours.dof_damping, replica.dof_damping[rdofs])
    np.testing.assert_allclose(ours.dof_armature, replica.dof_armature[rdofs], rtol=1e-5)
    np.testing.assert_allclose(ours.dof_frictionloss, replica.dof_frictionloss[rdofs])
    assert ours.opt.timestep == pytest.approx(replica.opt.timestep) and not np.any(ours.opt.gravity)
    d, rd = mujoco.MjData(ours), mujoco.MjData(replica)
    rng = np.random.default_rng(1)
    for _ in range(20):
        q = INIT_QPOS + rng.uniform(-0.8, 0.8, 7)
        d.qpos[:] = q
        rd.qpos[rq] = q
        for m, data in ((ours, d), (replica, rd)):
            mujoco.mj_forward(m, data)
        M, rM = np.zeros((7, 7)), np.zeros((replica.nv, replica.nv))
        mujoco.mj_fullM(ours, d, M)
        mujoco.mj_fullM(replica, rd, rM)
        np.testing.assert_allclose(M, rM[np.ix_(rdofs, rdofs)], rtol=1e-5, atol=1e-6)
        J, rJ = np.zeros((6, 7)), np.zeros((6, replica.nv))
        mujoco.mj_jacSite(ours, d, J[:3], J[3:], ours.site(PANDA_GRIP_SITE).id)
        mujoco.mj_jacSite(replica, rd, rJ[:3], rJ[3:], replica.site(GRIP_SITE).id)
        np.testing.assert_allclose(J, rJ[:, rdofs], atol=1e-5)
    np.testing.assert_array_equal(PANDA_INIT_QPOS, INIT_QPOS)


def test_the_tool_writes_the_shipped_file_byte_for_byte(tmp_path) -> None:
    """`python -m tools.make_panda_response_model` (docs/interfaces.md), run as documented, to another path."""
    out = tmp_path / "panda_inertia.xml"
    done = subprocess.run([sys.executable, "-m", "tools.make_panda_response_model", "--out", str(out)],
                          capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert out.read_text() == files("libero_workcell").joinpath(PANDA_MODEL).read_text()


def test_the_motion_is_the_same_from_any_arm_pose() -> None:
    """Translation added, rotation left-multiplied: the same actions from two anchors give the same motion."""
    actions = [[0.3, -0.2, 0.1, 0.1, 0.0, -0.1, 0]] * 10 + [[0.0] * 7] * 5
    a, b = PandaResponse(SERVO), PandaResponse(SERVO)
    R_b = Rotation.from_rotvec([0.3, -1.2, 0.5]).as_matrix()
    a.reset(np.zeros(3), np.eye(3))
    b.reset(np.array([0.4, -0.2, 0.3]), R_b)
    for ra, rb in zip(run(a, actions), run(b, actions), strict=True):
        np.testing.assert_allclose(rb.pos - [0.4, -0.2, 0.3], ra.pos, atol=1e-9)
        np.testing.assert_allclose(rb.R @ R_b.T, ra.R, atol=1e-9)
        np.testing.assert_allclose(rb.vel, ra.vel, atol=1e-9)
        np.testing.assert_allclose(rb.omega, ra.omega, atol=1e-9)


def test_a_long_push_keeps_its_speed_across_recentring() -> None:
    """The arm's box is bigger than the Panda's reach: 100 steps of +1.0 start the Panda over every
    RECENTRE_DISTANCE, pose and twist carried over, and the arm keeps moving at the same speed."""
    response = PandaResponse(SERVO)
    refs = run(response, [[1.0, 0, 0, 0, 0, 0, 0]] * 100)
    steps = np.diff([r.pos[0] for r in refs])
    assert response.recentres >= 4
    assert steps[20:].min() > 0.012 and steps[20:].max() < 0.013  # metres per 20 Hz step
    jumps = np.abs(np.diff(steps[20:]))
    assert jumps.max() < 2e-4  # no jerk where it recentred
    assert np.linalg.norm(refs[-1].pos - refs[0].pos) > 4 * RECENTRE_DISTANCE


@pytest.mark.parametrize("servo_hz", [200.0, 300.0, 500.0])
def test_the_response_does_not_depend_on_the_servo_rate(servo_hz) -> None:
    actions = [[0.3, -0.1, 0.2, 0.1, -0.1, 0.2, 0]] * 20 + [[0.0] * 7] * 10
    ticks = round(servo_hz / 20.0)
    base = run(PandaResponse(SERVO), actions)
    other = run(PandaResponse(1.0 / servo_hz), actions, ticks)
    for r0, r1 in zip(base, other, strict=True):
        assert np.linalg.norm(r1.pos - r0.pos) < 3e-4
        assert Rotation.from_matrix(r1.R @ r0.R.T).magnitude() < 3e-3


def test_the_physics_step_divides_the_servo_period() -> None:
    for period, substeps in ((0.01, 5), (1 / 300, 2), (0.002, 1), (0.001, 1), (0.05, 25)):
        r = PandaResponse(period)
        assert r.substeps == substeps and r.model.opt.timestep * substeps == pytest.approx(period)
    for bad in (0.0, -0.01, math.nan, math.inf):
        with pytest.raises(ValueError, match="servo period"):
            PandaResponse(bad)


def test_seat_carries_on_from_where_the_caller_stopped_it() -> None:
    response = PandaResponse(SERVO)
    ref = run(response, [[0.5, 0, 0, 0, 0, 0.2, 0]] * 4)[-1]
    stopped = ref.pos - np.array([0.003, 0.0, 0.0])
    response.seat(stopped, np.zeros(3), ref.omega)
    now = response.state()
    np.testing.assert_allclose(now.pos, stopped, atol=1e-12)
    np.testing.assert_allclose(now.R, ref.R, atol=1e-12)  # the rotation is kept
    np.testing.assert_allclose(now.vel, 0.0, atol=1e-9)
    np.testing.assert_allclose(now.omega, ref.omega, atol=1e-9)


def test_a_state_that_stops_being_finite_raises() -> None:
    response = PandaResponse(SERVO)
    goal = Goal(response.state().pos + 0.01, np.eye(3))
    response.step(goal)
    response.data.qvel[0] = np.inf
    with pytest.raises(FloatingPointError, match="diverged"):
        response.step(goal)
    response.reset(np.zeros(3), np.eye(3))  # and a reset starts it over
    assert np.all(np.isfinite(response.step(goal).pos))


def test_a_goal_that_cannot_be_solved_raises_not_a_wild_torque() -> None:
    response = PandaResponse(SERVO)
    response.data.qpos[:] = 0.0  # the Panda stretched straight up: its Jacobian lost rank
    with pytest.raises(FloatingPointError):
        response.step(Goal(response.state().pos + ACTION_POS_SCALE, np.eye(3)))


def test_a_state_mujoco_finds_bad_raises_rather_than_jumping_to_its_reset() -> None:
    """MuJoCo resets a model whose velocity passes its limit (finite, but no arm moves so): the response would
    jump to the joints' zero pose. It raises instead."""
    response = PandaResponse(SERVO)
    goal = Goal(response.state().pos, np.eye(3))
    response.data.qvel[2] = 1e11
    with pytest.raises(FloatingPointError, match="MuJoCo found its state bad"):
        response.step(goal)


def test_after_a_pause_on_its_goal_the_response_is_a_fresh_ones() -> None:
    """At rest on its goal the Panda starts over from its start pose: what follows a pause is what a LIBERO
    episode's start gives, whatever came before (here a rotation that bent the Panda's posture)."""
    rotate = [[0.2, 0, 0, 0.4, 0, 0, 0]] * 8 + [[0.0] * 7] * 45  # settles within 40 steps
    probe = [[0, 0, 0, 0.3, 0, 0, 0]] * 10 + [[0.3, 0.2, 0, 0, 0, -0.3, 0]] * 10
    used = PandaResponse(SERVO)
    run(used, rotate)
    assert used.recentres >= 1 and np.max(np.abs(used.data.qpos - PANDA_INIT_QPOS)) < 1e-3
    start = used.state()
    fresh = PandaResponse(SERVO)
    fresh.reset(start.pos, start.R)
    for a, b in zip(run(used, probe), run(fresh, probe), strict=True):
        assert np.linalg.norm(a.pos - b.pos) < 2e-4
        assert Rotation.from_matrix(a.R @ b.R.T).magnitude() < 2e-3
