"""The evaluation's probe node against a real rclpy node: the parameters it reads from a graph's node."""

from __future__ import annotations

import os

import pytest

from evaluation.probe import GraphProbe

pytestmark = pytest.mark.ros
pytest.importorskip("rclpy")


def test_the_probe_reads_a_nodes_parameters_and_names_one_it_does_not_have() -> None:
    """What the physical evaluation reads of the graph (policy_node's URL, mode and replan steps, aubo_bridge's
    home_q): a node without one of them is a clear RuntimeError, the run stops before any trial."""
    with GraphProbe(f"probe_params_{os.getpid()}") as probe:  # its own node answers as any node of a graph does
        assert probe.get_params(probe.name, ["use_sim_time"]) == {"use_sim_time": False}
        with pytest.raises(RuntimeError, match=r"does not have every parameter of \['use_sim_time', 'policy.url'\]"):
            probe.get_params(probe.name, ["use_sim_time", "policy.url"])
