"""The launch files against the real ``launch`` / ``launch_ros`` (a robot PC's ROS 2), where installed.

CI has no wheels for them, so this module is skipped there and tests/bringup/test_bringup.py runs the
same checks against tests/fixtures/launch_fakes.py. With a ROS 2 install (or the sources of ros2/launch
and ros2/launch_ros on the path) it visits each launch file exactly as ``ros2 launch FILE
ARGS`` does (IncludeLaunchDescription with the arguments, in a real LaunchContext), and
records every Node's resolved name, executable and parameters without starting anything:
no process, no DDS.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import REPO

from workcell.bringup import Graph, GraphError

launch = pytest.importorskip("launch")
launch_ros_actions = pytest.importorskip("launch_ros.actions")
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402


class _ParamsLoader(yaml.SafeLoader):
    """launch_ros dumps list parameters as !!python/tuple."""


_ParamsLoader.add_constructor("tag:yaml.org,2002:python/tuple", lambda loader, node: loader.construct_sequence(node))


def _resolved(node: Any, context: Any) -> tuple[str, str, dict[str, Any]]:
    node._perform_substitutions(context)  # what Node.execute does before it starts the process
    params: dict[str, Any] = {}
    for path, is_file in node._Node__expanded_parameter_arguments or []:
        assert is_file
        with open(path, encoding="utf-8") as f:
            for body in yaml.load(f, Loader=_ParamsLoader).values():
                params.update(body["ros__parameters"])
        os.unlink(path)
    return node.node_name.rsplit("/", 1)[-1], node.node_executable, params


def ros2_launch(launch_file: Path, given: dict[str, str]) -> list[tuple[str, str, dict[str, Any]]]:
    """Visit ``launch_file`` as ``ros2 launch launch_file k:=v ...`` would, recording the nodes."""
    context = launch.LaunchContext()
    include = IncludeLaunchDescription(PythonLaunchDescriptionSource(str(launch_file)), launch_arguments=given.items())
    nodes, todo = [], [include]
    while todo:
        entity = todo.pop(0)
        if isinstance(entity, launch_ros_actions.Node):
            nodes.append(_resolved(entity, context))
            continue
        todo[:0] = list(entity.visit(context) or [])
    return nodes


CASES = [{}, {"expert": "true", "belt_speed": "0.05"}, {"aubo_bridge.active_source": "policy", "sim_world.seed": "3"}]


@pytest.mark.parametrize("given", CASES, ids=lambda g: ",".join(g) or "-")
def test_sim_launch_file_is_the_bringup_graph(given: dict[str, str], monkeypatch) -> None:
    monkeypatch.setenv("ROS_LOG_DIR", str(REPO / "test-output" / "ros_log"))
    nodes = ros2_launch(REPO / "launch" / "sim_workcell.launch.py", given)
    expected = Graph.load().resolve(given)
    assert [(n, e) for n, e, _ in nodes] == [(s.name, s.executable) for s in expected]
    for (_, _, params), spec in zip(nodes, expected, strict=True):
        assert params == {k: (list(v) if isinstance(v, tuple) else v) for k, v in spec.parameters.items()}


def test_real_launch_file_applies_device_overrides(monkeypatch) -> None:
    monkeypatch.setenv("ROS_LOG_DIR", str(REPO / "test-output" / "ros_log"))
    given = {"aubo_bridge.arcs.ip": "127.0.0.1"}
    nodes = {n: p for n, _, p in ros2_launch(REPO / "launch" / "real_workcell.launch.py", given)}
    assert "sim_world" not in nodes
    assert nodes["aubo_bridge"]["arcs.ip"] == "127.0.0.1" and nodes["aubo_bridge"]["use_sim"] is False


def test_an_unknown_per_node_parameter_stops_the_launch(monkeypatch) -> None:
    monkeypatch.setenv("ROS_LOG_DIR", str(REPO / "test-output" / "ros_log"))
    with pytest.raises(GraphError, match="aubo_bridge has no parameter 'no_such_param'"):
        ros2_launch(REPO / "launch" / "sim_workcell.launch.py", {"aubo_bridge.no_such_param": "1"})
