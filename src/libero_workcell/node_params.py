"""Device configs as ROS parameters: one ``prefix.field`` parameter per config dataclass field.

Each device config (ArmConfig, ArcsConfig, CtagConfig, RealSenseConfig, ...)
knows its fields and defaults (``parameter_defaults()``); a node declares
them under a prefix and builds the config back from the values, so no
parameter name is typed twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def prefixed(prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``{prefix.name: default}`` (no prefix: the names as they are)."""
    return {f"{prefix}.{k}" if prefix else k: v for k, v in defaults.items()}


def declare_config(node: Any, prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """Declare ``prefix.field`` parameters on ``node``; return ``{field: value}`` as configured."""
    for name, value in prefixed(prefix, defaults).items():
        node.declare_parameter(name, value)
    return {k: node.get_parameter(f"{prefix}.{k}" if prefix else k).value for k in defaults}
