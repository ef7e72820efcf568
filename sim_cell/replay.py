"""Sim-in-the-loop replay of a recorded demonstration: what is replayed, and how it went.

Two modes, both through the contract's 7-D action like any other source:

- ``open_loop``: the recorded actions at the control rate, exactly as a policy would have sent them.
  On the AUBO this is the strict test of "same action, same meaning": drift shows as tracking error.
- ``closed_loop``: the recorded TCP path tracked with the retargeting law (:mod:`libero_workcell.tracking_law`,
  k = 3), the recorded gripper schedule kept. This is how a demo from another arm (a Panda's) or a
  physical-workcell demo is put back on the simulated AUBO.

A replay starts the simulated world in the demo's task (its ``task_spec`` attribute) with the arm on
the demo's first pose (its joints, for an AUBO demo; by IK from its first TCP pose otherwise), then
compares, step by step, the replayed TCP with the recorded one, and the task outcome with the recorded
outcome. The ROS node is :mod:`sim_cell.replay_node`; the command ``workcell replay``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig
from aubo_bridge.model.kinematics import HOME_Q, fk, ik
from libero_workcell.demo_reading import TcpPath, placed_of, robot_of, task_of, tcp_path
from libero_workcell.image_convention import ROBOSUITE_RAW, convention_of
from libero_workcell.layout import ROBOT
from libero_workcell.libero_format import Demo, DemoReader, LiberoFormatError
from libero_workcell.task import TaskSpec
from libero_workcell.tracking_law import tracking_action

OPEN_LOOP, CLOSED_LOOP = "open_loop", "closed_loop"
REPLAY_MODES = (OPEN_LOOP, CLOSED_LOOP)
AUBO = ROBOT  # the ``robot`` attribute of this workcell's demos
START_POSE_TOL = 1e-3  # m: an AUBO demo's first joints must put the TCP on its first ee_pos


def start_joints(demo: Demo, path: TcpPath, cfg: ArmConfig, robot: str | None = None) -> np.ndarray:
    """Where the AUBO starts: an AUBO demo's first joints (checked against its first TCP), else IK."""
    if (robot or robot_of(demo.attrs)) == AUBO and demo.joint_states.shape[1] == 6:
        q0 = demo.joint_states[0]
        pos, _ = fk(q0, cfg.tool_offset)
        if np.linalg.norm(pos - path.pos[0]) > START_POSE_TOL:
            raise LiberoFormatError(
                f"{demo.name}: its first joint state puts the TCP at {pos.round(4)}, not at its first ee_pos "
                f"{path.pos[0].round(4)}: joints and TCP were not recorded together (or another tool offset)"
            )
        return q0.copy()
    sol = ik(path.pos[0], path.R[0], HOME_Q, cfg.tool_offset, 200, cfg.ik_pos_tol, cfg.ik_rot_tol)
    if not sol.converged:
        raise LiberoFormatError(f"{demo.name}: the AUBO cannot reach the demo's first TCP pose {path.pos[0].round(3)}")
    return sol.q


@dataclass(frozen=True)
class ReplayPlan:
    """A demo made ready to replay on the simulated AUBO."""

    demo: Demo
    spec: TaskSpec
    start_q: np.ndarray
    path: TcpPath
    placed: list[bool] | None  # the recorded outcome
    image_convention: str = ROBOSUITE_RAW  # how its file stores images (libero_workcell.image_convention)

    @property
    def steps(self) -> int:
        return self.demo.num_samples

    def action(self, mode: str, t: int, pos: np.ndarray, R: np.ndarray) -> np.ndarray:
        """The action of step t: the recorded one (open loop), or toward the recorded TCP of t + 1 (closed)."""
        if mode == OPEN_LOOP:
            return self.demo.actions[t].copy()
        nxt = min(t + 1, self.steps - 1)
        return tracking_action(self.path.pos[nxt], self.path.R[nxt], pos, R, self.path.gripper[t])


def plan_from_demo(demo: Demo, arm: ArmConfig | None = None, image_convention: str = ROBOSUITE_RAW,
                   env_args: dict | None = None) -> ReplayPlan:  # fmt: skip
    robot = robot_of(demo.attrs, env_args)
    path = tcp_path(demo, robot)
    q0 = start_joints(demo, path, arm or ArmConfig(), robot)
    task, placed = task_of(demo.attrs, demo.name), placed_of(demo.attrs, demo.name)
    return ReplayPlan(demo, task, q0, path, placed, image_convention)


