"""Paired demos on the simulated workcell: each preference honoured or not, the same seed and style.

Its own metric separates them (the honouring demo scores better and is labelled satisfied; the unasked one is
not), task success does not change, a composition is honoured whole and a conflict scored by the side followed,
the stored satisfaction curve is the metric's, the calibration set's statistics come out as stored, and the
report renders them in a real browser.

The paired set (seeds 0 and 1, with no preference and with each of the catalogue's; a composition and a conflict
on seed 0) is stored as recorded: tests/data/preference_pairs.npz, which tests/fixtures/preference_trajectories.py
records again (28 episodes); the quick tests score it. A sample of it is recorded here in every run by the same
functions (the slow tests: seed 0 with no preference and with the composition, the first also a seed of the
calibration set, and recorded twice), with the BLAS kernel that recorded the stored set where this CPU runs it;
the stored set and the stored calibration are held to it within what another kernel's arithmetic changes.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import demo_files
import numpy as np
import pytest
from preference_trajectories import (
    REFERENCE_PAIRS,
    REFERENCE_SEEDS,
    Job,
    computing_with,
    load_recorded,
    numerics_of,
    record_set,
    recorded_by,
)

from libero_workcell.libero_format import read_demos, write_demo_file
from preferences.catalogue import Catalogue
from preferences.labels import Calibration
from preferences.metrics import METRICS, satisfaction_curve
from preferences.report import chromium_path, screenshot, write_report
from preferences.scoring import score, summarize
from preferences.segment import subtasks
from preferences.trajectory import Trajectory
from sim_bridge.preference_demos import (
    CALIBRATION_SEEDS,
    calibrated_preferences,
    calibration_values,
    paired_spec,
    record_many,
)
from sim_bridge.preference_expert import preference_task

CAT = Catalogue.load()
PREFS = sorted(CAT.definitions)
COMPOSITION, CONFLICT = REFERENCE_PAIRS
SAMPLE = ((0, None), (0, COMPOSITION))  # recorded in every run; seed 0 is also the calibration set's first

# How far one episode's scores may lie from the same episode recorded on another CPU, in spreads of the stored
# bins: contact-rich physics amplifies the last bit of the BLAS kernel (docs/preferences.md: three kernels moved
# the sample's scores by up to 0.41 spread, two others one seed's release drop by one); what a preference
# changes is three spreads and more.
EPISODE_TOL_SPREADS = 2.0


def comparable(job: Job, stored_by: dict, sample_by: dict) -> bool:
    """Whether the sample's ``job`` may be held to the one ``stored_by`` recorded, within EPISODE_TOL_SPREADS: on
    the same machine architecture, and for the composition with the same BLAS kernel too. With another kernel its
    contacts can part for good: with `SkylakeX` (on an AMD EPYC and on an Intel Xeon alike) its second grasp kicks
    the TCP 5 cm in one step, smooth_motion 14 spreads from the one recorded with `Haswell`; there the task and its
    outcome are held, and the preferences' properties on what was recorded here. The sample's processes take the
    stored set's kernel wherever this CPU runs it (the ``numerics`` fixture)."""
    same_kernel = sample_by.get("blas_core") == stored_by.get("blas_core")
    return sample_by["machine"] == stored_by.get("machine") and (job[1] is None or same_kernel)


@pytest.fixture(scope="module")
def stored() -> dict:
    return load_recorded()


@pytest.fixture(scope="module")
def numerics() -> tuple[dict[str, str], dict]:
    """The environment the sample's processes get (the stored set's BLAS kernel where this CPU runs it), and what
    such a process reports of itself."""
    return numerics_of(recorded_by())


@pytest.fixture(scope="module")
def sample(tmp_path_factory, numerics) -> dict:
    """The sample, recorded in two processes by the functions that recorded the stored set (its stored form in
    ``sample.npz``), and written and read back in LIBERO's layout: job -> (demo, metrics, stored form)."""
    folder = tmp_path_factory.mktemp("sample")
    forced, sample_by = numerics
    with computing_with(forced):
        recorded = record_set(folder / "sample.npz", SAMPLE, workers=2, provenance=sample_by)
    named = [d.__class__(**{**d.__dict__, "name": f"demo_{i}"}) for i, (d, _) in enumerate(recorded)]
    write_demo_file(folder / "sample.hdf5", named, {"language_instruction": "paired"}, {})
    back = read_demos(folder / "sample.hdf5").demos
    as_stored = load_recorded(folder / "sample.npz")
    return {job: (back[i], recorded[i][1], as_stored[job]) for i, job in enumerate(SAMPLE)}


