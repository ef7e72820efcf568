"""SR and SA, LIBERO-PeRM's way: task success and preference satisfaction kept apart.

SA = (1/N) sum_n 1[success_n] d_n: a failed episode contributes zero however well it honoured the preference.
An episode's d is its preference's label; for a composition (two compatible preferences) the smaller of the
two (both must be honoured); for a conflict the larger (the episode is scored by the one it followed, and
the report says which: LIBERO-PeRM's preference-preference conflicts).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from preferences.catalogue import Catalogue, Condition
from preferences.labels import Calibration, binary_label
from preferences.metrics import METRICS, satisfaction_curve
from preferences.segment import subtasks
from preferences.trajectory import Trajectory


@dataclass(frozen=True)
class PreferenceScore:
    spec: str
    id: str
    type: str
    metric: str
    value: float  # the episode's satisfaction score: the curve's last value, in the metric's unit
    label: float  # d
    curve: np.ndarray = field(repr=False)  # (T,) the score on the trace so far


@dataclass(frozen=True)
class EpisodeScore:
    name: str
    success: bool
    kind: str  # none / single / composition / conflict
    condition: str  # the condition's spec
    scores: tuple[PreferenceScore, ...]
    label: float  # the episode's d (NaN without a preference)
    followed: str | None = None  # conflicts: the preference followed (its id), "both" or "neither"

    @property
    def sa_term(self) -> float:
        """1[success] * d: what this episode adds to SA (times N)."""
        return float(self.label) if self.success and np.isfinite(self.label) else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "success": self.success, "kind": self.kind, "condition": self.condition,
                "label": None if not np.isfinite(self.label) else self.label, "followed": self.followed,
                "scores": [{"spec": s.spec, "id": s.id, "type": s.type, "metric": s.metric,
                            "value": None if not np.isfinite(s.value) else s.value,
                            "label": None if not np.isfinite(s.label) else s.label} for s in self.scores]}  # fmt: skip


def _label(score_value: float, pref, calibration: Calibration | None) -> float:
    if METRICS[pref.metric].binary:
        return binary_label(score_value)
    if calibration is None:
        raise ValueError(f"{pref.spec}: a continuous metric needs calibrated bins")
    return calibration.bins_for(pref.bin_key).label(score_value)


def score(traj: Trajectory, condition: Condition, catalogue: Catalogue,
          calibration: Calibration | None = None) -> EpisodeScore:  # fmt: skip
    """One episode under ``condition``: each preference's curve, value and label, and the episode's d."""
    segs = subtasks(traj)
    scores = []
    for p in condition.preferences:
        curve = satisfaction_curve(traj, p.metric, p.params, catalogue.named, segs)
        value = float(curve[-1]) if len(curve) else float("nan")
        scores.append(PreferenceScore(p.spec, p.id, p.type, p.metric, value, _label(value, p, calibration), curve))
    labels = [0.0 if not np.isfinite(s.label) else s.label for s in scores]  # undefined at the end: not satisfied
    followed = None
    if condition.kind == "none":
        d = float("nan")
    elif condition.kind == "conflict":
        d = max(labels)
        a, b = labels
        followed = "neither" if d == 0 else "both" if a == b else scores[int(b > a)].id
    else:
        d = min(labels)
    return EpisodeScore(traj.name, traj.success, condition.kind, condition.spec, tuple(scores), d, followed)


def unscored(name: str, success: bool, condition: Condition) -> EpisodeScore:
    """An episode whose recording is lost or unreadable: each preference d = 0 (a lost recording must never raise
    SA), its value unknown."""
    scores = tuple(PreferenceScore(p.spec, p.id, p.type, p.metric, float("nan"), 0.0, np.zeros(0))
                   for p in condition.preferences)  # fmt: skip
    followed = "neither" if condition.kind == "conflict" else None
    return EpisodeScore(name, success, condition.kind, condition.spec, scores, 0.0, followed)


def curves(episode: EpisodeScore) -> np.ndarray:
    """(T, k) the per-step satisfaction of each preference (what a demo stores as preference/satisfaction)."""
    return np.stack([s.curve for s in episode.scores], axis=1) if episode.scores else np.zeros((0, 0))


def sr(episodes: Sequence[EpisodeScore]) -> float:
    return float(np.mean([e.success for e in episodes])) if episodes else float("nan")


def sa(episodes: Sequence[EpisodeScore]) -> float:
    """(1/N) sum 1[success] d."""
    return float(np.mean([e.sa_term for e in episodes])) if episodes else float("nan")


def sa_of(episodes: Sequence[EpisodeScore], preference_id: str) -> float:
    """SA counting only one side's label (a conflict's side, a composition's part)."""
    terms = []
    for e in episodes:
        s = next(s for s in e.scores if s.id == preference_id)
        terms.append(s.label if e.success and np.isfinite(s.label) else 0.0)
    return float(np.mean(terms)) if terms else float("nan")


def summarize(episodes: Iterable[EpisodeScore]) -> dict[str, Any]:
    """The tables: per condition, per preference type (single preferences), compositions and conflicts."""
    eps = list(episodes)
    by_condition: dict[str, list[EpisodeScore]] = {}
    for e in eps:
        by_condition.setdefault(e.condition or "(no preference)", []).append(e)
    rows = []
    for cond, group in sorted(by_condition.items()):
        kind = group[0].kind
        row: dict[str, Any] = {"condition": cond, "kind": kind, "N": len(group), "SR": sr(group),
                               "SA": None if kind == "none" else sa(group)}  # fmt: skip
        if kind == "single":
            row["type"] = group[0].scores[0].type
        if kind in ("composition", "conflict"):
            row["sides"] = {s.id: sa_of(group, s.id) for s in group[0].scores}
        if kind == "conflict":
            ids = [s.id for s in group[0].scores]
            counts = {k: sum(e.followed == k for e in group) for k in (*ids, "both", "neither")}
            row["followed"] = counts
            row["pref_dom"] = abs(counts[ids[0]] - counts[ids[1]]) / len(group)
        rows.append(row)
    by_type = {}
    for t in ("motion", "skill", "user_profile"):
        group = [e for e in eps if e.kind == "single" and e.scores[0].type == t]
        if group:
            by_type[t] = {"N": len(group), "SR": sr(group), "SA": sa(group)}
    prefs = [e for e in eps if e.kind != "none"]
    overall = {"N": len(eps), "SR": sr(eps), "SA_all_preferences": sa(prefs) if prefs else None}
    return {"overall": overall, "conditions": rows, "by_type": by_type}


def annotate(demo, catalogue: Catalogue | None = None, control_hz: float | None = None):
    """``demo`` with its preferences stored beside it: the ``preferences`` attribute (each one's spec, type,
    metric, parameters and language) and ``satisfaction`` (T, k), each one's curve on the trace so far. A demo
    asked no preference is returned as it is. What a recorder calls before writing a demo or a rollout."""
    task = demo.attrs.get("task_spec")
    if task is None:
        return demo
    traj = Trajectory.from_demo(demo) if control_hz is None else Trajectory.from_demo(demo, control_hz)
    if not traj.task.preference_specs:
        return demo
    catalogue = catalogue or Catalogue.load()
    condition = catalogue.condition(list(traj.task.preference_specs))
    segs = subtasks(traj)
    satisfaction = np.stack([satisfaction_curve(traj, p.metric, p.params, catalogue.named, segs)
                             for p in condition.preferences], axis=1)  # fmt: skip
    attrs = {**demo.attrs, "preferences": condition.to_list(), "preference_kind": condition.kind}
    return replace(demo, attrs=attrs, satisfaction=satisfaction)
