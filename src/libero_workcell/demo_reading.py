"""What a demo says of itself, read one way by every reader: replay, conversion, the training export, the
evaluation and the preferences.

A demo of the LIBERO layout (libero_workcell.libero_format) carries its task (``task_spec``), its outcome
(``SR``, or ``placed`` per workpiece), the robot that recorded it (``robot``, on the demo or its file's
``env_args``; LIBERO's own are the Panda's) and its TCP path (``obs/ee_pos``, ``obs/ee_ori``, the gripper
column of the actions). A value that is there but is not what it should be is a :class:`LiberoFormatError`
naming it, whoever reads it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.layout import ROBOT
from libero_workcell.libero_format import Demo, LiberoFormatError
from libero_workcell.task import TaskSpec

LIBERO_ROBOT: Final = "Panda"  # the robot of a demo that names none: LIBERO's own demos
# LIBERO's obs/ee_ori (robosuite's robot0_eef_quat) is the Panda hand body's orientation; the grip site its OSC
# tracks is turned -90 deg about the hand's z from it (measured on the assembled model: tests/sim/test_panda_osc.py)
PANDA_HAND_TO_TCP: Final = np.array([[0.0, 1.0, 0.0], [-1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def _json(raw: Any) -> Any:
    return json.loads(raw) if isinstance(raw, str | bytes) else raw


def task_of(attrs: Mapping[str, Any], name: str = "the demo") -> TaskSpec:
    """The workcell task a demo shows (its ``task_spec`` attribute: JSON, or the mapping itself)."""
    raw = attrs.get("task_spec")
    if raw is None:
        raise LiberoFormatError(f"{name}: no 'task_spec' attribute: which workcell task it shows is unknown")
    try:
        return TaskSpec.from_dict(dict(_json(raw)))
    except (TypeError, ValueError) as exc:
        raise LiberoFormatError(f"{name}: its task_spec is not a workcell task: {exc}") from None


def placed_of(attrs: Mapping[str, Any], name: str = "the demo") -> list[bool] | None:
    """The demo's recorded outcome per workpiece (its ``placed`` attribute), None if it records none."""
    raw = attrs.get("placed")
    if raw is None:
        return None
    try:
        return [bool(p) for p in _json(raw)]
    except (TypeError, ValueError):
        raise LiberoFormatError(f"{name}: placed {raw!s:.40} is not a list of outcomes") from None


def outcome_of(attrs: Mapping[str, Any], name: str = "the demo") -> tuple[bool | None, str]:
    """Whether the demo succeeded, and what says so: its ``SR`` (success at 1), else all of ``placed``; (None,
    ...) when it records neither."""
    if "SR" in attrs:
        try:
            sr = float(attrs["SR"])
        except (TypeError, ValueError, OverflowError):
            raise LiberoFormatError(f"{name}: SR {attrs['SR']!s:.40} is not a number") from None
        return sr >= 1.0, f"SR {sr:g}"
    placed = placed_of(attrs, name)
    if placed is not None:
        return all(placed), f"placed {sum(placed)} of {len(placed)}"
    return None, "no recorded outcome"


def robot_of(attrs: Mapping[str, Any], env_args: Mapping[str, Any] | None = None) -> str:
    """Which robot recorded the demo: its own ``robot`` attribute, else its file's (env_args), else LIBERO's."""
    return str(attrs.get("robot") or (env_args or {}).get("robot") or LIBERO_ROBOT)


@dataclass(frozen=True)
class TcpPath:
    """An arm's TCP path, one row per control step: positions (n, 3), rotations (n, 3, 3), gripper (n,)."""

    pos: np.ndarray
    R: np.ndarray
    gripper: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.pos)
        if self.pos.shape != (n, 3) or self.R.shape != (n, 3, 3) or self.gripper.shape != (n,) or n < 2:
            raise ValueError(
                f"a TCP path needs >= 2 steps of pos (n, 3), R (n, 3, 3), gripper (n,); got "
                f"{self.pos.shape}, {self.R.shape}, {self.gripper.shape}"
            )
        for name in ("pos", "R", "gripper"):
            if not np.all(np.isfinite(getattr(self, name))):
                raise ValueError(f"the TCP path's {name} holds non-finite values")

    def mapped_to(self, p0: np.ndarray, R0: np.ndarray) -> TcpPath:
        """The same motion, started from (p0, R0): displacement and rotation relative to the first step."""
        rel_R = np.einsum("nij,kj->nik", self.R, self.R[0])
        return TcpPath(p0 + (self.pos - self.pos[0]), np.einsum("nij,jk->nik", rel_R, R0), self.gripper)


def path_from_demo(demo: Demo, ee_to_tcp: np.ndarray | None = None) -> TcpPath:
    """The path of obs/ee_pos, obs/ee_ori (axis-angle) and the gripper schedule. ``ee_to_tcp``: the fixed
    rotation from the body ee_ori describes to the TCP (None: ee_ori is the TCP's). Relative rotations (what
    :meth:`TcpPath.mapped_to` uses) are the same either way; world-frame following needs the TCP's."""
    R = Rotation.from_rotvec(demo.ee_ori).as_matrix()
    if ee_to_tcp is not None:
        R = R @ np.asarray(ee_to_tcp, float)
    return TcpPath(demo.ee_pos, R, demo.actions[:, 6].copy())


def tcp_path(demo: Demo, robot: str | None = None) -> TcpPath:
    """The demo's TCP path in its base frame (a Panda demo's ee_ori is its hand's: turned to the TCP)."""
    return path_from_demo(demo, None if (robot or robot_of(demo.attrs)) == ROBOT else PANDA_HAND_TO_TCP)
