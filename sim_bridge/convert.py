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
from libero_workcell.contract import SOURCE_POLICY
from libero_workcell.libero_format import Demo
from sim_bridge.demo_recorder import DemoRecorder, outcome_attrs
from sim_bridge.episode import make_sim_rig
from sim_bridge.replay import recorded_placed, start_joints, task_of, tcp_path
from sim_bridge.retarget import Tracking, follow
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


def convert_demo(demo: Demo, spec: TaskSpec | None = None, render: bool = True, arm: ArmConfig | None = None):
    """One Panda demo as an AUBO demo (see the module docstring)."""
    spec = spec or task_of(demo)
    path = tcp_path(demo)
    cfg = arm or ArmConfig()
    start_q = start_joints(demo, path, cfg)
    rig = make_sim_rig(spec, cfg, render, active_source=SOURCE_POLICY, start_q=start_q, camera_hz=0.0)
    world, driver = rig.world, rig.driver
    recorder = DemoRecorder(world, render)

    def observe() -> tuple[np.ndarray, np.ndarray]:
        s = driver.status()
        return s.tcp_pos, Rotation.from_rotvec(s.tcp_rotvec).as_matrix()

    def step(action: np.ndarray) -> None:
        recorder.observe_arm(driver.status())
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
    return Converted(converted, tracking, metrics, recorded_placed(demo))
