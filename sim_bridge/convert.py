"""Panda demonstrations to AUBO demonstrations: retarget through the contract, re-render, record.

For each Panda demo (LIBERO layout): the AUBO world of the same task starts with the AUBO's TCP on the
Panda's first TCP pose (IK), then follows the Panda's TCP path online with the seed's law
(sim_bridge.retarget, k = 3) through the arm driver, the Panda's gripper schedule kept. Every step
records what a policy would see and do on the AUBO (images re-rendered from the AUBO world, in the raw
convention the source's were in; TCP, gripper coordinate, joints; the action sent), so the converted
demo is an AUBO demonstration in LIBERO's layout, with the tracking error and both outcomes attached.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.config import RESPONSE_LIBERO, ArmConfig
from aubo_bridge.model.kinematics import fk, ik
from aubo_bridge.response.base import IK_MAX_ITERATIONS, box_step
from aubo_bridge.response.libero import reference_tick
from libero_workcell.action_response import Goal, PandaResponse, RefState, next_goal
from libero_workcell.contract import SOURCE_POLICY, action_to_delta, gripper_command_to_coord, validate_action
from libero_workcell.demo_reading import placed_of, task_of, tcp_path
from libero_workcell.layout import ROBOT
from libero_workcell.libero_format import Demo, aubo_robot_states
from libero_workcell.task import TaskSpec
from sim_bridge.demo_recorder import DemoRecorder, outcome_attrs
from sim_bridge.retarget import Tracking, follow
from sim_cell.episode import make_sim_rig
from sim_cell.replay import start_joints


@dataclass(frozen=True)
class Converted:
    demo: Demo
    tracking: Tracking
    metrics: dict  # the AUBO episode's outcome
    source_placed: list[bool] | None  # the Panda demo's, when it recorded them

    @property
    def same_outcome(self) -> bool | None:
        """None where either outcome is unknown (no recorded one; a kinematic conversion has none)."""
        if self.source_placed is None or "placed" not in self.metrics:
            return None
        return list(self.metrics["placed"]) == list(self.source_placed)


def converted_attrs(demo: Demo, tracking: Tracking, conversion: str, extra: dict) -> dict:
    """The converted demo's attributes: the source's task configuration (its outcome dropped), what it came
    from, how it was converted and how well it tracked, and ``extra`` (the AUBO episode's outcome)."""
    kept = {k: v for k, v in demo.attrs.items() if k not in ("num_samples", "placed", "SR", "PCR_T", "PCR_S")}
    return {**kept, "robot": ROBOT, "source_demo": demo.name, "conversion": conversion,
            "tracking_pos_rms_m": tracking.pos_rms, "tracking_rot_rms_deg": float(np.degrees(tracking.rot_rms)),
            **extra}  # fmt: skip


def convert_demo(
    demo: Demo, spec: TaskSpec | None = None, render: bool = True, arm: ArmConfig | None = None,
    kinematic: bool = False,
) -> Converted:  # fmt: skip
    """One Panda demo as an AUBO demo (see the module docstring). ``kinematic``: the fast headless path
    (:func:`convert_kinematic`), falling back to the full one where a limit of the driver would act."""
    if kinematic and not render:
        try:
            return convert_kinematic(demo, arm)
        except KinematicLimitError:
            pass
    spec = spec or task_of(demo.attrs, demo.name)
    path = tcp_path(demo)
    cfg = arm or ArmConfig()
    start_q = start_joints(demo, path, cfg)
    rig = make_sim_rig(spec, cfg, render, active_source=SOURCE_POLICY, start_q=start_q, camera_hz=0.0)
    world, driver = rig.world, rig.driver
    recorder = DemoRecorder(world, render)

    def step(action: np.ndarray) -> None:
        recorder.observe_arm(driver.status())
        rig.act(action, SOURCE_POLICY, f"{demo.name}, retargeting")

    try:
        tracking = follow(path, rig.tcp, step)
        metrics = world.evaluate()
    finally:
        world.close()
    attrs = converted_attrs(demo, tracking, "physics", outcome_attrs(metrics))
    converted = recorder.demo(demo.name, attrs, tracking.actions)
    return Converted(converted, tracking, metrics, placed_of(demo.attrs, demo.name))


# ---------------------------------------------------------------- the fast path: no physics, no rendering
class KinematicLimitError(RuntimeError):
    """A limit of the arm driver would act here, so the kinematic path would not be what the arm does."""


def convert_kinematic(demo: Demo, arm: ArmConfig | None = None) -> Converted:
    """The conversion without MuJoCo's world: the AUBO's TCP is the arm driver's libero reference itself (its
    servos track it; the full path's MuJoCo arm follows it within a fraction of a millimetre), advanced tick
    by tick with the driver's own :func:`~aubo_bridge.response.libero.reference_tick` (the response, the workspace
    box), checked against the driver's other limits (a TCP speed limit or a joint speed that would act raises
    :class:`KinematicLimitError`), joints by IK once per step (warm-started; unreachable raises), the gripper
    coordinate its command. No images and no task outcome (no physics): replay the converted demo
    (sim_cell.replay) for the outcome. Deterministic; faster than real time (docs/simulation.md)."""
    spec_json = task_of(demo.attrs, demo.name).to_json()  # the task must be known, as for the full path
    path = tcp_path(demo)
    cfg = arm or ArmConfig()
    if cfg.action_response != RESPONSE_LIBERO:
        raise ValueError("the kinematic conversion models the libero action response only")
    q = start_joints(demo, path, cfg)
    n_ticks = round(cfg.control_period / cfg.servo_period)
    p0, R0 = fk(q, cfg.tool_offset)
    response = PandaResponse(cfg.servo_period)
    response.reset(p0, R0)
    st = {"ref": RefState.at_rest(p0, R0), "goal": Goal(p0, R0), "q": q, "grip": 0.0}
    rows: list[tuple[np.ndarray, np.ndarray, float, np.ndarray]] = []  # TCP, rotation, gripper, joints per step

    def observe() -> tuple[np.ndarray, np.ndarray]:
        return st["ref"].pos, st["ref"].R

    def step(action: np.ndarray) -> None:
        ref: RefState = st["ref"]
        a = validate_action(action)
        rows.append((ref.pos, ref.R, st["grip"], st["q"]))
        dpos, drot, grip = action_to_delta(a)
        goal_pos, outward = box_step(ref.pos, dpos, cfg.workspace_min, cfg.workspace_max)
        if np.any(outward):  # the driver refuses such an action (clipping a goal to the box, it does too)
            raise KinematicLimitError(f"{demo.name}: the goal leaves the workspace box")
        goal = Goal(goal_pos, next_goal(ref, st["goal"], dpos, drot).R)
        new = ref
        for _ in range(n_ticks):
            new, limit = reference_tick(response, new, goal, cfg)
            if limit is not None:
                raise KinematicLimitError(f"{demo.name}: the reference would exceed {limit}")
        sol = ik(new.pos, new.R, st["q"], cfg.tool_offset, IK_MAX_ITERATIONS, cfg.ik_pos_tol, cfg.ik_rot_tol)
        if not sol.converged:
            raise KinematicLimitError(f"{demo.name}: IK fails on the reference at {new.pos.round(3)}")
        if np.any(np.abs(sol.q - st["q"]) > cfg.max_joint_speed * cfg.control_period):
            raise KinematicLimitError(f"{demo.name}: a joint would exceed max_joint_speed")
        st.update(ref=new, goal=goal, q=sol.q, grip=gripper_command_to_coord(grip))

    tracking = follow(path, observe, step)
    recorder = DemoRecorder(None, False)
    pos = np.array([r[0] for r in rows])
    rot = Rotation.from_matrix(np.array([r[1] for r in rows]))  # one batched conversion for the whole demo
    grip = np.array([[r[2]] for r in rows])
    rotvec = rot.as_rotvec()
    robot = aubo_robot_states(grip[:, 0], pos, rotvec)
    for p, rv, rs, gr, q in zip(pos, rotvec, robot, grip, (r[3] for r in rows), strict=True):
        recorder.observe(p, rv, gr, q, rs)
    attrs = converted_attrs(demo, tracking, "kinematic", {"task_spec": spec_json})
    return Converted(recorder.demo(demo.name, attrs, tracking.actions), tracking, {}, placed_of(demo.attrs, demo.name))
