"""Figures, percentiles and the printed table (no ROS, no MuJoCo)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

PASS, MISS, INFO, ERROR = "PASS", "MISS", "info", "ERROR"


def percentiles(values: Sequence[float] | np.ndarray, qs: Sequence[float] = (50, 99)) -> dict[str, float]:
    """``{"n", "p50", "p99", "max", "mean"}`` (NaN when empty)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    out: dict[str, float] = {"n": int(a.size)}
    for q in qs:
        out[f"p{q:g}"] = float(np.percentile(a, q)) if a.size else math.nan
    out["max"] = float(a.max()) if a.size else math.nan
    out["mean"] = float(a.mean()) if a.size else math.nan
    return out


def period_errors_ms(times: Sequence[float] | np.ndarray, period: float) -> np.ndarray:
    """|tick-to-tick interval - period| in ms for a sorted list of event times (s)."""
    t = np.asarray(times, dtype=float)
    if t.size < 2:
        return np.zeros(0)
    return np.abs(np.diff(t) - period) * 1e3


def fmt(x: float, digits: int = 2) -> str:
    return "nan" if x is None or not math.isfinite(x) else f"{x:.{digits}f}"


@dataclass
class Figure:
    """One reported number (or pair) with its target and verdict."""

    key: str
    label: str
    value: str
    target: str = "-"
    status: str = INFO
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def verdict(ok: bool | None) -> str:
    """PASS / MISS, or ERROR when the figure could not be measured (``ok`` is None)."""
    if ok is None:
        return ERROR
    return PASS if ok else MISS


def p50_p99_text(stats: dict[str, float], unit: str = "ms", digits: int = 2) -> str:
    return f"p50 {fmt(stats['p50'], digits)} / p99 {fmt(stats['p99'], digits)} {unit} (n={stats['n']})"


def table(figures: Sequence[Figure]) -> str:
    """The figures as a fixed-width text table."""
    head = ("#", "figure", "value", "target", "result")
    rows = [(f.key, f.label, f.value, f.target, f.status) for f in figures]
    widths = [max(len(str(r[i])) for r in [head, *rows]) for i in range(len(head))]

    def line(r: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(head), sep, *(line(r) for r in rows)])