def load_plan(path: str | Path, name: str = "", arm: ArmConfig | None = None) -> ReplayPlan:
    """The plan for demo ``name`` of a LIBERO-layout file ("" = its first demo), reading that demo only; clear
    errors, nothing written."""
    with DemoReader(path) as f:
        try:
            convention = convention_of(f.env_args)
        except ValueError as exc:
            raise LiberoFormatError(f"{path}: {exc}") from None
        return plan_from_demo(f.demo(name or f.names[0]), arm, convention, f.env_args)


def held_ticks(servo_tick: Sequence[int] | np.ndarray | None, steps: int, nominal: int) -> np.ndarray:
    """How many servo periods each of ``steps`` actions held the arm, from the tick each took effect on
    (``Demo.servo_tick``; -1 unknown): the difference to its successor's. Zero is real: two actions delivered
    within one servo period, the first replaced before it moved the arm. ``nominal`` (servo_hz / control_hz)
    where that is unknown, for the last action, and where the difference is not between 0 and twice nominal
    (a dropped step, a restart of the driver's count): there the recording cannot say."""
    held = np.full(steps, nominal, np.int64)
    if servo_tick is None:
        return held
    tick = np.asarray(servo_tick, np.int64)[:steps]
    if len(tick) < 2:
        return held
    diff = np.diff(tick)
    known = (tick[:-1] >= 0) & (tick[1:] >= 0) & (diff >= 0) & (diff <= 2 * nominal)
    held[: len(diff)][known] = diff[known]
    return held


def check_mode(mode: str) -> str:
    if mode not in REPLAY_MODES:
        raise ValueError(f"replay mode must be one of {list(REPLAY_MODES)}, got {mode!r}")
    return mode


