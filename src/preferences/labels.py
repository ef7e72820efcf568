"""Discrete satisfaction labels d in {0, 1/4, 3/4, 1}, from bins calibrated on no-preference demos.

A continuous metric's bins are set by how no-preference demos score on it: its median m and a robust spread
s (1.4826 x the median absolute deviation, never below the metric's resolution). A value u = (v - m) / s
spreads away from what the robot does unasked, counted in the direction that satisfies the preference
(``better``): d = 0 below one spread, 1/4 from one, 3/4 from two, 1 from three. A binary metric's value is its
label. The bins are stored with the catalogue (calibration.json) with the statistics they came from, and
:func:`calibrate` recomputes them from the same calibration set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

import numpy as np

from libero_workcell.config_files import find_config_file

LABELS: Final = (0.0, 0.25, 0.75, 1.0)
SPREADS: Final = (1.0, 2.0, 3.0)  # spreads from the no-preference median where d steps up
MAD_TO_SIGMA: Final = 1.4826
CALIBRATION_FILE: Final = "preferences/calibration.json"
FORMAT: Final = "libero_workcell.preference_calibration/1"


class CalibrationError(ValueError):
    pass


@dataclass(frozen=True)
class Bins:
    key: str  # Preference.bin_key
    metric: str
    better: str
    median: float
    spread: float
    thresholds: tuple[float, float, float]  # the values where d becomes 1/4, 3/4, 1 (in the metric's unit)
    samples: int

    def label(self, value: float) -> float:
        """d for a metric value; NaN for an undefined one."""
        if not np.isfinite(value):
            return float("nan")
        sign = 1.0 if self.better == "higher" else -1.0
        u = sign * (value - self.median) / self.spread
        return LABELS[int(np.searchsorted(SPREADS, u, side="right"))]


def calibrate(key: str, metric: str, better: str, values: Sequence[float], resolution: float) -> Bins:
    """Bins from the no-preference values of one metric (NaNs, episodes where it is undefined, left out)."""
    v = np.asarray([x for x in values if np.isfinite(x)], float)
    if v.size < 3:
        raise CalibrationError(f"{key}: {v.size} defined no-preference values; calibration needs at least 3")
    median = float(np.median(v))
    spread = max(MAD_TO_SIGMA * float(np.median(np.abs(v - median))), float(resolution))
    sign = 1.0 if better == "higher" else -1.0
    thresholds = tuple(median + sign * k * spread for k in SPREADS)
    return Bins(key, metric, better, median, spread, thresholds, int(v.size))  # type: ignore[arg-type]


def binary_label(value: float) -> float:
    return float("nan") if not np.isfinite(value) else (1.0 if value >= 0.5 else 0.0)


@dataclass(frozen=True)
class Calibration:
    bins: Mapping[str, Bins]
    calibration_set: Mapping[str, Any]  # how the no-preference demos are made (seeds, speeds, style, command)
    statistics: Mapping[str, list[float]]  # bin key -> each calibration demo's value

    def bins_for(self, key: str) -> Bins:
        if key not in self.bins:
            raise CalibrationError(f"no calibrated bins for {key!r} in {CALIBRATION_FILE}; calibrated: "
                                   f"{sorted(self.bins)} (sim_bridge.preference_demos calibrate)")  # fmt: skip
        return self.bins[key]

    def to_json(self) -> str:
        return json.dumps({"format": FORMAT, "calibration_set": dict(self.calibration_set),
                           "bins": {k: asdict(b) for k, b in sorted(self.bins.items())},
                           "statistics": {k: list(v) for k, v in sorted(self.statistics.items())}},
                          indent=1, sort_keys=True) + "\n"  # fmt: skip

    @classmethod
    def from_json(cls, text: str, where: str = CALIBRATION_FILE) -> Calibration:
        raw = json.loads(text)
        if raw.get("format") != FORMAT:
            raise CalibrationError(f"{where}: format {raw.get('format')!r}, expected {FORMAT!r}")
        bins = {k: Bins(**{**b, "thresholds": tuple(b["thresholds"])}) for k, b in raw["bins"].items()}
        return cls(bins, raw.get("calibration_set", {}), raw.get("statistics", {}))

    @classmethod
    def load(cls, path: str | Path | None = None) -> Calibration:
        p = find_config_file(path or CALIBRATION_FILE)
        return cls.from_json(p.read_text(), str(p))
