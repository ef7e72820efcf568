"""The Panda alone (robosuite's model and options, no scene), stepped as robosuite steps it.

One control step = the OSC goal set once from the action, then 25 physics steps of 2 ms, each
with fresh OSC torques and gripper command (robosuite's ``env.step`` at control_freq 20). Starts
from robosuite's Panda ``init_qpos`` with the gripper at its initial opening. Used to hold this
project's OSC against robosuite's measured response, and as the simplest Panda source.
"""

from __future__ import annotations

from typing import Final

import mujoco
import numpy as np

from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.osc_law import OscConfig
from sim_bridge.panda.model import ARM_JOINTS, GRIPPER_JOINTS, INIT_QPOS, TIMESTEP, standalone_model
from sim_bridge.panda.osc import PandaOsc

GRIPPER_INIT_QPOS: Final = (0.020833, -0.020833)  # robosuite's PandaGripper.init_qpos


class StandalonePanda:
    def __init__(self, config: OscConfig | None = None, control_hz: float = CONTROL_HZ_DEFAULT) -> None:
        self.model = standalone_model()
        self.data = mujoco.MjData(self.model)
        self.substeps = round(1.0 / control_hz / TIMESTEP)
        for name, q in zip((*ARM_JOINTS, *GRIPPER_JOINTS), (*INIT_QPOS, *GRIPPER_INIT_QPOS), strict=True):
            self.data.qpos[self.model.joint(name).qposadr[0]] = q
        self.osc = PandaOsc(self.model, self.data, config)

    def step(self, action: np.ndarray) -> None:
        """One control step of a 7-D action."""
        a = np.asarray(action, float)
        self.osc.set_goal(a)
        for _ in range(self.substeps):
            mujoco.mj_forward(self.model, self.data)
            self.osc.apply(float(a[6]))
            mujoco.mj_step(self.model, self.data)

    def tcp(self) -> tuple[np.ndarray, np.ndarray]:
        mujoco.mj_forward(self.model, self.data)
        return self.osc.tcp_pos, self.osc.tcp_rot
