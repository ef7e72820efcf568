"""Pick the arm and gripper backends for ``use_sim``."""

from __future__ import annotations

from aubo_bridge.backend import ArmBackend, GripperBackend


def make_backends(use_sim: bool, sim_link: str, stale_after: float) -> tuple[ArmBackend, GripperBackend]:
    if use_sim:
        from aubo_bridge.sim_backend import SimArmBackend, SimGripperBackend
        from sim_bridge.link import SimLink

        link = SimLink.attach(sim_link)
        return SimArmBackend(link, stale_after=stale_after), SimGripperBackend(link, stale_after=stale_after)
    raise RuntimeError("the real AUBO ARCS / CTAG2F90D backends are not in this build yet: start with use_sim:=true")