def scores_of(traj: Trajectory) -> dict[str, float]:
    """Every preference's score of ``traj``: each calibrated one's by its bin key, the binary ones by id."""
    segs = subtasks(traj)
    prefs = dict(calibrated_preferences(CAT))
    prefs |= {p: CAT.preference(paired_spec(p, traj.task)) for p in PREFS if METRICS[CAT.definitions[p].metric].binary}
    return {k: float(satisfaction_curve(traj, p.metric, p.params, CAT.named, segs)[-1]) for k, p in prefs.items()}


def far_apart(a: dict[str, float], b: dict[str, float], cal: Calibration) -> dict[str, tuple[float, float]]:
    """Each score of ``b`` that lies further from ``a``'s than another CPU moves it (binary ones: unequal)."""

    def apart(k: str) -> bool:
        return abs(a[k] - b[k]) > EPISODE_TOL_SPREADS * cal.bins[k].spread if k in cal.bins else a[k] != b[k]

    return {k: (a[k], b[k]) for k in b if apart(k)}


def separated(plain: Trajectory, honoured: Trajectory, pid: str, seed: int, cal: Calibration) -> tuple:
    """Scored by ``pid``'s own metric: (plain value, label, honoured value, label), after asserting that the
    honouring demo scores better and is labelled no lower, and that both completed the task."""
    assert plain.success and honoured.success, (pid, seed)
    cond = CAT.condition(paired_spec(pid, preference_task(seed)))
    a = score(plain, cond, CAT, cal).scores[0]
    b = score(honoured, cond, CAT, cal).scores[0]
    better = b.value > a.value if cond.preferences[0].better == "higher" else b.value < a.value
    assert better, (pid, seed, a.value, b.value)
    assert b.label >= a.label, (pid, seed, a.label, b.label)
    return a.value, a.label, b.value, b.label


def test_each_preference_is_separated_by_its_own_metric_and_success_does_not_change(stored):
    cal = Calibration.load()
    rows = [(pid, seed, *separated(stored[(seed, None)], stored[(seed, pid)], pid, seed, cal))
            for pid in PREFS for seed in REFERENCE_SEEDS]  # fmt: skip
    for pid in PREFS:
        mine = [r for r in rows if r[0] == pid]
        # honoured: mostly or fully satisfied; speed_up only partly: the arm's top speed is the action's range, so
        # only a shorter way is faster, and the seconds it saves sit near bin edges of the stored calibration (d ¾
        # and ¾ as stored; earlier recordings, on other CPUs, gave ¼ and 1, or 0 and ¾)
        assert np.mean([r[5] for r in mine]) >= (0.25 if pid == "speed_up" else 0.75), mine
        assert np.mean([r[3] for r in mine]) <= 0.5, mine  # unasked: at most one of the two by chance
    assert np.mean([r[5] for r in rows]) >= 0.9 and np.mean([r[3] for r in rows]) <= 0.15, rows


def composed(both: Trajectory, cal: Calibration) -> None:
    e = score(both, CAT.condition(COMPOSITION), CAT, cal)
    assert both.success and e.kind == "composition" and min(s.label for s in e.scores) == e.label >= 0.75


def test_a_composition_is_honoured_whole_and_a_conflict_is_scored_by_the_side_followed(stored):
    cal = Calibration.load()
    composed(stored[(0, COMPOSITION)], cal)
    conflict = stored[(0, CONFLICT)]  # the expert asked both keeps the later: high
    e = score(conflict, CAT.condition(CONFLICT), CAT, cal)
    assert conflict.success and e.kind == "conflict" and e.followed == "keep_high"
    assert [s.label for s in e.scores] == [0.0, 1.0] and e.label == 1.0
    row = summarize([e])["conditions"][0]
    assert row["followed"]["keep_high"] == 1 and row["pref_dom"] == 1.0 and row["SA"] == 1.0


def test_the_stored_pairs_score_as_the_stored_calibration_statistics(stored):
    """The stored pairs' unasked demos (seeds 0 and 1, also the calibration set's first two) give each calibrated
    metric its value in config/preferences/calibration.json, within what another CPU changes: the two stored sets
    were recorded by the same code. The file says what produced it and how it is made again, every seed."""
    cal = Calibration.load()
    assert list(cal.calibration_set["seeds"]) == list(CALIBRATION_SEEDS)
    assert cal.calibration_set["command"] == "python -m sim_bridge.preference_demos calibrate"
    assert {"numpy", "mujoco", "cpu", "blas_core"} <= set(cal.calibration_set["produced_by"])
    assert set(cal.statistics) == set(calibrated_preferences(CAT))
    for seed in REFERENCE_SEEDS:
        apart = far_apart(scores_of(stored[(seed, None)]), as_stored(cal, seed), cal)
        assert not apart, (seed, apart)


def as_stored(cal: Calibration, seed: int) -> dict[str, float]:
    return {k: v[CALIBRATION_SEEDS.index(seed)] for k, v in cal.statistics.items()}


