"""What the robot did, as the preference metrics read it: one row per control step of a demo or rollout.

Everything here is what the physical workcell records as well (the TCP, the gripper command and coordinate,
the task configuration, the outcome); the scene's workpiece poses are used where a recording has them (the
simulated workcell's), never required.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.demo_reading import task_of
from libero_workcell.libero_format import Demo
from libero_workcell.task import TaskSpec


@dataclass(frozen=True)
class Trajectory:
    tcp_pos: np.ndarray  # (T, 3) m, base frame
    tcp_rotvec: np.ndarray  # (T, 3) axis-angle, rad
    grip_command: np.ndarray  # (T,) the action's gripper command: > 0 closes
    gripper_coord: np.ndarray  # (T,) measured coordinate, 0 open .. 1 closed
    task: TaskSpec
    success: bool
    control_hz: float = CONTROL_HZ_DEFAULT
    scene_held: np.ndarray | None = None  # (T, N) bool: workpiece n between the fingers (simulation only)
    name: str = ""

    def __post_init__(self) -> None:
        t = len(self.tcp_pos)
        for key in ("tcp_rotvec", "grip_command", "gripper_coord"):
            if len(getattr(self, key)) != t:
                raise ValueError(f"trajectory {self.name}: {key} has {len(getattr(self, key))} rows, tcp_pos {t}")
        if self.scene_held is not None and self.scene_held.shape != (t, self.task.num_workpieces):
            raise ValueError(f"trajectory {self.name}: scene_held is {self.scene_held.shape}, "
                             f"expected ({t}, {self.task.num_workpieces})")  # fmt: skip

    @property
    def steps(self) -> int:
        return len(self.tcp_pos)

    @property
    def dt(self) -> float:
        return 1.0 / self.control_hz

    def velocity(self) -> np.ndarray:
        """(T, 3) m/s, backward differences (the first row zero)."""
        v = np.zeros_like(self.tcp_pos)
        v[1:] = np.diff(self.tcp_pos, axis=0) * self.control_hz
        return v

    def rotations(self) -> Rotation:
        return Rotation.from_rotvec(self.tcp_rotvec)

    @classmethod
    def from_demo(cls, demo: Demo, control_hz: float = CONTROL_HZ_DEFAULT) -> Trajectory:
        """A demo of the LIBERO layout: its task from the ``task_spec`` attribute, its outcome from ``SR``."""
        task = task_of(demo.attrs, demo.name)
        return cls(demo.ee_pos, demo.ee_ori, demo.actions[:, 6], demo.gripper_states[:, 0], task,
                   bool(float(demo.attrs.get("SR", 0.0)) >= 1.0), control_hz,
                   None if demo.scene_held is None else demo.scene_held.astype(bool), demo.name)  # fmt: skip

