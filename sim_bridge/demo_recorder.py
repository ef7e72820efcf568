"""One demonstration recorded step by step in LIBERO's layout: the observation before each action, the action.

Shared by the Panda source (sim_bridge.panda.demos) and conversion (sim_bridge.convert): both render the
two cameras as robosuite's raw observation holds them and keep their outcome the same way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from libero_workcell.image_convention import ROBOSUITE_RAW, check_convention, stored
from libero_workcell.libero_format import CAMERA_IMAGE_KEYS, Demo, aubo_robot_states, write_demo_file
from libero_workcell.progress import progress_bar
from libero_workcell.task import TaskSpec
from sim_cell.world import SimWorld


def outcome_attrs(metrics: dict[str, Any]) -> dict[str, Any]:
    """An episode's outcome as demo attributes."""
    return {"SR": metrics["SR"], "PCR_T": metrics["PCR_T"], "PCR_S": metrics["PCR_S"],
            "placed": [bool(p) for p in metrics["placed"]]}  # fmt: skip


class DemoRecorder:
    """``convention``: how the images are stored (libero_workcell.image_convention); robosuite's raw by
    default, as LIBERO's files hold them (the Panda source and conversion write that)."""

    def __init__(self, world: SimWorld | None, render: bool, convention: str = ROBOSUITE_RAW) -> None:
        self.world, self.render, self.convention = world, render, check_convention(convention)
        self._rows: dict[str, list] = {k: [] for k in ("actions", "ee_pos", "ee_ori", "grip", "joints", "robot")}
        self._frames: dict[str, list] = {key: [] for key in CAMERA_IMAGE_KEYS.values()}
        self._scene: list[tuple[np.ndarray, np.ndarray]] = []  # per step: workpiece centres (N, 3), held (N,)

    def observe(self, ee_pos, ee_ori, gripper_states, joint_states, robot_state) -> None:
        """One observation (and, when rendering, both cameras now: external -> agentview, wrist -> eye in hand)."""
        for key, value in zip(("ee_pos", "ee_ori", "grip", "joints", "robot"),
                              (ee_pos, ee_ori, gripper_states, joint_states, robot_state), strict=True):  # fmt: skip
            self._rows[key].append(np.asarray(value, float))
        if self.render:
            assert self.world is not None
            for camera, key in CAMERA_IMAGE_KEYS.items():
                self._frames[key].append(stored(self.world.render_camera(camera), self.convention))

    def observe_arm(self, status: Any) -> None:
        """One observation of the AUBO from the arm driver's status (robot_states: gripper, TCP, quat xyzw)."""
        robot = aubo_robot_states([status.gripper], status.tcp_pos, status.tcp_rotvec)[0]
        self.observe(status.tcp_pos, status.tcp_rotvec, [status.gripper], status.q, robot)

    def observe_scene(self, ground_truth: dict) -> None:
        """The workpieces at this observation (the sim's ground truth: scene/ of the demo)."""
        wps = ground_truth["workpieces"]
        self._scene.append((np.array([w["pos"] for w in wps], float), np.array([w["held"] for w in wps], bool)))

    def act(self, action: np.ndarray) -> None:
        self._rows["actions"].append(np.asarray(action, float))

    def demo(self, name: str, attrs: dict[str, Any], actions: np.ndarray | None = None) -> Demo:
        """The recording as a Demo; ``actions`` when they were not recorded with :meth:`act`."""
        r = self._rows
        images = {k: np.array(v) for k, v in self._frames.items()} if self.render else {}
        acts = np.array(r["actions"]) if actions is None else np.asarray(actions, float)
        scene_pos = np.array([p for p, _ in self._scene]) if self._scene else None
        scene_held = np.array([h for _, h in self._scene]) if self._scene else None
        return Demo(name, acts, np.array(r["ee_pos"]), np.array(r["ee_ori"]), np.array(r["grip"]),
                    np.array(r["joints"]), np.array(r["robot"]), images, attrs,
                    scene_pos=scene_pos, scene_held=scene_held)  # fmt: skip


def write_episodes(
    path: Path, specs: Sequence[TaskSpec], record: Callable[[TaskSpec, str], tuple[Demo, dict]], env_args: dict,
    bar: Any = None,
) -> list[dict]:  # fmt: skip
    """One recorded episode per spec (``record(spec, name) -> (demo, metrics)``) into a new LIBERO-layout
    file, complete or absent (libero_format.write_demo_file); each episode's metrics. Progress: ``bar`` (a
    libero_workcell.progress bar, one step per episode), else a bar of this file's episodes on stderr."""
    outcomes: list[dict] = []
    own = bar is None
    bar = progress_bar(len(specs), "episodes", "episode") if own else bar

    def demos():
        for i, spec in enumerate(specs):
            demo, metrics = record(spec, f"demo_{i}")
            outcomes.append(metrics)
            bar.update()
            yield demo

    try:
        write_demo_file(path, demos(), {"language_instruction": specs[0].language_instruction}, env_args)
    finally:
        if own:
            bar.close()
    return outcomes


def episodes_parser(doc: str) -> argparse.ArgumentParser:
    """The command line of the demo makers (sim_bridge.aubo_demos, sim_bridge.panda.demos)."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--speed", type=float, default=0.03, help="belt speed, m/s")
    ap.add_argument("--max-steps", type=int, default=None)
    return ap


def report_episodes(out: Path, seeds: Sequence[int], outcomes: Sequence[dict]) -> int:
    for seed, m in zip(seeds, outcomes, strict=True):
        print(f"seed {seed}: SR {m['SR']:.0f} PCR_T {m['PCR_T']:.2f} PCR_S {m['PCR_S']:.2f}")
    print(f"wrote {out}")
    return 0