# ---- a sample recorded here, in every run ----------------------------------------------------------------------
@pytest.mark.slow
def test_the_stored_pairs_are_what_the_recorder_records_here_within_what_another_cpu_changes(stored, sample, numerics):
    """The sample recorded here and the same jobs as stored (on another machine, or before a change to the
    simulation or the expert: then record the set again, tests/fixtures/preference_trajectories.py): the same task
    and outcome, every preference's score within what another BLAS kernel changes (where comparable); and here
    too the composition honours each of its sides, by its own metric, and is honoured whole."""
    cal = Calibration.load()
    forced, sample_by = numerics
    if forced:  # this CPU runs the stored set's kernel: the sample's processes took it
        assert sample_by["blas_core"] == recorded_by()["blas_core"], (forced, sample_by)
    for job in SAMPLE:
        demo, metrics, fresh = sample[job]
        assert fresh.success == stored[job].success == (metrics["SR"] == 1.0), job
        assert fresh.task == stored[job].task, job
        np.testing.assert_allclose(fresh.tcp_pos, demo.ee_pos, atol=1e-6)  # the stored form is the recording
        if comparable(job, recorded_by(), sample_by):
            apart = far_apart(scores_of(fresh), scores_of(stored[job]), cal)
            assert not apart, (job, apart)
    for pid in COMPOSITION.split("+"):
        separated(sample[(0, None)][2], sample[(0, COMPOSITION)][2], pid, 0, cal)
    composed(sample[(0, COMPOSITION)][2], cal)


@pytest.mark.slow
def test_demos_store_the_preference_and_its_satisfaction_curve(sample):
    honoured, metrics, _ = sample[(0, COMPOSITION)]
    assert metrics["SR"] == 1.0
    assert "keep the gripper high during lateral moves" in honoured.attrs["preference"]
    stored = honoured.attrs["preferences"]
    stored = stored if isinstance(stored, list) else json.loads(stored)
    assert [p["id"] for p in stored] == COMPOSITION.split("+")
    assert stored[0]["params"]["height"] == pytest.approx(0.34)
    curves = score(Trajectory.from_demo(honoured), CAT.condition(COMPOSITION), CAT, Calibration.load()).scores
    assert honoured.satisfaction.shape == (honoured.num_samples, 2)
    for k, s in enumerate(curves):
        np.testing.assert_allclose(honoured.satisfaction[:, k], s.curve, equal_nan=True)
    assert honoured.scene_held is not None and honoured.scene_held.any()
    plain, _, _ = sample[(0, None)]
    assert plain.satisfaction is None and "preferences" not in plain.attrs


@pytest.mark.slow
def test_the_calibration_set_is_reproduced_bit_for_bit_within_one_run(sample, numerics):
    """Seed 0 of the calibration set recorded again, in a process of its own with the sample's BLAS kernel (the
    sample's in another): the same demo and the same values exactly. Reproduction is a property of the code and
    the kernel; another kernel changes the last bit (next test)."""
    first = sample[(0, None)][0]
    with computing_with(numerics[0]):
        ((again, _),) = record_many([(0, None)], workers=2)
    for key in ("actions", "ee_pos", "ee_ori", "gripper_states", "joint_states", "scene_pos"):
        assert np.array_equal(getattr(again, key), getattr(first, key)), key
    assert calibration_values([again], CAT) == calibration_values([first], CAT)


@pytest.mark.slow
def test_a_seed_of_the_calibration_set_recorded_here_scores_as_stored(sample, numerics):
    """Seed 0 of the calibration set recorded here: each calibrated metric's value as stored, within what another
    BLAS kernel changes, where comparable (the whole set: `python -m sim_bridge.preference_demos calibrate`)."""
    cal = Calibration.load()
    here = {k: v[0] for k, v in calibration_values([sample[(0, None)][0]], CAT).items()}
    assert set(here) == set(cal.statistics)
    if comparable((0, None), cal.calibration_set["produced_by"], numerics[1]):
        apart = far_apart(here, as_stored(cal, 0), cal)
        assert not apart, apart


@pytest.mark.slow  # about 10 s: matplotlib draws every demo's curves and path, then Chromium the page
def test_the_report_of_the_paired_demos_renders_with_its_tables_and_curves(stored, tmp_path):
    cal = Calibration.load()
    episodes, trajs = [], {}
    for (seed, pid), traj in stored.items():
        if pid in REFERENCE_PAIRS:
            continue
        cond = CAT.condition(paired_spec(pid, preference_task(seed)) if pid else None)
        episodes.append(score(traj, cond, CAT, cal))
        trajs[traj.name] = traj
    # the no-preference demos scored against each preference too: the "without" side of every pair
    for seed in REFERENCE_SEEDS:
        for pid in ("keep_high", "gentle_release"):
            e = score(stored[(seed, None)], CAT.condition(paired_spec(pid, preference_task(seed))), CAT, cal)
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
