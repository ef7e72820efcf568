"""What the workcell needs to know about a gripper model: its stroke, its fingers, and how each transport
path builds its backend.

A model's numbers (stroke, fingers) are read by jobs and the simulated scene, which must not pay for the
drivers' imports (pymodbus, the ARCS SDK); so a model's transport paths are loaded only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gripper.base import GripperBackend

# How a gripper can be wired to the workcell: ``modbus``, its own RS-485 adapter driven from this machine;
# ``tool``, the arm's tool-flange RS-485 with the arm controller as the Modbus master.
PATHS: Final = ("modbus", "tool")
# A gripper on the tool flange talks to the arm's controller: these settings of its controller session are the
# arm's (``arcs.*``), never parameters of its own that could disagree with them.
TOOL_SESSION_FIELDS: Final = ("ip", "rpc_port", "user", "password", "connect_timeout", "request_timeout")


@dataclass(frozen=True)
class ReadOnlyProbe:
    """How ``workcell check`` looks at a gripper on one path before any node runs: reads only (a gripper's enable
    runs a calibration stroke), never enables or moves it."""

    describe: Callable[[dict[str, Any]], str]  # {field: value} -> the device they name; ValueError if they are bad
    # ({field: value}, timeout s) -> (answered, what it answered or why not, what to do about it)
    read: Callable[[dict[str, Any], float], tuple[bool, str, str]]


@dataclass(frozen=True)
class GripperPath:
    """One way a model is wired: its node parameters (``prefix.field``) and how they become a backend."""

    prefix: str  # the aubo_bridge node's parameters for this path are ``prefix.<field>``
    defaults: Mapping[str, Any]  # field -> default (the ``tool`` path's leave out TOOL_SESSION_FIELDS)
    build: Callable[[dict[str, Any]], GripperBackend]  # {field: value} -> a connected backend, or an exception
    # the preflight's look at it; None: the bridge checks it at start (e.g. through the arm controller, where a
    # read means adding Modbus signals there)
    probe: ReadOnlyProbe | None = None


@dataclass(frozen=True)
class GripperModel:
    """A gripper model as the registry lists it (:mod:`gripper.registry`)."""

    name: str
    stroke: float  # m between the fingers from fully closed (coordinate 1) to fully open (coordinate 0)
    fingers: int  # symmetric fingers sharing the stroke (the simulated scene gives each stroke / fingers)
    load_paths: Callable[[], Mapping[str, GripperPath]]  # path name (one of PATHS) -> how; imports the drivers

    @property
    def finger_stroke(self) -> float:
        """m each finger travels (the simulated scene's slide joints)."""
        return self.stroke / self.fingers

    def path(self, name: str) -> GripperPath:
        """How this model is wired on ``name``, or a ValueError naming the paths it has."""
        paths = self.load_paths()
        if name not in paths:
            raise ValueError(f"gripper_path must be one of {tuple(paths)} for gripper model {self.name}, "
                             f"got {name!r}")  # fmt: skip
        return paths[name]
