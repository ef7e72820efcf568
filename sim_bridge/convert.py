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

from aubo_bridge.config import ArmConfig
from aubo_bridge.kinematics import HOME_Q, ik
from libero_workcell.contract import SOURCE_POLICY
from libero_workcell.libero_format import Demo, LiberoFormatError
from sim_bridge.demo_recorder import DemoRecorder, outcome_attrs
from sim_bridge.episode import make_sim_rig
from sim_bridge.panda.model import HAND_TO_GRIP_SITE
from sim_bridge.retarget import Tracking, follow, path_from_demo
from sim_bridge.task import TaskSpec


@dataclass(frozen=True)
class Converted:
    demo: Demo
    tracking: Tracking
    metrics: dict  # the AUBO episode's outcome
    source_placed: list[bool] | None  # the Panda demo's, when it recorded them

    @property
    def same_outcome(self) -> bool | None:
        return None if self.source_placed is None else list(self.metrics["placed"]) == list(self.source_placed)


def task_of(demo: Demo) -> TaskSpec:
    if "task_spec" not in demo.attrs:
        raise LiberoFormatError(f"{demo.name}: no 'task_spec' attribute: which workcell task it shows is unknown")
    return TaskSpec.from_json(str(demo.attrs["task_spec"]))


def convert_demo(demo: Demo, spec: TaskSpec | None = None, render: bool = True, arm: ArmConfig | None = None):
    """One Panda demo as an AUBO demo (see the module docstring)."""
    spec = spec or task_of(demo)
    # ee_ori of a Panda demo (LIBERO's, or this project's Panda source) is the hand's; of an AUBO demo, the TCP's.
    path = path_from_demo(demo, None if demo.attrs.get("robot") == "AUBO-i5H" else HAND_TO_GRIP_SITE)
    cfg = arm or ArmConfig()
    start = ik(path.pos[0], path.R[0], HOME_Q, cfg.tool_offset, 200, cfg.ik_pos_tol, cfg.ik_rot_tol)
    if not start.converged:
        raise ValueError(f"{demo.name}: the AUBO cannot reach the demo's first TCP pose {path.pos[0].round(3)}")
    rig = make_sim_rig(spec, cfg, render, active_source=SOURCE_POLICY, start_q=start.q, camera_hz=0.0)
    world, driver = rig.world, rig.driver
    recorder = DemoRecorder(world, render)

    def observe() -> tuple[np.ndarray, np.ndarray]:
        s = driver.status()
        return s.tcp_pos, Rotation.from_rotvec(s.tcp_rotvec).as_matrix()

    def step(action: np.ndarray) -> None:
        s = driver.status()
        quat = Rotation.from_rotvec(s.tcp_rotvec).as_quat()
        recorder.observe(s.tcp_pos, s.tcp_rotvec, [s.gripper], s.q, np.concatenate([[s.gripper], s.tcp_pos, quat]))
        res = driver.submit_action(action, SOURCE_POLICY)
        if not res.accepted:
            raise RuntimeError(f"{demo.name}: the arm driver rejected a retargeted action: {res.reason}")
        for _ in range(rig.servo_per_control):
            rig.servo_tick()

    try:
        tracking = follow(path, observe, step)
        metrics = world.evaluate()
    finally:
        world.close()
    attrs = {**{k: v for k, v in demo.attrs.items() if k not in ("num_samples", "placed", "SR", "PCR_T", "PCR_S")},
             "robot": "AUBO-i5H", "source_demo": demo.name, "tracking_pos_rms_m": tracking.pos_rms,
             "tracking_rot_rms_deg": float(np.degrees(tracking.rot_rms)), **outcome_attrs(metrics)}  # fmt: skip
    converted = recorder.demo(demo.name, attrs, tracking.actions)
    source = demo.attrs.get("placed")
    placed = None if source is None else [bool(p) for p in (source if isinstance(source, list) else _json(source))]
    return Converted(converted, tracking, metrics, placed)


def _json(text: object) -> list:
    import json

    return list(json.loads(str(text)))
