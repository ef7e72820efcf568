"""rclpy QoS profiles from the contract's plain-data :class:`~libero_workcell.contract.QosSpec`.

Why: the contract must stay importable without rclpy (drivers and their tests
never load ROS), so QoS is data there and becomes a ``QoSProfile`` here, in
the one place every node uses.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from libero_workcell.contract import QosSpec


def qos(spec: QosSpec) -> QoSProfile:
    """A new keep-last ``QoSProfile`` for ``spec`` (reliability, depth, durability)."""
    if spec.depth < 1:
        raise ValueError(f"QoS depth must be >= 1, got {spec.depth}")
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=spec.depth,
        reliability=ReliabilityPolicy.RELIABLE if spec.reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if spec.transient_local else DurabilityPolicy.VOLATILE,
    )
