"""SR and SA of an evaluation run with preferences, scored from what the robot did in each trial.

Each trial's rollout (recorded by the rollout_recorder) is scored under the preferences its task asked
(preferences.scoring); success is the trial's outcome (the sim world's predicates, or the operator's labels on
the physical workcell), never the rollout's own attribute, so SA = (1/N) sum 1[success] d counts exactly
the trials SR counts. A trial without a readable rollout is scored d = 0 and listed, never dropped: a lost
recording must not raise SA.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.protocol import Trial
from libero_workcell.libero_format import LiberoFormatError, read_demos
from preferences.catalogue import Catalogue
from preferences.labels import Calibration
from preferences.report import write_report
from preferences.scoring import EpisodeScore, score, summarize, unscored
from preferences.trajectory import Trajectory

REPORT_DIR = "preferences"


def score_trials(rows: Sequence[Mapping[str, Any]], out: Path) -> dict[str, Any] | None:
    """The preference tables of an evaluation (None when its trials asked none); the report goes to
    ``out/preferences``."""
    catalogue, calibration = Catalogue.load(), None
    episodes: list[EpisodeScore] = []
    trajs: dict[str, Trajectory] = {}
    missing: list[int] = []
    for row in rows:
        index = int(row["trial"]["index"])
        spec = row["trial"].get("preference") or ""
        if not spec:
            continue
        condition = catalogue.condition(spec)
        success = all(bool(p) for p in row["outcome"]["placed"])
        name = f"trial_{index:03d}"
        t = row["trial"]
        task = Trial(index, int(t["combination"]), tuple(t["slot_permutation"]), float(t["belt_speed"]),
                     int(t["seed"]), spec).spec  # the trial's own task: a real rollout's recorder does not know it
        try:
            demo = read_demos(row["rollout"]).demos[-1]
        except (KeyError, LiberoFormatError, OSError):
            missing.append(index)
            episodes.append(unscored(name, success, condition))
            continue
        traj = Trajectory(demo.ee_pos, demo.ee_ori, demo.actions[:, 6], demo.gripper_states[:, 0], task, success,
                          float(demo.attrs.get("control_hz", 20.0)),
                          None if demo.scene_held is None else demo.scene_held.astype(bool), name)  # fmt: skip
        calibration = calibration or Calibration.load()
        episodes.append(score(traj, condition, catalogue, calibration))
        trajs[name] = traj
    if not episodes:
        return None
    write_report(out / REPORT_DIR, episodes, trajs, title=f"Preferences: {out}")
    summary = summarize(episodes)
    summary["unscored_trials"] = missing
    summary["episodes"] = [e.to_dict() for e in episodes]
    return summary


def sa_line(summary: Mapping[str, Any]) -> str:
    o = summary["overall"]
    sa = o.get("SA_all_preferences")
    text = f"preferences: {o['N']} trials, SR {o['SR']:.2f}, SA {sa:.2f}" if sa is not None else ""
    if summary.get("unscored_trials"):
        text += f" ({len(summary['unscored_trials'])} without a readable rollout, scored d = 0)"
    return text
