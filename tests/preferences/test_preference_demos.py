"""Paired demos on the simulated workcell: each preference honoured or not, the same seed and style.

Its own metric separates them (the honouring demo scores better and is labelled satisfied; the unasked one is
not), task success does not change, the stored satisfaction curve is the metric's, the calibration set's
statistics come out as stored, and the report renders them in a real browser."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import demo_files
import numpy as np
import pytest

from libero_workcell.libero_format import read_demos, write_demo_file
from preferences.catalogue import Catalogue
from preferences.labels import Calibration
from preferences.metrics import METRICS
from preferences.report import chromium_path, screenshot, write_report
from preferences.scoring import score, summarize
from preferences.trajectory import Trajectory
from sim_bridge.preference_demos import (
    CALIBRATION_SEEDS,
    calibration_from,
    calibration_values,
    paired_spec,
    record_many,
)
from sim_bridge.preference_expert import preference_task

pytestmark = pytest.mark.slow
SEEDS = (0, 1)
CAT = Catalogue.load()
PREFS = sorted(CAT.definitions)
PAIRS = ("keep_high+gentle_release", "keep_low+keep_high")  # a composition and a conflict, seed 0


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    """Every preference and none, on seeds 0 and 1 (two processes), written and read back in LIBERO's layout."""
    jobs = [(s, p) for p in (None, *PREFS) for s in SEEDS] + [(0, p) for p in PAIRS]
    jobs += [(s, None) for s in CALIBRATION_SEEDS if s not in SEEDS]  # the rest of the calibration set
    recorded = record_many(jobs, workers=2)
    path = tmp_path_factory.mktemp("pairs") / "pairs.hdf5"
    named = [d.__class__(**{**d.__dict__, "name": f"demo_{i}"}) for i, (d, _) in enumerate(recorded)]
    write_demo_file(path, named, {"language_instruction": "paired"}, {})
    back = read_demos(path).demos
    return {(s, p): (back[i], recorded[i][1]) for i, (s, p) in enumerate(jobs)}


def test_each_preference_is_separated_by_its_own_metric_and_success_does_not_change(demos):
    cal = Calibration.load()
    rows = []
    for pid in PREFS:
        for seed in SEEDS:
            plain, m_plain = demos[(seed, None)]
            honoured, m_pref = demos[(seed, pid)]
            assert m_plain["SR"] == 1.0 and m_pref["SR"] == 1.0, (pid, seed)
            cond = CAT.condition(paired_spec(pid, preference_task(seed)))
            pref = cond.preferences[0]
            a = score(Trajectory.from_demo(plain), cond, CAT, cal).scores[0]
            b = score(Trajectory.from_demo(honoured), cond, CAT, cal).scores[0]
            better = b.value > a.value if pref.better == "higher" else b.value < a.value
            rows.append((pid, seed, a.value, a.label, b.value, b.label))
            assert better, (pid, seed, a.value, b.value)
            assert b.label >= a.label, (pid, seed, a.label, b.label)
    for pid in PREFS:
        mine = [r for r in rows if r[0] == pid]
        # honoured: mostly or fully satisfied; speed_up only partly (about 9.3 and 8.4 s against 10.5 and 10.4 s
        # unasked): the arm's top speed is the action's range, so only a shorter way is faster, and the seconds it
        # saves sit near a bin edge of the stored calibration: its labels were 1/4 and 1 on the CPU that stored
        # the bins, 0 and 3/4 on another (contact-rich physics moves the last bits across CPUs)
        assert np.mean([r[5] for r in mine]) >= (0.25 if pid == "speed_up" else 0.75), mine
        assert np.mean([r[3] for r in mine]) <= 0.5, mine  # unasked: at most one of the two by chance
    assert np.mean([r[5] for r in rows]) >= 0.9 and np.mean([r[3] for r in rows]) <= 0.15, rows


def test_a_composition_is_honoured_whole_and_a_conflict_is_scored_by_the_side_followed(demos):
    cal = Calibration.load()
    both, m = demos[(0, "keep_high+gentle_release")]
    e = score(Trajectory.from_demo(both), CAT.condition("keep_high+gentle_release"), CAT, cal)
    assert m["SR"] == 1.0 and e.kind == "composition" and min(s.label for s in e.scores) == e.label >= 0.75
    conflict, m = demos[(0, "keep_low+keep_high")]  # the expert asked both keeps the later: high
    e = score(Trajectory.from_demo(conflict), CAT.condition("keep_low+keep_high"), CAT, cal)
    assert m["SR"] == 1.0 and e.kind == "conflict" and e.followed == "keep_high"
    assert [s.label for s in e.scores] == [0.0, 1.0] and e.label == 1.0
    row = summarize([e])["conditions"][0]
    assert row["followed"]["keep_high"] == 1 and row["pref_dom"] == 1.0 and row["SA"] == 1.0


def test_demos_store_the_preference_and_its_satisfaction_curve(demos):
    honoured, _ = demos[(0, "keep_high")]
    assert honoured.attrs["preference"] == "keep the gripper high during lateral moves"
    stored = honoured.attrs["preferences"]
    stored = stored if isinstance(stored, list) else __import__("json").loads(stored)
    assert stored[0]["id"] == "keep_high" and stored[0]["params"]["height"] == pytest.approx(0.34)
    cond = CAT.condition("keep_high")
    curve = score(Trajectory.from_demo(honoured), cond, CAT, Calibration.load()).scores[0].curve
    assert honoured.satisfaction.shape == (honoured.num_samples, 1)
    np.testing.assert_allclose(honoured.satisfaction[:, 0], curve, equal_nan=True)
    assert honoured.scene_held is not None and honoured.scene_held.any()
    plain, _ = demos[(0, None)]
    assert plain.satisfaction is None and "preferences" not in plain.attrs


