"""Device configs as ROS parameters: one ``prefix.field`` parameter per config dataclass field.

Each device config (ArmConfig, ArcsConfig, CtagConfig, RealSenseConfig, ...)
knows its fields and defaults (``parameter_defaults()``); a node declares
them under a prefix and builds the config back from the values, so no
parameter name is typed twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any


def prefixed(prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``{prefix.name: default}`` (no prefix: the names as they are)."""
    return {f"{prefix}.{k}" if prefix else k: v for k, v in defaults.items()}


def declare_all(node: Any, parameters: Mapping[str, Any]) -> None:
    """Declare every parameter of a node from its module's ``PARAMETERS`` (name -> default): the one list the
    graph checks ``NODE.PARAM:=VALUE`` overrides and cell files against (:mod:`workcell.bringup`)."""
    for name, value in parameters.items():
        node.declare_parameter(name, value)


def declare_config(node: Any, prefix: str, defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``{field: value}`` of the ``prefix.field`` parameters on ``node`` as configured (declared here unless
    :func:`declare_all` did already)."""
    for name, value in prefixed(prefix, defaults).items():
        if not node.has_parameter(name):
            node.declare_parameter(name, value)
    return {k: node.get_parameter(f"{prefix}.{k}" if prefix else k).value for k in defaults}


def fixed_at_startup(params: Iterable[Any], changeable: Collection[str] = ()) -> str | None:
    """Why a run-time change must be refused, or None: every parameter not in ``changeable`` is
    read once at start-up (devices, rates, limits), so "successful" would be a lie."""
    names = sorted({p.name for p in params} - set(changeable))
    if not names:
        return None
    which = "it" if len(names) == 1 else "them"
    return f"{', '.join(names)}: read once at start-up; restart the node to change {which}"


def refuse_runtime_changes(node: Any) -> None:
    """Make ``node`` refuse every run-time parameter change, with the reason (a node that reads
    all its parameters once at start-up: without this, ROS answers "successful" and nothing happens)."""
    from rcl_interfaces.msg import SetParametersResult

    def refuse(params: list[Any]) -> SetParametersResult:
        return SetParametersResult(successful=False, reason=fixed_at_startup(params) or "")

    node.add_on_set_parameters_callback(refuse)
