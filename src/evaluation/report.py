"""The evaluation's results: ``results.json`` (settings, every trial, the metrics), a table, a plot."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evaluation.metrics import by_speed

RESULTS_JSON = "results.json"
PLOT_FILE = "results.png"


def write_results(out_dir: Path, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any],
                  preferences: Mapping[str, Any] | None = None,
                  failed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:  # fmt: skip
    """Everything in one JSON file (replaced atomically); returns what it holds. ``preferences``: SR and SA of
    the preferences the trials asked (evaluation.preference_scores); ``failed``: the trials that did not run to
    the end (runner.failed_row), listed apart and not in the metrics."""
    doc = {"settings": dict(settings), "metrics": by_speed(rows), "trials": list(rows),
           "failed_trials": [{"index": r["trial"]["index"], "reason": r["failed"]} for r in failed]}  # fmt: skip
    if preferences is not None:
        doc["preferences"] = dict(preferences)
    tmp = out_dir / (RESULTS_JSON + ".partial")
    tmp.write_text(json.dumps(doc, indent=2))
    os.replace(tmp, out_dir / RESULTS_JSON)
    return doc


def table(metrics: Mapping[str, Mapping[str, Any]]) -> str:
    """One line per belt speed and one for all: trials, SR, PCR_T, PCR_S (initial), reach 1st/2nd/3rd."""
    head = f"{'belt':>6} {'trials':>6} {'SR':>6} {'PCR_T':>6} {'PCR_S':>6} {'(init)':>6}   reach 1st / 2nd / 3rd"
    lines = [head]
    for speed, m in metrics.items():
        if not m.get("trials"):
            continue
        reach = " / ".join(f"{m['reach'][k]:.2f}" for k in sorted(m["reach"], key=int))
        label = speed if speed == "all" else f"{speed} m/s"
        lines.append(
            f"{label:>6} {m['trials']:>6} {m['SR']:>6.2f} {m['PCR_T']:>6.2f} {m.get('PCR_S', float('nan')):>6.2f} "
            f"{m.get('PCR_S_init', float('nan')):>6.2f}   {reach}"
        )
    return "\n".join(lines)


def plot(metrics: Mapping[str, Mapping[str, Any]], path: Path, title: str) -> Path:
    """Two panels: SR, PCR_T and PCR_S (with the initial-state baseline) per speed; the share of trials
    reaching the 1st, 2nd and 3rd placement (the paper's Figure 4B)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    speeds = [s for s in metrics if s != "all" and metrics[s].get("trials")]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    width = 0.8 / max(1, len(speeds))
    names = ["SR", "PCR_T", "PCR_S"]
    for i, s in enumerate(speeds):
        m = metrics[s]
        xs = [k + i * width for k in range(len(names))]
        bars = left.bar(xs, [m.get(n, 0.0) for n in names], width, label=f"{s} m/s (n={m['trials']})")
        left.bar_label(bars, fmt="%.2f", fontsize=8)
        left.plot([xs[2] - width / 2, xs[2] + width / 2], [m.get("PCR_S_init", 0.0)] * 2, "k--", lw=1)
        ks = sorted(m["reach"], key=int)
        right.plot([int(k) for k in ks], [m["reach"][k] for k in ks], "o-", label=f"{s} m/s")
    left.set_xticks([k + width * (len(speeds) - 1) / 2 for k in range(len(names))], names)
    left.set_ylim(0, 1.1)
    left.set_title("success and completion (dashed: initial PCR_S)")
    left.legend(fontsize=8)
    right.set_xlabel("placement")
    right.set_ylabel("share of trials reaching it")
    right.set_xticks([1, 2, 3], ["1st", "2nd", "3rd"])
    right.set_ylim(0, 1.05)
    right.grid(alpha=0.3)
    right.legend(fontsize=8)
    right.set_title("progress through the episode")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