def test_the_calibration_set_is_reproduced_bit_for_bit_within_one_run(demos):
    """Two seeds of the calibration set recorded again, in other processes of this run: the same values exactly.
    Reproduction is a property of the code on one machine; across machines the BLAS kernel changes the last bit
    (next test)."""
    again = record_many([(0, None), (7, None)], workers=2)
    first = calibration_values([demos[(0, None)][0], demos[(7, None)][0]], CAT)
    assert calibration_values([d for d, _ in again], CAT) == first


# How far the calibration statistics of one BLAS kernel lie from another's: contact-rich physics amplifies the
# last bit (OPENBLAS_CORETYPE=Haswell against SkylakeX on one CPU moved gentle_release's median by 0.17 of its
# spread and its spread by a factor 1.52; docs/preferences.md). The stored bins must hold within these bounds.
MEDIAN_TOL_SPREADS = 0.5
SPREAD_RATIO = (0.5, 2.0)


def test_the_stored_bins_hold_on_this_machine_within_what_blas_kernels_change(demos):
    """The calibration set re-recorded (its 8 seeds, as `preference_demos calibrate` records them) gives bins
    within the cross-machine tolerance of the stored ones; the file says what produced it."""
    cal = Calibration.load()
    assert list(cal.calibration_set["seeds"]) == list(CALIBRATION_SEEDS)
    assert {"numpy", "mujoco", "cpu", "blas_core"} <= set(cal.calibration_set["produced_by"])
    again = calibration_from(calibration_values([demos[(s, None)][0] for s in CALIBRATION_SEEDS], CAT), CAT,
                             CALIBRATION_SEEDS)  # fmt: skip
    assert set(again.bins) == set(cal.bins) and all(not METRICS[b.metric].binary for b in cal.bins.values())
    for key, b in cal.bins.items():
        r = again.bins[key]
        assert abs(r.median - b.median) <= MEDIAN_TOL_SPREADS * b.spread, (key, r.median, b.median, b.spread)
        assert SPREAD_RATIO[0] <= r.spread / b.spread <= SPREAD_RATIO[1], (key, r.spread, b.spread)


def test_the_report_of_the_paired_demos_renders_with_its_tables_and_curves(demos, tmp_path):
    cal = Calibration.load()
    episodes, trajs = [], {}
    for (seed, pid), (demo, _) in demos.items():
        if pid in PAIRS:
            continue
        cond = CAT.condition(paired_spec(pid, preference_task(seed)) if pid else None)
        traj = Trajectory.from_demo(demo)
        traj = traj.__class__(**{**traj.__dict__, "name": f"{pid or 'none'}_s{seed}"})
        episodes.append(score(traj, cond, CAT, cal))
        trajs[traj.name] = traj
    # the no-preference demos scored against each preference too: the "without" side of every pair
    for seed in SEEDS:
        plain = Trajectory.from_demo(demos[(seed, None)][0])
        for pid in ("keep_high", "gentle_release"):
            e = score(plain, CAT.condition(paired_spec(pid, preference_task(seed))), CAT, cal)
            episodes.append(e.__class__(**{**e.__dict__, "name": f"unasked_{pid}_s{seed}"}))
    summary = summarize(episodes)
    assert summary["by_type"]["motion"]["SR"] == 1.0 and summary["by_type"]["user_profile"]["SA"] == 1.0
    html = write_report(tmp_path, episodes, trajs, title="Paired demos, simulated workcell")
    text = html.read_text()
    assert "By preference type" in text and text.count("data:image/png;base64") == 2
    if chromium_path() is None:
        pytest.skip("no chromium: the page is written, not rendered")
    png = screenshot(html, tmp_path / "report.png", height=3600)
    out = Path(__file__).resolve().parents[2] / "test-output"
    out.mkdir(exist_ok=True)
    shutil.copy(png, out / "preference_report_paired_demos.png")
    assert png.stat().st_size > 50_000


def test_the_calibration_set_and_the_pairs_show_their_demos_recorded_on_stderr(tmp_path, monkeypatch, capsys):
    """What `preference_demos calibrate` (record_many) and `pairs` (one bar over every file's demos) show while
    recording; stdout keeps the files written. The episodes stand in (real ones: the tests above)."""
    import sim_bridge.preference_demos as pd

    monkeypatch.setattr(pd, "_record_job", lambda job: job)
    jobs = [(s, None) for s in (0, 1, 2)]
    assert record_many(jobs, workers=1, progress=True) == jobs
    assert re.search(r"^demos: 100%.* 3/3 ", capsys.readouterr().err, re.M)

    monkeypatch.setattr(pd, "record", lambda seed, specs, name, render: (demo_files.demo(name, images=False),
                                                                          {"SR": 1.0}))  # fmt: skip
    assert pd.main(["pairs", str(tmp_path), "--preferences", "keep_high", "--seeds", "0", "1"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^demos: 100%.* 4/4 ", err, re.M), err  # 2 files x 2 seeds
    assert out == f"wrote {tmp_path / 'none.hdf5'}\nwrote {tmp_path / 'keep_high.hdf5'}\n"
