"""Panda demonstrations of the workcell task in LIBERO's HDF5 layout (what LIBERO's own files hold).

``python -m sim_bridge.panda.demos OUT.hdf5 [--seeds 0 1 2] [--speed 0.03] [--max-steps N]`` runs the
scripted expert on the Panda (:class:`sim_bridge.panda.world.PandaWorld`) and writes one demo per
seed with LIBERO's keys and conventions: ``obs/ee_pos`` the grip site, ``obs/ee_ori`` the axis-angle of
the hand body (robosuite's ``robot0_eef_quat``), ``obs/gripper_states`` the two finger joints,
``obs/joint_states`` the seven arm joints, ``robot_states`` = finger joints, eef position, hand quaternion
(x, y, z, w), and the images as robosuite returns them (``agentview_rgb`` from the external camera,
``eye_in_hand_rgb`` from the wrist camera): the upright view flipped vertically (HARDWARE.md, "Image
conventions"). Each demo's attributes hold the task configuration and its outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell import layout
from libero_workcell.contract import CONTROL_HZ_DEFAULT, make_state
from libero_workcell.image_convention import ENV_ARGS_TEXT, ROBOSUITE_RAW
from libero_workcell.libero_format import Demo
from libero_workcell.task import DEFAULT_BELT_SPEED, TaskSpec
from sim_bridge.demo_recorder import DemoRecorder, episodes_parser, outcome_attrs, report_episodes, write_episodes
from sim_bridge.panda.world import PANDA_TCP_ROTMAT, PandaWorld
from sim_bridge.retarget import CLOSE_SPEED
from sim_cell.expert import ExpertConfig, SceneView, ScriptedExpert

ENV_ARGS = {
    "env_name": "libero_industry_workcell_d2s",
    "robot": "Panda",
    "controller": "OSC_POSE (kp 150, damping ratio 1)",
    "control_freq": CONTROL_HZ_DEFAULT,
    "images": ENV_ARGS_TEXT[ROBOSUITE_RAW],
}

# The Panda source's task timing. Its expert moves at most at retarget.CLOSE_SPEED, so that the AUBO follows
# it within 2 mm, and one pick and place then takes about 36 s (the AUBO's own expert at 0.45 m/s: ~11 s,
# which the task's default 12 s between arrivals is set for). The same task otherwise.
PANDA_ARRIVAL_INTERVAL = 36.0  # s
PANDA_T_COMPLETE = 40.0  # s after the last arrival


def panda_task(seed: int, belt_speed: float = DEFAULT_BELT_SPEED) -> TaskSpec:
    """The workcell task of ``seed`` with the Panda source's arrival timing."""
    return TaskSpec.from_seed(seed, belt_speed, arrival_interval=PANDA_ARRIVAL_INTERVAL, t_complete=PANDA_T_COMPLETE)


@dataclass(frozen=True)
class PandaDemo:
    demo: Demo
    metrics: dict


def run_panda_demo(
    spec: TaskSpec, name: str = "demo_0", max_steps: int | None = None, render: bool = True,
    expert_overrides: dict | None = None,
) -> PandaDemo:  # fmt: skip
    """One expert episode on the Panda, recorded step by step (observation, then the action issued for it).
    ``expert_overrides``: ExpertConfig fields replacing the Panda source's settings (to explore them)."""
    world = PandaWorld(spec, render=render, camera_hz=0.0)
    # Followable by a retargeted AUBO within 2 mm: inside the AUBO's workspace box, at most CLOSE_SPEED and
    # 0.5 rad/s (the Panda's OSC would turn 2.5 rad/s at the start). The yaw turns with the base between goals
    # (the Panda's wrist, counter-turning sweeps of up to 2.9 rad, wound into its limit). Detours keep 0.45 m
    # from the base axis: nearer, the Panda folds onto its joint limits (joints 2, 3, 5) carrying across the
    # front. It grasps 6 mm above the workpiece's centre: the AUBO's fingers stop on the belt 2-3 mm higher
    # than the Panda's, and a reference the AUBO cannot reach winds up its driver's reference (then a lunge).
    box = (layout.WORKSPACE_MIN, layout.WORKSPACE_MAX)
    settings = dict(
        tcp_rotmat=PANDA_TCP_ROTMAT, yaw_with_base=True, goal_box=box, max_speed=CLOSE_SPEED,
        carry_speed=CLOSE_SPEED, max_rot_speed=0.5, min_radius=0.45, via_radius=0.55, grasp_depth=-0.006,
    )  # fmt: skip
    expert = ScriptedExpert(ExpertConfig(**{**settings, **(expert_overrides or {})}))
    recorder = DemoRecorder(world, render)
    steps = 0
    try:
        while world.sim_time < spec.horizon and (max_steps is None or steps < max_steps):
            state = make_state(world.tcp_pos, Rotation.from_matrix(world.tcp_rotmat).as_rotvec(), world.gripper_coord)
            action = expert.act(SceneView.from_ground_truth(world.ground_truth()), state)
            recorder.observe(
                world.tcp_pos,
                Rotation.from_quat(world.hand_quat).as_rotvec(),
                world.finger_qpos,
                world.arm_q,
                np.concatenate([world.finger_qpos, world.tcp_pos, world.hand_quat]),
            )
            recorder.act(action)
            world.step_action(action)
            steps += 1
            if world.evaluate()["SR"] == 1.0:
                break
        metrics = world.evaluate()
        attrs = {**spec.to_dict(), "task_spec": spec.to_json(), **outcome_attrs(metrics), "robot": "Panda"}
        demo = recorder.demo(name, attrs)
    finally:
        world.close()
    return PandaDemo(demo, metrics)


def write_panda_demos(path: Path, specs: Sequence[TaskSpec], max_steps: int | None = None) -> list[dict]:
    """Write one demo per spec into a new LIBERO-layout file; returns each demo's metrics."""

    def record(spec: TaskSpec, name: str) -> tuple[Demo, dict]:
        result = run_panda_demo(spec, name, max_steps)
        return result.demo, result.metrics

    return write_episodes(path, specs, record, ENV_ARGS)


def main(argv: Sequence[str] | None = None) -> int:
    args = episodes_parser(__doc__).parse_args(argv)
    specs = [panda_task(s, args.speed) for s in args.seeds]
    return report_episodes(args.out, args.seeds, write_panda_demos(args.out, specs, args.max_steps))


if __name__ == "__main__":
    raise SystemExit(main())
