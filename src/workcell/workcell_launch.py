"""The workcell launch description, shared by ``launch/sim_workcell.launch.py`` and ``real_workcell.launch.py``.

Thin over data: the launch arguments, nodes and parameters come from
``config/workcell.yaml`` through :mod:`workcell.bringup`, the same
definition ``workcell bringup`` runs where launch_ros is not installed. With
``loopback_dds:=true`` DDS is confined to 127.0.0.1 with the package's Fast
DDS profile, on the inherited ROS_DOMAIN_ID or, if none is set, a free per-run
one that is printed at start; either is claimed machine-wide for as long as the
launch runs, as ``workcell bringup`` claims its own (one another graph holds
stops the launch). As with ``workcell bringup``, a node that exits shuts the
whole graph down.

Per-node overrides (``aubo_bridge.arcs.ip:=...``) are applied as ``workcell bringup``
applies them, and an unknown node or parameter stops the launch with the same error.

``launch`` and ``launch_ros`` are imported when a description is generated,
not at module import: they exist on a robot PC with ROS 2, not as wheels.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from libero_workcell import dds
from workcell import bringup, run_registry

GRAPH_FILE = "workcell.yaml"
# The domains this launch process holds (released when it ends, however it ends): a launch runs one graph, and
# launching its description again in the same process (an include, a test) keeps the domain it already holds.
_CLAIMS: dict[int, dds.DomainClaim] = {}


def graph_domain(environment: Mapping[str, str] | None = None) -> int:
    """The domain the launched graph runs on, claimed machine-wide for the life of this process: the launch's
    inherited ROS_DOMAIN_ID exactly, else a free per-run one; :class:`bringup.GraphError` when another graph (or
    worker) holds the inherited one."""
    inherited = dds.inherited_domain_id(environment)
    if inherited in _CLAIMS or (inherited is None and _CLAIMS):
        return inherited if inherited is not None else next(iter(_CLAIMS))
    try:
        claim = run_registry.claim_graph_domain(None, environment)
    except RuntimeError as exc:  # dds.DomainHeldError (naming the graph that holds it), or every id is held
        raise bringup.GraphError(str(exc)) from None
    _CLAIMS[claim.domain_id] = claim
    return claim.domain_id


def _graph(launch_dir: Path) -> bringup.Graph:
    # launch/ and config/ are siblings both in the source tree and in share/libero_workcell/.
    beside = launch_dir.parent / "config" / GRAPH_FILE
    return bringup.Graph.load(beside if beside.is_file() else GRAPH_FILE)


def workcell_launch_description(launch_dir: Path, defaults: Mapping[str, Any] | None = None, job: str = ""):
    """The LaunchDescription: graph arguments (with ``defaults`` replacing the graph's) and its nodes; ``job`` (the
    launch file's name) names the graph in its run record."""
    from launch import LaunchDescription
    from launch.actions import (
        DeclareLaunchArgument,
        LogInfo,
        OpaqueFunction,
        SetEnvironmentVariable,
        Shutdown,
        UnsetEnvironmentVariable,
    )
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    graph = _graph(launch_dir)
    defaults = dict(defaults or {})
    unknown = set(defaults) - set(graph.arguments)
    if unknown:
        raise bringup.GraphError(f"launch defaults name unknown arguments {sorted(unknown)}")

    def actions(context, *args, **kwargs):
        overrides = {name: LaunchConfiguration(name).perform(context) for name in graph.arguments}
        # ros2 launch keeps every NAME:=VALUE it was given as a launch configuration, declared or not
        # (IncludeLaunchDescription): the per-node ones (NODE.PARAM) go through the graph exactly
        # as under `workcell bringup`, applied or refused with its error, never dropped.
        overrides |= {k: v for k, v in context.launch_configurations.items() if "." in k}
        values = graph.argument_values(overrides)
        specs = graph.resolve(overrides)
        out = []
        if values.get("loopback_dds", False):
            domain = graph_domain(getattr(context, "environment", None))  # the launch's own env
            graph_name = run_registry.unique_name(job or "workcell", domain)
            out += [UnsetEnvironmentVariable(name=name) for name in dds.CONFLICTING_VARS]
            out += [SetEnvironmentVariable(name=k, value=v) for k, v in dds.loopback_vars(domain).items()]
            out.append(LogInfo(msg=f"graph {graph_name}: loopback DDS on ROS_DOMAIN_ID={domain} "
                                   f"({dds.profile_path()})"))
            # where `workcell call` / `status` find this graph (the record goes stale when this process ends)
            run_registry.announce(run_registry.GraphRecord(
                domain, os.getpid(), time.time(), bool(values.get("use_sim", True)), job,
                str(values.get("cell", "")), tuple(spec.name for spec in specs), graph_name))  # fmt: skip
        for spec in specs:
            out.append(
                Node(
                    package=bringup.PACKAGE,
                    executable=spec.executable,
                    name=spec.name,
                    parameters=[dict(spec.parameters)],
                    output="screen",
                    # like `workcell bringup`: a node the cell needs stops the graph; an observer's end is said
                    on_exit=LogInfo(msg=f"node {spec.name} exited; it only watches the cell: the graph runs on "
                                        "without it") if spec.observer else Shutdown(reason=f"node {spec.name} exited"),
                )
            )
        return out

    declared = [
        DeclareLaunchArgument(
            name,
            default_value=bringup.launch_text(defaults.get(name, arg.default)),
            description=arg.description,
        )
        for name, arg in graph.arguments.items()
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=actions)])
