"""The preference report: its numbers match SA's formula, the page is self-contained, and Chromium draws it.

Episodes are built by hand (no simulation): single preferences of two types with a failed episode, a
composition, a conflict and a no-preference episode; the screenshot lands in test-output/ for a person.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import TEST_OUTPUT
from matplotlib.image import imread

from libero_workcell.task import TaskSpec
from preferences.report import chromium_path, grip_events, pct, screenshot, write_report
from preferences.scoring import EpisodeScore, PreferenceScore
from preferences.trajectory import Trajectory

T = 120  # steps at 20 Hz: 6 s
TYPES = {"smooth_motion": ("motion", "tcp_acceleration", 0.4), "vertical_approach": ("skill", "approach_angle", 8.0),
         "keep_low": ("motion", "lateral_height", 0.14), "keep_high": ("motion", "lateral_height", 0.32)}  # fmt: skip

# name, condition, success, per-preference labels d
EPISODES = [
    ("m1", "smooth_motion", True, [1.0]),
    ("m2", "smooth_motion", True, [0.25]),
    ("m3", "smooth_motion", False, [1.0]),
    ("s1", "vertical_approach", True, [1.0]),
    ("s2", "vertical_approach", True, [1.0]),
    ("s3", "vertical_approach", True, [0.0]),
    ("c1", "smooth_motion+vertical_approach", True, [0.75, 1.0]),
    ("c2", "smooth_motion+vertical_approach", True, [1.0, 0.25]),
    ("k1", "keep_low+keep_high", True, [1.0, 0.0]),
    ("k2", "keep_low+keep_high", True, [0.25, 0.75]),
    ("k3", "keep_low+keep_high", False, [1.0, 0.0]),
    ("n1", "", True, []),
]


def _curve(final: float, rng: np.random.Generator) -> np.ndarray:
    """Undefined until the first subtask starts, then settling to ``final``."""
    start = int(rng.integers(10, 30))
    c = np.full(T, np.nan)
    c[start:] = final * (1 + 0.5 * np.exp(-np.arange(T - start) / 15.0)) + rng.normal(0, 0.02 * final, T - start)
    c[-1] = final
    return c


def _episode(name: str, condition: str, success: bool, labels: list[float], rng: np.random.Generator) -> EpisodeScore:
    ids = condition.split("+") if condition else []
    scores = []
    for pid, d in zip(ids, labels, strict=True):
        typ, metric, base = TYPES[pid]
        value = base * (1.3 - 0.5 * d)
        scores.append(PreferenceScore(pid, pid, typ, metric, value, d, _curve(value, rng)))
    kind = {0: "none", 1: "single"}.get(len(ids), "conflict" if condition.startswith("keep_low") else "composition")
    followed = None
    if kind == "none":
        d = float("nan")
    elif kind == "conflict":
        d = max(labels)
        followed = "neither" if d == 0 else "both" if labels[0] == labels[1] else ids[int(labels[1] > labels[0])]
    else:
        d = min(labels)
    return EpisodeScore(name, success, kind, condition, tuple(scores), d, followed)


def _trajectory(name: str, success: bool, k: int) -> Trajectory:
    """A pick at one place, a carry and a place at another, the gripper closed in between."""
    s = np.linspace(0, 1, T)
    x = 0.45 + 0.1 * s + 0.01 * k
    y = -0.2 + 0.4 * s
    z = 0.25 - 0.15 * np.exp(-(((s - 0.25) / 0.06) ** 2)) - 0.15 * np.exp(-(((s - 0.75) / 0.06) ** 2)) + 0.01 * k
    grip = np.where((s > 0.25) & (s < 0.75 if success else s < 0.55), 1.0, -1.0)
    return Trajectory(np.stack([x, y, z], axis=1), np.zeros((T, 3)), grip, (grip > 0).astype(float),
                      TaskSpec.from_seed(0), success, 20.0, name=name)  # fmt: skip


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Written once: every test reads it (matplotlib's figures are most of the module's time)."""
    rng = np.random.default_rng(0)
    episodes = [_episode(*row, rng) for row in EPISODES]
    trajectories = {name: _trajectory(name, ok, i % 3) for i, (name, _, ok, _) in enumerate(EPISODES)}
    out = tmp_path_factory.mktemp("report") / "report"
    return write_report(out, episodes, trajectories, title="Preference evaluation & <test>")


