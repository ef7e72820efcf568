"""The CTAG2F90D as the gripper registry lists it: stroke, fingers, and its two transport paths.

Its node parameters keep the names they had before the registry: ``gripper.*`` on its own RS-485 adapter,
``gripper_tool.*`` on the arm's tool flange.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any, Final

from gripper.base import GripperBackend
from gripper.model import TOOL_SESSION_FIELDS, GripperModel, GripperPath

NAME: Final = "ctag2f90d"


def _modbus(params: dict[str, Any]) -> GripperBackend:
    from gripper.ctag.modbus_backend import CtagConfig, CtagGripperBackend

    return CtagGripperBackend(CtagConfig.from_mapping(params))


def _tool(params: dict[str, Any]) -> GripperBackend:
    from gripper.ctag.hosted import HostedToolGripper
    from gripper.ctag.tool_backend import CtagToolConfig

    # The SDK holds the GIL for every RPC: the tool gripper runs in a process of its own.
    hosted = HostedToolGripper(CtagToolConfig.from_mapping(params))
    hosted.connect()
    return hosted


@cache
def _paths() -> Mapping[str, GripperPath]:
    from gripper.ctag.modbus_backend import CtagConfig
    from gripper.ctag.probe import MODBUS_PROBE
    from gripper.ctag.tool_backend import CtagToolConfig

    tool = {k: v for k, v in CtagToolConfig.parameter_defaults().items() if k not in TOOL_SESSION_FIELDS}
    return {
        "modbus": GripperPath("gripper", CtagConfig.parameter_defaults(), _modbus, MODBUS_PROBE),
        "tool": GripperPath("gripper_tool", tool, _tool),
    }


MODEL: Final = GripperModel(name=NAME, stroke=0.090, fingers=2, load_paths=_paths)
