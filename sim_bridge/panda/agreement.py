"""Do the AUBO world and the Panda world hold the same task? Corresponding task-body poses, compared.

Both worlds are built from one :class:`TaskSpec` and one scene (sim_cell.scene), differing only in
the arm. With both arms holding still, every named non-robot body (each workpiece, the belt surface)
must sit at the same pose after settling: the seed's bound is 1e-6 m and 1e-3 deg. A difference means
the worlds do not share the task (a changed scene, a different arrival, an arm touching the task).

``python -m sim_bridge.panda.agreement [--seed S] [--seconds T]`` prints the worst body and the verdict.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.task import TaskSpec
from sim_bridge.panda.world import PandaWorld
from sim_cell import scene
from sim_cell.world import SimWorld

POS_TOL: Final = 1e-6  # m
ROT_TOL_DEG: Final = 1e-3


@dataclass(frozen=True)
class Agreement:
    sim_time: float
    pos_error: dict[str, float]  # body -> m
    rot_error_deg: dict[str, float]  # body -> deg

    @property
    def agrees(self) -> bool:
        return max(self.pos_error.values()) <= POS_TOL and max(self.rot_error_deg.values()) <= ROT_TOL_DEG

    def summary(self) -> str:
        worst = max(self.pos_error, key=self.pos_error.get)
        worst_rot = max(self.rot_error_deg, key=self.rot_error_deg.get)
        verdict = "agree" if self.agrees else "DISAGREE"
        return (
            f"task bodies {verdict} at t = {self.sim_time:.2f} s: worst position {worst} "
            f"{self.pos_error[worst]:.2e} m (tol {POS_TOL:g}), worst rotation {worst_rot} "
            f"{self.rot_error_deg[worst_rot]:.2e} deg (tol {ROT_TOL_DEG:g})"
        )


def _poses(world: SimWorld) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    m, d = world.model, world.data
    assert m is not None and d is not None
    names = [*world.workpiece_names, scene.BELT_BODY]
    return {n: (d.xpos[m.body(n).id].copy(), d.xmat[m.body(n).id].reshape(3, 3).copy()) for n in names}


def task_pose_agreement(spec: TaskSpec, seconds: float | None = None) -> Agreement:
    """Run both worlds of ``spec`` with their arms still for ``seconds`` of sim time (default: 2 s past the
    first arrival, one workpiece riding the belt) and compare every task body's pose."""
    return compare_worlds(SimWorld(spec, render=False), PandaWorld(spec, render=False), seconds)


def compare_worlds(aubo: SimWorld, panda: PandaWorld, seconds: float | None = None) -> Agreement:
    """The comparison itself, for two worlds as built (they should hold the same task); closes both."""
    t_end = aubo.spec.first_arrival + 2.0 if seconds is None else seconds
    try:
        steps = round(t_end / scene.TIMESTEP)
        aubo.step(steps)  # the AUBO's servo holds home: no command arrives
        still = np.zeros(7)
        still[6] = -1.0
        while panda.sim_time < aubo.sim_time - 1e-9:
            panda.step_action(still)  # the Panda's OSC holds its start pose
        a, p = _poses(aubo), _poses(panda)
        pos = {n: float(np.linalg.norm(a[n][0] - p[n][0])) for n in a}
        rot = {n: float(np.degrees(Rotation.from_matrix(a[n][1] @ p[n][1].T).magnitude())) for n in a}
        return Agreement(aubo.sim_time, pos, rot)
    finally:
        aubo.close()
        panda.close()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=None)
    args = ap.parse_args(argv)
    result = task_pose_agreement(TaskSpec.from_seed(args.seed), args.seconds)
    print(result.summary())
    return 0 if result.agrees else 1


if __name__ == "__main__":
    raise SystemExit(main())
