"""The simulated workcell: ``ros2 launch libero_workcell sim_workcell.launch.py [ARG:=VALUE ...]``.

Thin over data: the launch arguments, nodes and parameters come from
``config/workcell.yaml`` through :mod:`libero_workcell.bringup`, the same
definition ``workcell bringup`` runs where launch_ros is not installed. With
``loopback_dds:=true`` (the default) DDS is confined to 127.0.0.1 with the
package's Fast DDS profile, on the inherited ROS_DOMAIN_ID or, if none is
set, a per-run one that is printed at start. As with ``workcell bringup``, a
node that exits shuts the whole graph down.
"""

# ruff: noqa: I001  (ruff takes `launch` for this repo's launch/ folder and would sort it as first-party)

from pathlib import Path

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

from libero_workcell import bringup, dds

GRAPH_FILE = "workcell.yaml"


def _graph() -> bringup.Graph:
    # launch/ and config/ are siblings both in the source tree and in share/libero_workcell/.
    beside = Path(__file__).resolve().parent.parent / "config" / GRAPH_FILE
    return bringup.Graph.load(beside if beside.is_file() else GRAPH_FILE)


def _actions(context, *args, **kwargs):
    graph = _graph()
    overrides = {name: LaunchConfiguration(name).perform(context) for name in graph.arguments}
    values = graph.argument_values(overrides)
    actions = []
    if values.get("loopback_dds", False):
        domain = dds.inherited_domain_id(getattr(context, "environment", None))  # the launch's own env
        domain = dds.per_run_domain_id() if domain is None else domain
        actions += [UnsetEnvironmentVariable(name=name) for name in dds.CONFLICTING_VARS]
        actions += [SetEnvironmentVariable(name=k, value=v) for k, v in dds.loopback_vars(domain).items()]
        actions.append(LogInfo(msg=f"loopback DDS on ROS_DOMAIN_ID={domain} ({dds.profile_path()})"))
    for spec in graph.resolve(overrides):
        actions.append(
            Node(
                package=bringup.PACKAGE,
                executable=spec.executable,
                name=spec.name,
                parameters=[dict(spec.parameters)],
                output="screen",
                on_exit=Shutdown(reason=f"node {spec.name} exited"),  # like `workcell bringup`: one dies, all stop
            )
        )
    return actions


def generate_launch_description() -> LaunchDescription:
    graph = _graph()
    declared = [
        DeclareLaunchArgument(name, default_value=bringup.launch_text(arg.default), description=arg.description)
        for name, arg in graph.arguments.items()
    ]
    return LaunchDescription([*declared, OpaqueFunction(function=_actions)])
