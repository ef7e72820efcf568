"""Paired demonstrations with and without each preference on the simulated workcell, and the calibration of
the preference labels from the no-preference ones.

``python -m sim_bridge.preference_demos calibrate [--out config/preferences/calibration.json]`` records the
calibration set (no-preference demos of seeds CALIBRATION_SEEDS: sim_bridge.preference_expert's task family
and style), scores every continuous metric on each, and writes the bins with the values they came from.
``python -m sim_bridge.preference_demos pairs OUT_DIR [--preferences ID ...] [--seeds ...] [--images]`` writes
``none.hdf5`` and one ``<id>.hdf5`` per preference, demo i of each from seed i: the same task, the same style,
the preference honoured or not, in LIBERO's layout with the preference and its satisfaction curve stored.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import numpy as np

from libero_workcell.config_files import find_config_file
from libero_workcell.libero_format import Demo
from libero_workcell.progress import counted, progress_bar
from libero_workcell.task import TaskSpec
from preferences.catalogue import Catalogue, Condition, Preference
from preferences.labels import CALIBRATION_FILE, Calibration, calibrate
from preferences.metrics import METRICS, satisfaction_curve
from preferences.segment import subtasks
from preferences.trajectory import Trajectory
from sim_bridge.aubo_demos import ENV_ARGS, record_expert_demo
from sim_bridge.demo_recorder import write_episodes
from sim_bridge.preference_expert import no_preference_style, preference_expert, preference_task
from sim_bridge.provenance import produced_by

CALIBRATION_SEEDS: Final = tuple(range(8))


def paired_spec(pref_id: str, task: TaskSpec) -> str:
    """The spec a paired demo of ``task`` asks: the catalogue's defaults, the workpiece ones made to fit the task
    (the second arrival first; the first arrival in the right-hand slot, where it would not go unasked)."""
    if pref_id == "first_workpiece":
        return f"first_workpiece:workpiece={task.workpieces[1]}"
    if pref_id == "slot_for":
        return f"slot_for:workpiece={task.workpieces[0]},slot=right"
    return pref_id


def condition_for(seed: int, specs: str | None, catalogue: Catalogue) -> tuple[TaskSpec, Condition]:
    task = preference_task(seed)
    if specs is None:
        return task, Condition()
    parts = [paired_spec(s, task) if ":" not in s else s for s in specs.split("+")]
    condition = catalogue.condition(parts)
    return condition.apply(task), condition


def record(seed: int, specs: str | None, name: str = "demo_0", render: bool = False) -> tuple[Demo, dict]:
    """One demo of the seed's task, asked ``specs`` (None: no preference)."""
    catalogue = Catalogue.load()
    task, condition = condition_for(seed, specs, catalogue)
    return record_expert_demo(task, name, render, expert=preference_expert(seed, condition, catalogue))


def _record_job(job: tuple[int, str | None]) -> tuple[Demo, dict]:
    return record(*job)


def record_many(
    jobs: Sequence[tuple[int, str | None]], workers: int = 2, progress: bool = False
) -> list[tuple[Demo, dict]]:
    """Many demos, in ``workers`` new processes (each episode is independent and deterministic; 1: in this one),
    in the order of ``jobs``; ``progress``: a bar of the demos recorded on stderr."""
    with progress_bar(len(jobs), "demos", "demo", enabled=progress) as bar:
        if workers <= 1 or not jobs:
            return [_record_job(j) for j in counted(jobs, bar)]
        with multiprocessing.get_context("spawn").Pool(min(workers, len(jobs))) as pool:
            return list(counted(pool.imap(_record_job, jobs, chunksize=1), bar))


def calibrated_preferences(catalogue: Catalogue) -> dict[str, Preference]:
    """Every continuous preference by bin key: each choice of the named things it looks at (each part, region)."""
    out: dict[str, Preference] = {}
    for d in catalogue.definitions.values():
        if METRICS[d.metric].binary:
            continue
        named = [name for name, p in d.params.items() if p.type != "number"]
        choices = [sorted(getattr(catalogue, p.type + "s")) for name, p in d.params.items() if p.type != "number"]
        for combo in itertools.product(*choices):
            spec = d.id + (":" + ",".join(f"{n}={v}" for n, v in zip(named, combo, strict=True)) if named else "")
            pref = catalogue.preference(spec)
            out[pref.bin_key] = pref
    return out


