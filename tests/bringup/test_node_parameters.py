"""The parameters the bring-up checks overrides and cell files against are read as data
(config/node_parameters.json), never by importing a node: the file is what every node of the graph declares
(regenerated and compared here), and resolving a graph imports no node, device or simulation module."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.node_parameters import OUT, main, node_modules, text
from workcell import bringup
from workcell.bringup import GraphError, node_parameters


def test_the_file_is_what_every_node_of_the_graph_declares() -> None:
    assert OUT.read_text() == text(), "config/node_parameters.json is stale: run python -m tools.node_parameters"
    assert sorted(json.loads(OUT.read_text())) == node_modules()
    assert main(["--check"]) == 0  # the documented command: what it says of this tree


def test_resolving_a_graph_with_overrides_imports_no_node() -> None:
    code = (
        "import sys\nfrom workcell.bringup import Graph\n"
        "specs = Graph.load().resolve(['teleop:=true', 'aubo_bridge.arcs.rtde_hz:=250', 'recorder.min_free_mb:=5'])\n"
        "assert {s.name: s.parameters for s in specs}['aubo_bridge']['arcs.rtde_hz'] == 250.0\n"
        "roots = ('aubo_bridge', 'conveyor_driver', 'camera_driver', 'gripper', 'sim_cell', 'sim_bridge', 'recorder', "
        "'teleop_pico', 'policy_node', 'console', 'session_log')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in roots)\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_module_the_file_does_not_hold_or_a_broken_file_is_a_graph_error(monkeypatch, tmp_path) -> None:
    with pytest.raises(GraphError, match=r"cannot read the parameters of nowhere\.node: not in node_parameters\.json"):
        node_parameters("nowhere.node")
    broken = tmp_path / "node_parameters.json"
    broken.write_text("{not json")
    monkeypatch.setattr(bringup, "package_config_file", lambda name: broken)
    bringup._declared_parameters.cache_clear()
    try:
        with pytest.raises(GraphError, match=r"cannot read the nodes' parameters \(node_parameters.json\)"):
            node_parameters("aubo_bridge.node")
    finally:
        bringup._declared_parameters.cache_clear()
