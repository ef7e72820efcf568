"""AUBO demonstrations of the workcell task on the simulated workcell, in LIBERO's HDF5 layout.

``python -m sim_bridge.aubo_demos OUT.hdf5 [--seeds 0 1 2] [--speed 0.03] [--max-steps N] [--no-images]``
runs the scripted expert on the simulated AUBO (in one process, sim time: :func:`sim_bridge.episode.run_episode`)
and writes one demo per seed with the keys of :mod:`libero_workcell.libero_format`: ``obs/ee_pos`` and
``obs/ee_ori`` the TCP's, ``obs/gripper_states`` the gripper coordinate, ``obs/joint_states`` the six
joints, the images as robosuite returns them (the upright view flipped vertically), the task
configuration and the outcome in the attributes. These are what sim-in-the-loop replay and the
training-data tools are tested on; the teleop recorder writes the same layout on the ROS graph.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from aubo_bridge.config import ArmConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.image_convention import ENV_ARGS_TEXT, ROBOSUITE_RAW
from libero_workcell.libero_format import Demo, write_demo_file
from sim_bridge.demo_recorder import DemoRecorder, outcome_attrs
from sim_bridge.episode import SimRig, expert_source, run_episode
from sim_bridge.expert import ExpertConfig, ScriptedExpert
from sim_bridge.replay import AUBO
from sim_bridge.retarget import FOLLOWABLE_SPEED
from sim_bridge.task import TaskSpec

ENV_ARGS = {
    "env_name": "libero_industry_workcell_d2s",
    "robot": AUBO,
    "controller": "aubo_bridge libero action response (robosuite OSC_POSE's, fitted)",
    "control_freq": CONTROL_HZ_DEFAULT,
    "images": ENV_ARGS_TEXT[ROBOSUITE_RAW],
}


def followable_expert() -> ScriptedExpert:
    """The scripted expert slowed to a path the retargeting law follows closely (closed-loop replay, tests)."""
    return ScriptedExpert(ExpertConfig(max_speed=FOLLOWABLE_SPEED,
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
        recorder.act(action)

    result = run_episode(spec, expert_source(expert), arm, render, on_step=on_step, max_steps=max_steps,
                         camera_hz=0.0)  # fmt: skip
    assert recorder is not None
    attrs = {**spec.to_dict(), "task_spec": spec.to_json(), "robot": AUBO, **outcome_attrs(result.metrics)}
    return recorder.demo(name, attrs), result.metrics


def write_aubo_demos(
    path: Path, specs: Sequence[TaskSpec], max_steps: int | None = None, render: bool = True, followable: bool = False
) -> list[dict]:
    """One demo per spec into a new LIBERO-layout file; each demo's metrics."""
    outcomes: list[dict] = []

    def demos():
        for i, spec in enumerate(specs):
            expert = followable_expert() if followable else None
            demo, metrics = record_expert_demo(spec, f"demo_{i}", render, max_steps, expert=expert)
            outcomes.append(metrics)
            yield demo

    write_demo_file(path, demos(), {"language_instruction": specs[0].language_instruction}, ENV_ARGS)
    return outcomes


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--speed", type=float, default=0.03, help="belt speed, m/s")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--no-images", action="store_true", help="skip the camera images (faster, smaller)")
    ap.add_argument(
        "--followable",
        action="store_true",
        help=f"expert at <= {FOLLOWABLE_SPEED} m/s, a path closed-loop replay follows closely",
    )
    args = ap.parse_args(argv)
    specs = [TaskSpec.from_seed(s, belt_speed=args.speed) for s in args.seeds]
    outcomes = write_aubo_demos(args.out, specs, args.max_steps, render=not args.no_images, followable=args.followable)
    for seed, m in zip(args.seeds, outcomes, strict=True):
        print(f"seed {seed}: SR {m['SR']:.0f} PCR_T {m['PCR_T']:.2f} PCR_S {m['PCR_S']:.2f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