def calibration_values(demos: Sequence[Demo], catalogue: Catalogue) -> dict[str, list[float]]:
    """Each continuous preference's value on each no-preference demo, by bin key."""
    trajs = [Trajectory.from_demo(d) for d in demos]
    segs = [subtasks(t) for t in trajs]
    return {key: [float(satisfaction_curve(t, pref.metric, pref.params, catalogue.named, s)[-1])
                  for t, s in zip(trajs, segs, strict=True)]
            for key, pref in calibrated_preferences(catalogue).items()}  # fmt: skip


def calibration_from(values: dict[str, list[float]], catalogue: Catalogue, seeds: Sequence[int]) -> Calibration:
    prefs = calibrated_preferences(catalogue)
    bins = {}
    for key, vals in values.items():
        pref = prefs[key]
        bins[key] = calibrate(key, pref.metric, pref.better, vals, METRICS[pref.metric].resolution)
    described = {"seeds": list(seeds), "task": "sim_bridge.preference_expert.preference_task",
                 "style": "sim_bridge.preference_expert.no_preference_style",
                 "styles": [{k: (v.tolist() if isinstance(v, np.ndarray) else v)
                             for k, v in no_preference_style(s).items()} for s in seeds],
                 "command": "python -m sim_bridge.preference_demos calibrate",
                 "produced_by": produced_by()}  # fmt: skip
    return Calibration(bins, described, values)


def run_calibration(seeds: Sequence[int] = CALIBRATION_SEEDS, workers: int = 2, progress: bool = True) -> Calibration:
    catalogue = Catalogue.load()
    recorded = record_many([(s, None) for s in seeds], workers, progress)
    failed = [s for s, (_, m) in zip(seeds, recorded, strict=True) if m["SR"] < 1.0]
    if failed:
        raise RuntimeError(f"calibration demos of seeds {failed} failed the task: they cannot calibrate anything")
    return calibration_from(calibration_values([d for d, _ in recorded], catalogue), catalogue, seeds)


def write_pairs(out: Path, preferences: Sequence[str], seeds: Sequence[int], render: bool = False) -> list[Path]:
    """``none.hdf5`` and ``<preference>.hdf5`` in ``out``: demo i of each file from seeds[i]."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    conditions = (None, *preferences)
    with progress_bar(len(conditions) * len(seeds), "demos", "demo") as bar:  # every file's, one bar
        for specs in conditions:
            path = out / f"{(specs or 'none').replace('+', '__').replace(':', '_')}.hdf5"
            tasks = [condition_for(s, specs, Catalogue.load())[0] for s in seeds]
            seed_of = {id(t): s for t, s in zip(tasks, seeds, strict=True)}
            write_episodes(path, tasks, lambda t, name, sp=specs, so=seed_of: record(so[id(t)], sp, name, render),
                           ENV_ARGS, bar)  # fmt: skip
            paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate", help="record the calibration set and write the bins")
    cal.add_argument("--out", type=Path, default=None, help=f"default: config/{CALIBRATION_FILE}")
    cal.add_argument("--workers", type=int, default=2)
    pairs = sub.add_parser("pairs", help="paired demos with and without each preference")
    pairs.add_argument("out", type=Path)
    pairs.add_argument("--preferences", nargs="+", default=None, help="specs (default: every catalogue preference)")
    pairs.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    pairs.add_argument("--images", action="store_true", help="render both cameras (slower, larger)")
    a = ap.parse_args(argv)
    if a.command == "calibrate":
        calibration = run_calibration(workers=a.workers)
        out = a.out or find_config_file("preferences/catalogue.yaml").parent / Path(CALIBRATION_FILE).name
        out.write_text(calibration.to_json())
        for key, b in sorted(calibration.bins.items()):
            print(f"{key:36s} median {b.median:9.4f} spread {b.spread:8.4f} thresholds "
                  + " ".join(f"{t:9.4f}" for t in b.thresholds))  # fmt: skip
        print(f"wrote {out}")
        return 0
    prefs = a.preferences or sorted(Catalogue.load().definitions)
    for path in write_pairs(a.out, prefs, a.seeds, a.images):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
