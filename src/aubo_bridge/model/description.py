"""AUBO-i5H kinematic description: the one home of the URDF numbers.

Joint origins and limits are those of AuboRobot/aubo_description
``urdf/aubo_i5H.urdf`` (docs/hardware.md). Every joint is revolute
about its local z axis. The kinematics module and the MuJoCo world are both
built from this table, so they cannot drift apart.

The TCP is the CTAG2F90D ``grip_site``: a pure translation along the flange
(wrist3 link) z axis. Its length is not published; ``TOOL_OFFSET`` is the
default and the arm config may override it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from libero_workcell.contract import ARM_JOINT_NAMES


@dataclass(frozen=True)
class JointOrigin:
    name: str
    xyz: tuple[float, float, float]
    rpy: tuple[float, float, float]


PI: Final = float(np.pi)

JOINT_ORIGINS: Final = (
    JointOrigin(ARM_JOINT_NAMES[0], (0.0, 0.0, 0.122), (0.0, 0.0, PI)),
    JointOrigin(ARM_JOINT_NAMES[1], (0.0, 0.1215, 0.0), (-PI / 2, -PI / 2, 0.0)),
    JointOrigin(ARM_JOINT_NAMES[2], (0.408, 0.0, 0.0), (-PI, 0.0, 0.0)),
    JointOrigin(ARM_JOINT_NAMES[3], (0.376, 0.0, 0.0), (PI, 0.0, PI / 2)),
    JointOrigin(ARM_JOINT_NAMES[4], (0.0, 0.1025, 0.0), (-PI / 2, 0.0, 0.0)),
    JointOrigin(ARM_JOINT_NAMES[5], (0.0, -0.094, 0.0), (PI / 2, 0.0, 0.0)),
)

JOINT_LIMITS: Final = np.array([[-2 * PI, 2 * PI]] * 6)  # rad, i5H
JOINT_VELOCITY_LIMITS: Final = np.array([3.892, 3.892, 3.892, 4.136, 4.136, 4.136])  # rad/s

# Flange (wrist3 link) -> grip_site, metres along flange z. Unpublished for
# the CTAG2F90D: flange adapter + gripper body + half the finger length.
TOOL_OFFSET: Final = np.array([0.0, 0.0, 0.17])
