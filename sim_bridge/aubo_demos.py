"""AUBO demonstrations of the workcell task on the simulated workcell, in LIBERO's HDF5 layout.

``python -m sim_bridge.aubo_demos OUT.hdf5 [--seeds 0 1 2] [--speed 0.03] [--max-steps N] [--no-images]``
runs the scripted expert on the simulated AUBO (in one process, sim time: :func:`sim_cell.episode.run_episode`)
and writes one demo per seed with the keys of :mod:`libero_workcell.libero_format`: ``obs/ee_pos`` and
``obs/ee_ori`` the TCP's, ``obs/gripper_states`` the gripper coordinate, ``obs/joint_states`` the six
joints, the images as robosuite returns them (the upright view flipped vertically), the task
configuration and the outcome in the attributes. These are what sim-in-the-loop replay and the
training-data tools are tested on; the teleop recorder writes the same layout on the ROS graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aubo_bridge.config import ArmConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.image_convention import ENV_ARGS_TEXT, ROBOSUITE_RAW
from libero_workcell.libero_format import Demo
from libero_workcell.task import TaskSpec
from preferences.scoring import annotate
from sim_bridge.demo_recorder import DemoRecorder, episodes_parser, outcome_attrs, report_episodes, write_episodes
from sim_bridge.retarget import FOLLOWABLE_SPEED
from sim_cell.episode import SimRig, expert_source, run_episode
from sim_cell.expert import ExpertConfig, ScriptedExpert
from sim_cell.replay import AUBO

ENV_ARGS = {
    "env_name": "libero_industry_workcell_d2s",
    "robot": AUBO,
    "controller": "aubo_bridge libero action response (robosuite OSC_POSE's, fitted)",
    "control_freq": CONTROL_HZ_DEFAULT,
    "images": ENV_ARGS_TEXT[ROBOSUITE_RAW],
}


def followable_expert(descend_speed: float = 0.05) -> ScriptedExpert:
    """The scripted expert slowed to a path the retargeting law follows closely (closed-loop replay, tests).

    It comes down onto a part at 0.05 m/s: the law corrects a step late, and faster (0.1 m/s) the follower
    overshot the last descent's reversal by about 10 mm, closed the fingers on the part's edge and, pushed
    by the belt, tore away into a following-error fault."""
    return ScriptedExpert(ExpertConfig(max_speed=FOLLOWABLE_SPEED, descend_speed=descend_speed,
                                       carry_speed=min(FOLLOWABLE_SPEED, ExpertConfig().carry_speed)))  # fmt: skip


def record_expert_demo(
    spec: TaskSpec, name: str = "demo_0", render: bool = True, max_steps: int | None = None,
    arm: ArmConfig | None = None, expert: ScriptedExpert | None = None,
) -> tuple[Demo, dict]:  # fmt: skip
    """One scripted-expert episode on the simulated AUBO, recorded step by step; the demo and its metrics."""
    recorder: DemoRecorder | None = None

    def on_step(rig: SimRig, action: np.ndarray, state: np.ndarray) -> None:
        nonlocal recorder
        recorder = recorder or DemoRecorder(rig.world, render)
        recorder.observe_arm(rig.driver.status())
        recorder.observe_scene(rig.world.ground_truth())
        recorder.act(action)

    result = run_episode(spec, expert_source(expert), arm, render, on_step=on_step, max_steps=max_steps,
                         camera_hz=0.0)  # fmt: skip
    assert recorder is not None
    attrs = {**spec.to_dict(), "task_spec": spec.to_json(), "robot": AUBO, **outcome_attrs(result.metrics)}
    return annotate(recorder.demo(name, attrs)), result.metrics


def write_aubo_demos(
    path: Path, specs: Sequence[TaskSpec], max_steps: int | None = None, render: bool = True, followable: bool = False
) -> list[dict]:
    """One demo per spec into a new LIBERO-layout file; each demo's metrics."""

    def record(spec: TaskSpec, name: str) -> tuple[Demo, dict]:
        return record_expert_demo(spec, name, render, max_steps, expert=followable_expert() if followable else None)

    return write_episodes(path, specs, record, ENV_ARGS)


def main(argv: Sequence[str] | None = None) -> int:
    ap = episodes_parser(__doc__)
    ap.add_argument("--no-images", action="store_true", help="skip the camera images (faster, smaller)")
    ap.add_argument("--followable", action="store_true",
                    help=f"expert at <= {FOLLOWABLE_SPEED} m/s, a path closed-loop replay follows closely")  # fmt: skip
    args = ap.parse_args(argv)
    specs = [TaskSpec.from_seed(s, belt_speed=args.speed) for s in args.seeds]
    outcomes = write_aubo_demos(args.out, specs, args.max_steps, render=not args.no_images, followable=args.followable)
    return report_episodes(args.out, args.seeds, outcomes)


if __name__ == "__main__":
    raise SystemExit(main())