def _sa(rows: list[tuple[bool, float]]) -> float:
    """SA = (1/N) sum 1[success] d, by hand."""
    return sum(ok * d for ok, d in rows) / len(rows)


def test_grip_events_are_the_command_sign_changes() -> None:
    grasp, release = grip_events(np.array([-1, -1, 1, 1, -1, 0, 1, -1]))
    assert grasp.tolist() == [2, 6] and release.tolist() == [4, 7]


def test_report_files_numbers_and_self_contained_page(report: Path) -> None:
    out = report.parent
    assert report.name == "report.html"
    for f in ("summary.json", "curves.png", "trajectories.png", "report.html"):
        assert (out / f).stat().st_size > 0, f
    summary = json.loads((out / "summary.json").read_text())
    assert summary["summary"]["overall"]["N"] == len(EPISODES) and len(summary["episodes"]) == len(EPISODES)
    assert summary["episodes"][-1]["label"] is None  # the no-preference episode's NaN d, as JSON null

    page = report.read_text(encoding="utf-8")
    for header in ("<th>Type</th>", "<th>Condition</th>", "<th>Kind</th>", "<th>SR</th>", "<th>SA</th>",
                   "<th>SA per side</th>", "<th>Followed</th>", "<th>Pref-Dom</th>", "<th>Episode</th>"):  # fmt: skip
        assert header in page, header
    assert "Preference evaluation &amp; &lt;test&gt;" in page and "<test>" not in page

    motion = _sa([(True, 1.0), (True, 0.25), (False, 1.0)])
    skill = _sa([(True, 1.0), (True, 1.0), (True, 0.0)])
    composition = _sa([(True, 0.75), (True, 0.25)])  # d = the smaller label
    conflict = _sa([(True, 1.0), (True, 0.75), (False, 1.0)])  # d = the larger label
    prefs = _sa([(ok, max(ls) if c.startswith("keep") else min(ls)) for _, c, ok, ls in EPISODES if ls])
    assert pct(skill) == "66.7%" and pct(motion) == "41.7%" and pct(conflict) == "58.3%" and pct(prefs) == "54.5%"
    sr_all = np.mean([ok for _, _, ok, _ in EPISODES])
    assert f"SR = <b>{pct(sr_all)}</b>" in page and f"= <b>{pct(prefs)}</b>" in page  # overall: 83.3%, 54.5%
    cells = re.findall(r'<td class="num">([^<]*)</td>', page)
    for expected in (motion, skill, composition, conflict, 2 / 3, 1.0):
        assert pct(expected) in cells, pct(expected)
    assert "smooth_motion: 87.5%" in page and "vertical_approach: 62.5%" in page  # composition's sides
    assert "keep_low: 2" in page and "keep_high: 1" in page and pct(1 / 3) in cells  # followed, Pref-Dom
    assert "tcp_acceleration" in page and "m/s^2" in page and "d=0.25" in page

    assert not re.search(r"https?://", page) and "<script" not in page and "<link" not in page
    assert page.count('src="data:image/png;base64,') == 2


def test_screenshot_of_the_report(report: Path, tmp_path: Path) -> None:
    if chromium_path() is None:
        pytest.skip("no chromium (scripts/bootstrap.sh --dev installs it)")
    png = screenshot(report, tmp_path / "page.png", width=1280, height=2900)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = imread(png)
    assert img.shape[1] == 1280 and img.shape[0] == 2900
    assert float(np.std(img[..., :3])) > 0.05  # not a blank page
    TEST_OUTPUT.mkdir(exist_ok=True)
    shutil.copyfile(png, TEST_OUTPUT / "preference_report.png")


def test_screenshot_failure_says_why(report: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("preferences.report.chromium_path", lambda: shutil.which("false"))
    with pytest.raises(RuntimeError, match="screenshot failed"):
        screenshot(report, tmp_path / "page.png")
    monkeypatch.setattr("preferences.report.chromium_path", lambda: None)
    with pytest.raises(RuntimeError, match="no chromium"):
        screenshot(report, tmp_path / "page.png")