def tracking_errors(
    plan: ReplayPlan, pos: np.ndarray, rotvec: np.ndarray, first: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Per step, the replayed TCP (observed before the step's action; rows from step ``first`` on) against the
    recorded one: position error (m) and rotation error (deg)."""
    n = len(pos)
    recorded_pos, recorded_R = plan.path.pos[first : first + n], plan.path.R[first : first + n]
    if len(recorded_pos) != n or len(rotvec) != n:
        raise ValueError(f"{n} replayed steps from step {first} do not fit the demo's {plan.steps}")
    pos_err = np.linalg.norm(np.asarray(pos, float).reshape(n, 3) - recorded_pos, axis=1)
    R = Rotation.from_rotvec(np.asarray(rotvec, float).reshape(n, 3)).as_matrix()
    rot_err = np.degrees(Rotation.from_matrix(np.einsum("nij,nkj->nik", R, recorded_R)).magnitude())
    return pos_err, rot_err


def error_summary(pos_err: np.ndarray, rot_err: np.ndarray) -> dict[str, Any]:
    """The tracking figures of per-step errors (:func:`tracking_errors`): the report's ``tracking``."""
    pos_err, rot_err = np.asarray(pos_err, float), np.asarray(rot_err, float)
    if len(pos_err) == 0:
        raise ValueError("no replayed steps to compare")
    return {
        "steps_compared": len(pos_err),
        "pos_rms_m": float(np.sqrt(np.mean(pos_err**2))),
        "pos_max_m": float(pos_err.max()),
        "pos_final_m": float(pos_err[-1]),
        "rot_rms_deg": float(np.sqrt(np.mean(rot_err**2))),
        "rot_max_deg": float(rot_err.max()),
    }


def tracking_summary(plan: ReplayPlan, pos: np.ndarray, rotvec: np.ndarray) -> dict[str, Any]:
    """The replayed TCP at each step (observed before the step's action) against the recorded one."""
    n = min(len(pos), plan.steps)
    if n == 0:
        raise ValueError("no replayed steps to compare")
    return error_summary(*tracking_errors(plan, np.asarray(pos[:n]), np.asarray(rotvec[:n])))


def replay_status(mode: str, steps: int, step: int, tracking: dict[str, Any] | None, done: bool = False,
                  outcome: dict[str, Any] | None = None, error: str | None = None) -> dict[str, Any]:  # fmt: skip
    """The ``/replay/status`` message: ``step`` of ``steps`` replayed so far (1 after the first), the tracking
    so far (:func:`error_summary`; None before the first step: nulls) in mm and deg, ``done``, and at the end the
    report's ``outcome`` (or the ``error`` the replay failed with)."""
    t = tracking or {}
    mm = lambda key: None if key not in t else t[key] * 1e3  # noqa: E731
    status: dict[str, Any] = {
        "step": int(step), "steps": int(steps), "mode": mode,
        "pos_err_rms_mm": mm("pos_rms_m"), "pos_err_max_mm": mm("pos_max_m"),
        "rot_err_rms_deg": t.get("rot_rms_deg"), "rot_err_max_deg": t.get("rot_max_deg"),
        "done": bool(done),
    }  # fmt: skip
    if outcome is not None:
        status["outcome"] = outcome
    if error is not None:
        status["error"] = error
    return status


def strip_steps(steps: int, frames: int) -> list[int]:
    """``frames`` steps spread evenly over a replay of ``steps`` steps, first and last included."""
    if steps <= 0 or frames <= 0:
        return []
    return sorted({round(float(i)) for i in np.linspace(0, steps - 1, min(frames, steps))})


def side_by_side(recorded: Sequence[np.ndarray], replayed: Sequence[np.ndarray], gap: int = 4) -> np.ndarray:
    """One RGB image: the recorded frames (upright) on the top row, the replayed ones below, column per step."""
    if len(recorded) != len(replayed) or not recorded:
        raise ValueError(f"need as many recorded as replayed frames (>= 1), got {len(recorded)} and {len(replayed)}")
    h, w = recorded[0].shape[:2]
    out = np.full((2 * h + gap, len(recorded) * (w + gap) - gap, 3), 255, np.uint8)
    for i, (a, b) in enumerate(zip(recorded, replayed, strict=True)):
        for row, img in ((0, a), (1, b)):
            if img.shape[:2] != (h, w):
                raise ValueError(f"frame {i} is {img.shape[:2]}, the strip's frames are {(h, w)}")
            out[row * (h + gap) : row * (h + gap) + h, i * (w + gap) : i * (w + gap) + w] = img
    return out


@dataclass(frozen=True)
class ReplayResult:
    """A replay's replayed TCP per step (observed before the step's action), tracking and outcome."""

    pos: np.ndarray
    rotvec: np.ndarray
    tracking: dict[str, Any]
    metrics: dict[str, Any]

    @property
    def placed(self) -> list[bool]:
        return [bool(p) for p in self.metrics["placed"]]


def replay_in_process(
    plan: ReplayPlan,
    mode: str,
    max_steps: int | None = None,
    settle_time: float = 2.0,
    arm: ArmConfig | None = None,
    servo_tick: Sequence[int] | np.ndarray | None = None,
) -> ReplayResult:
    """The replay on sim time in one process (the graph's pieces, minus the middleware and the wall clock):
    what the ``demo_replay`` node does through the graph, exact and repeatable. In open loop each recorded
    action holds the arm as long as it did when recorded (the demo's servo ticks, or ``servo_tick`` given:
    :func:`held_ticks`), so a demo recorded through DDS replays as the arm executed it."""
    from libero_workcell.contract import SOURCE_POLICY
    from sim_cell.episode import make_sim_rig

    check_mode(mode)
    rig = make_sim_rig(plan.spec, arm, render=False, active_source=SOURCE_POLICY, start_q=plan.start_q)
    steps = plan.steps if max_steps is None else min(max_steps, plan.steps)
    # The schedule is the recorded actions': closed loop computes its own actions, one per control period.
    recorded = plan.demo.servo_tick if servo_tick is None else servo_tick
    held = held_ticks(recorded if mode == OPEN_LOOP else None, steps, rig.servo_per_control)
    pos, rotvec = [], []
    try:
        for t in range(steps):
            s = rig.driver.status()
            pos.append(s.tcp_pos)
            rotvec.append(s.tcp_rotvec)
            action = plan.action(mode, t, s.tcp_pos, Rotation.from_rotvec(s.tcp_rotvec).as_matrix())
            rig.act(action, SOURCE_POLICY, f"{plan.demo.name} step {t}", int(held[t]))
        end = rig.world.sim_time + settle_time
        while rig.world.sim_time < end:  # no more actions: the watchdog holds the arm, the scene settles
            rig.servo_tick()
        metrics = rig.world.evaluate()
    finally:
        rig.world.close()
    pos_a, rot_a = np.array(pos), np.array(rotvec)
    return ReplayResult(pos_a, rot_a, tracking_summary(plan, pos_a, rot_a), metrics)
