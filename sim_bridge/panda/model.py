"""The Panda as robosuite 1.4.0 assembles it: arm + Panda gripper, with robosuite's joint defaults.

robosuite's ``RobotModel`` adds what its ``robot.xml`` leaves out: frictionloss 0.1 and armature
5 / (i + 1) on arm joint i (0-based), and the Panda sets its joint damping to 0.1 (joints 1-5) and
0.01 (6-7); the gripper is attached at the ``right_hand`` body with the prefix ``gripper0_``, and
``gripper0_grip_site`` (between the fingertips) is the TCP its OSC tracks. The world options are
robosuite's (2 ms step, elliptic cones, impratio 20). :func:`attach_panda` mounts that arm in any
``MjSpec`` (the workcell's, or an empty one for the controller tests).
"""

from __future__ import annotations

from typing import Final

import mujoco
import numpy as np

from sim_bridge.panda.assets import panda_assets

# Names in the assembled world: robosuite's robot prefix, then the gripper's inside it.
ROBOT_PREFIX: Final = "robot0_"
GRIPPER_PREFIX: Final = "gripper0_"
_JOINTS: Final = tuple(f"joint{i}" for i in range(1, 8))
ARM_JOINTS: Final = tuple(ROBOT_PREFIX + n for n in _JOINTS)
ARM_ACTUATORS: Final = tuple(f"{ROBOT_PREFIX}torq_j{i}" for i in range(1, 8))
_G: Final = ROBOT_PREFIX + GRIPPER_PREFIX
GRIPPER_JOINTS: Final = (f"{_G}finger_joint1", f"{_G}finger_joint2")
GRIPPER_ACTUATORS: Final = (f"{_G}gripper_finger_joint1", f"{_G}gripper_finger_joint2")
GRIP_SITE: Final = f"{_G}grip_site"
HAND_BODY: Final = "right_hand"
BASE_BODY: Final = f"{ROBOT_PREFIX}base"
# robosuite's Panda.init_qpos: the pose LIBERO's episodes start from.
INIT_QPOS: Final = np.array([0.0, np.pi / 16.0, 0.0, -np.pi / 2.0 - np.pi / 3.0, 0.0, np.pi - 0.2, np.pi / 4])
ARM_DAMPING: Final = (0.1, 0.1, 0.1, 0.1, 0.1, 0.01, 0.01)
ARM_FRICTIONLOSS: Final = 0.1
ARM_ARMATURE: Final = tuple(5.0 / (i + 1) for i in range(7))
TIMESTEP: Final = 0.002


def panda_spec() -> mujoco.MjSpec:
    """robosuite's Panda arm with its gripper, as an MjSpec ready to attach (or compile alone)."""
    root = panda_assets()
    arm = mujoco.MjSpec.from_file(str(root / "robots" / "panda" / "robot.xml"))
    gripper = mujoco.MjSpec.from_file(str(root / "grippers" / "panda_gripper.xml"))
    for part in (arm, gripper):  # robosuite compiles with angle="radian" (its base.xml); MJCF's default is degrees
        part.compiler.degree = False
    for name, damping, armature in zip(_JOINTS, ARM_DAMPING, ARM_ARMATURE, strict=True):
        joint = arm.joint(name)
        joint.damping[0] = damping
        joint.armature = armature
        joint.frictionloss = ARM_FRICTIONLOSS
    arm.attach(gripper, prefix=GRIPPER_PREFIX, frame=arm.body(HAND_BODY).add_frame())
    return arm


def robosuite_options(spec: mujoco.MjSpec) -> None:
    """robosuite's world options (models/assets/base.xml)."""
    spec.compiler.degree = False
    spec.option.timestep = TIMESTEP
    spec.option.impratio = 20.0
    spec.option.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
    spec.option.density = 1.2
    spec.option.viscosity = 2e-5


def attach_panda(spec: mujoco.MjSpec, pos: np.ndarray, quat_wxyz: np.ndarray | None = None) -> None:
    """Mount the Panda's base at ``pos`` / ``quat_wxyz`` (default: unrotated) in ``spec``'s world."""
    quat = np.array([1.0, 0.0, 0.0, 0.0]) if quat_wxyz is None else np.asarray(quat_wxyz, float)
    frame = spec.worldbody.add_frame(pos=np.asarray(pos, float), quat=quat)
    spec.attach(panda_spec(), prefix=ROBOT_PREFIX, frame=frame)


def standalone_model() -> mujoco.MjModel:
    """The Panda alone at the world origin with robosuite's options (controller tests, response checks)."""
    spec = mujoco.MjSpec()
    robosuite_options(spec)
    attach_panda(spec, np.zeros(3))
    return spec.compile()
