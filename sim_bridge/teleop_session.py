"""A scripted PICO session made from the scripted expert: the controller poses an operator would have made.

``python -m sim_bridge.teleop_session OUT.json [--seed 0] [--speed 0.03] [--arrival-interval 18]`` runs the
scripted expert at the followable speed on the simulated workcell (one process, sim time), takes its TCP
path and gripper schedule, and writes them, with the task they were made for, as a
teleop session file (teleop_pico.sources): the right controller's poses in the headset frame (the TCP's
motion since the start, mapped back through ``headset_to_base``), the grip held from the start (the
clutch), the trigger where the expert closed the gripper, A pressed at the start (record) and after the
last placement (save). Played by the teleop node on a world reset to the same task, the clutch makes the
arm follow the expert's path through the tracking law, so the session demonstrates the whole D2S transfer
with no headset.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import numpy as np
from scipy.spatial.transform import Rotation

from libero_workcell.contract import CONTROL_HZ_DEFAULT
from libero_workcell.progress import progress_bar
from libero_workcell.task import TaskSpec
from sim_bridge.aubo_demos import followable_expert
from sim_cell.episode import expert_source, run_episode
from sim_cell.expert import ScriptedExpert
from teleop_pico.config import TeleopConfig
from teleop_pico.sources import SessionScript

CONTROLLER_START: Final = np.array([0.0, 1.0, -0.3])  # m, headset frame: a hand 0.3 m in front at 1 m height
# An operator's pace, not the expert's full speed: the expert at the followable speed (0.18 m/s, what
# closed-loop replay follows closely) needs about 15 s a pick and place, so the shipped session's world has
# 18 s between arrivals (teleop_collect_sim.launch.py sets the sim world's arrival_interval to it).
SESSION_ARRIVAL_INTERVAL: Final = 18.0
# The expert's descent onto a part, m/s. The teleop core following the session's poses places all three from a
# 0.1 m/s descent; from the 0.05 the closed-loop replay needs (followable_expert), it closed on one part late
# and placed two. Contact-rich: checked by tests/teleop/test_teleop_sources.py on the shipped file.
TELEOP_DESCEND_SPEED: Final = 0.1
START_PRESS: Final = 0.0  # s: A (record) as the session starts
SETTLE: Final = 1.0  # s held after the expert's last step; A (save) a quarter second before the session ends
SAVE_BEFORE_END: Final = 0.25


def session_from_path(
    pos: np.ndarray, R: np.ndarray, gripper: np.ndarray, control_hz: float, config: TeleopConfig | None = None,
    description: str = "",
) -> SessionScript:  # fmt: skip
    """The session whose controller makes the clutched TCP follow ``pos`` / ``R`` (one row per control step)
    with ``gripper`` (the action's gripper command per step)."""
    cfg = config or TeleopConfig()
    M = cfg.rotation  # p_base = M p_headset
    n = len(pos)
    t = np.arange(n + int(SETTLE * control_hz)) / control_hz
    idx = np.minimum(np.arange(len(t)), n - 1)  # after the path: hold its last pose
    p_xr = CONTROLLER_START + ((pos[idx] - pos[0]) / cfg.pos_scale) @ M  # M^T (p - p0), row-wise
    turn = Rotation.from_matrix(np.einsum("nij,kj->nik", R[idx], R[0])).as_rotvec() / cfg.rot_scale
    R_xr = np.einsum("ji,njk,kl->nil", M, Rotation.from_rotvec(turn).as_matrix(), M)  # M^T R_b M
    trigger = (np.asarray(gripper)[idx] > 0).astype(float)
    return SessionScript(
        t, p_xr, Rotation.from_matrix(R_xr).as_quat(), np.ones(len(t)), trigger,
        ((START_PRESS, "A"), (float(t[-1]) - SAVE_BEFORE_END, "A")), description,
    )  # fmt: skip


def session_from_expert(
    spec: TaskSpec, control_hz: float = CONTROL_HZ_DEFAULT, expert: ScriptedExpert | None = None,
    progress: bool = False,
) -> tuple[SessionScript, dict]:  # fmt: skip
    """The expert's episode of ``spec`` as a session; also the episode's metrics. ``progress``: a bar of the
    episode's sim seconds (of its horizon) on stderr."""
    with progress_bar(math.ceil(spec.horizon), "expert episode sim s", "s", enabled=progress) as bar:
        result = run_episode(spec, expert_source(expert), record=True,
                             on_step=lambda rig, *_: bar.update(int(rig.world.sim_time) - bar.n))  # fmt: skip
    states = np.array(result.states)
    actions = np.array(result.actions)
    R = Rotation.from_rotvec(states[:, 3:6]).as_matrix()
    text = (f"scripted expert, seed {spec.seed}, belt {spec.belt_speed} m/s: {spec.language_instruction}; "
            f"placed {result.metrics.get('placed')}")  # fmt: skip
    script = session_from_path(states[:, :3], R, actions[:, 6], control_hz, description=text)
    return replace(script, task=spec.to_dict()), result.metrics


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speed", type=float, default=0.03, help="belt speed, m/s")
    ap.add_argument(
        "--arrival-interval",
        type=float,
        default=SESSION_ARRIVAL_INTERVAL,
        help="s between arrivals (the world the session is played in must have the same)",
    )
    args = ap.parse_args(argv)
    spec = TaskSpec.from_seed(args.seed, belt_speed=args.speed, arrival_interval=args.arrival_interval)
    script, metrics = session_from_expert(spec, expert=followable_expert(TELEOP_DESCEND_SPEED), progress=True)
    args.out.write_text(json.dumps(script.to_json(), separators=(",", ":")) + "\n")
    print(f"{args.out}: {len(script.times)} keyframes, {script.duration:.1f} s; the expert placed {metrics['placed']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
