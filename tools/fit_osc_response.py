"""Fit the second-order approximation of the action response to robosuite's measured response.

``python -m tools.fit_osc_response`` (in the project's .venv) replays every sequence of
``tests/data/robosuite_osc_response.json`` through :class:`libero_workcell.action_response.OscResponse`
(the planners' cheap approximation; the driver streams ``PandaResponse``, the law itself) and finds,
by Nelder-Mead, the stiffness and damping ratio that minimise the worst per-sequence RMS error over the
travel: position over the sequences that command translation only, rotation over those that command
rotation. It prints the gains and the per-sequence figures; ``libero_workcell/action_response.py`` keeps
the fitted defaults.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.optimize import minimize

from libero_workcell.action_response import Goal, OscGains, OscResponse, RefState, next_goal
from libero_workcell.contract import CONTROL_HZ_DEFAULT, action_to_delta
from libero_workcell.progress import progress_bar
from sim_bridge.response_reference import ReferenceSequence, ResponseError, compare, load_reference, table

SUBSTEPS = 5  # integration steps per control step (the model is exact per step: any count gives the same)


def model_trajectory(seq: ReferenceSequence, gains: OscGains) -> tuple[np.ndarray, np.ndarray]:
    model = OscResponse(gains, 1.0 / CONTROL_HZ_DEFAULT / SUBSTEPS)
    ref = RefState.at_rest(np.zeros(3), np.eye(3))
    goal = Goal(ref.pos, ref.R)
    pos, rot = [ref.pos], [ref.R]
    for a in seq.actions:
        dpos, drot, _ = action_to_delta(np.clip(a, -1.0, 1.0))
        goal = next_goal(ref, goal, dpos, drot)
        for _ in range(SUBSTEPS):
            ref = model.step(ref, goal)
        pos.append(ref.pos)
        rot.append(ref.R)
    return np.array(pos), np.array(rot)


def errors(seqs: list[ReferenceSequence], gains: OscGains) -> list[ResponseError]:
    return [compare(s, *model_trajectory(s, gains)) for s in seqs]


def fit(seqs: list[ReferenceSequence], progress: bool = False) -> OscGains:
    translation = [s for s in seqs if s.commands_translation and not s.commands_rotation]
    rotation = [s for s in seqs if s.commands_rotation and not s.commands_translation]

    def worst_pos(x: np.ndarray) -> float:
        return max(e.pos_ratio for e in errors(translation, OscGains(x[0], x[1], 150.0, 1.0)))

    def worst_rot(x: np.ndarray) -> float:
        return max(e.rot_ratio for e in errors(rotation, OscGains(150.0, 1.0, x[0], x[1])))

    pos, rot = (_minimize(worst, f"fitting {what} gains", progress)
                for worst, what in ((worst_pos, "position"), (worst_rot, "rotation")))  # fmt: skip
    return OscGains(float(pos[0]), float(pos[1]), float(rot[0]), float(rot[1]))


def _minimize(worst: Callable[[np.ndarray], float], desc: str, progress: bool) -> np.ndarray:
    """Nelder-Mead from robosuite's nominal gains; ``progress``: its iterations counted on stderr (no total)."""
    with progress_bar(None, desc, "it", enabled=progress) as bar:
        return minimize(worst, [150.0, 1.0], method="Nelder-Mead", options={"xatol": 0.01, "fatol": 1e-5},
                        callback=lambda _x: bar.update()).x  # fmt: skip


def main() -> None:
    seqs = load_reference()
    for label, gains in (("robosuite's nominal gains (kp 150, damping 1)", OscGains(150.0, 1.0, 150.0, 1.0)),
                         ("fitted", fit(seqs, progress=True))):  # fmt: skip
        print(f"{label}: {gains}")
        print(table(errors(seqs, gains)), end="\n\n")


if __name__ == "__main__":
    main()
