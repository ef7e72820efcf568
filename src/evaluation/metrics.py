"""The paper's metrics over trials, from each trial's per-placement outcome.

- SR: the share of trials where every target workpiece was placed;
- PCR_T: the share of planned target transfers completed (placements / (trials x workpieces));
- PCR_S: the mean share of destination slots holding a valid workpiece at the end, next to the same
  figure in the initial state (``pcr_s_init``: the baseline; an empty tray scores 0, a pre-filled one not);
- reach_k: the share of trials reaching the k-th placement (at least k placed), k = 1, 2, 3 (Figure 4B).

A trial's outcome is the sim world's predicates (``/sim/episode`` metrics: ``placed``, ``PCR_S``,
``pcr_s_init``) or, on the real workcell, the operator's per-placement labels.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def summarize(outcomes: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """``outcomes``: per trial ``placed`` (list of bool, one per target) and optionally ``PCR_S`` and
    ``pcr_s_init``."""
    rows = list(outcomes)
    if not rows:
        return {"trials": 0}
    placed = [[bool(p) for p in r["placed"]] for r in rows]
    n = max(len(p) for p in placed)
    planned = sum(len(p) for p in placed)
    out: dict[str, Any] = {
        "trials": len(rows),
        "planned_placements": planned,
        "placements": sum(sum(p) for p in placed),
        "SR": sum(all(p) for p in placed) / len(rows),
        "PCR_T": sum(sum(p) for p in placed) / planned if planned else 0.0,
        "reach": {k: sum(sum(p) >= k for p in placed) / len(rows) for k in range(1, n + 1)},
    }
    slots = [r for r in rows if "PCR_S" in r]
    if slots:
        out["PCR_S"] = sum(float(r["PCR_S"]) for r in slots) / len(slots)
        out["PCR_S_init"] = sum(float(r.get("pcr_s_init", 0.0)) for r in slots) / len(slots)
    return out


def by_speed(results: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """``summarize`` per belt speed (key: the speed as text) and ``all``."""
    rows = list(results)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{float(r['trial']['belt_speed']):g}", []).append(r["outcome"])
    out = {speed: summarize(g) for speed, g in sorted(groups.items())}
    out["all"] = summarize(r["outcome"] for r in rows)
    return out
