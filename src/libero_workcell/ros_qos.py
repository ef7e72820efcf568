"""rclpy QoS profiles from the contract's plain-data :class:`~libero_workcell.contract.QosSpec`.

Why: the contract must stay importable without rclpy (drivers and their tests
never load ROS), so QoS is data there and becomes a ``QoSProfile`` here, in
the one place every node uses.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from libero_workcell.contract import QosSpec


def qos(spec: QosSpec, lockstep: bool = False) -> QoSProfile:
    """A new keep-last ``QoSProfile`` for ``spec`` (reliability, depth, durability).

    ``lockstep``: a topic a sim lockstep step waits for: reliable and transient local (a reader that matched
    the writer a moment after a message went out still gets it: no step may wait for a message lost to
    discovery). A volatile reader of such a writer (a probe, a tool) works as usual.
    """
    if spec.depth < 1:
        raise ValueError(f"QoS depth must be >= 1, got {spec.depth}")
    reliable, transient = spec.reliable or lockstep, spec.transient_local or lockstep
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=spec.depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if transient else DurabilityPolicy.VOLATILE,
    )
