"""Batch conversion: a folder of Panda (or any LIBERO-layout) demos into AUBO demos, in parallel, resumable.

``python -m sim_bridge.convert_batch IN [IN ...] --out OUT [--jobs N | --ray auto|ADDR] [--no-images [--kinematic]]``

IN: LIBERO-layout HDF5 files or folders of them. Every demo becomes its own file
``OUT/<source file stem>/<demo>.hdf5`` (LIBERO layout, one demo), written as ``.partial`` and renamed
when complete, so an interrupted run (Ctrl-C, ``kill -9``, a crash) is resumed by running the same
command again: finished demos are kept and skipped, half-written ones are discarded and redone. Demos
are converted in ``--jobs`` worker processes (``--no-images --kinematic``: the fast path without physics,
sim_bridge.convert.convert_kinematic) (each its own MuJoCo world), or as tasks on a Ray cluster (``--ray``:
sim_bridge.convert_cluster), with a progress bar, and
``OUT/summary.json`` lists every demo with its tracking error, both outcomes and the time it took;
a table of them is printed at the end. A demo that cannot be converted (no task, unreachable start)
is reported in the summary with its reason; the others go on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from libero_workcell.demo_reading import placed_of
from libero_workcell.libero_format import (
    Demo,
    DemoReader,
    LiberoFormatError,
    demo_files,
    demo_order,
    open_demo_file,
)
from libero_workcell.progress import progress_bar
from sim_bridge.convert_cluster import ray_rows
from sim_bridge.convert_job import Job, already_done, convert_one
from workcell.cluster import ClusterError

SUMMARY_FILE = "summary.json"


def plan_jobs(inputs: Sequence[Path], out: Path) -> Iterator[Job]:
    """One job per demo of every input file (reading only the demo names: nothing is loaded yet). A file that
    is no HDF5 file, or that open_demo_file refuses (it would read outside its folder), stops the plan with
    LiberoFormatError before any work."""
    for path in demo_files(inputs):
        try:
            f = open_demo_file(path)
        except OSError as exc:
            raise LiberoFormatError(f"{path}: not an HDF5 file ({exc})") from None
        with f:
            names = sorted(f["data"].keys(), key=demo_order) if "data" in f else []
        for name in names:
            yield Job(path, name, out / path.stem / f"{name}.hdf5")


def run_batch(
    inputs: Sequence[Path], out: Path, jobs: int = 1, render: bool = True, progress: bool = True,
    kinematic: bool = False, on_ray: bool = False,
) -> list[dict[str, Any]]:  # fmt: skip
    """Convert every demo not yet converted; the summary rows of all (kept, converted, failed). ``on_ray``: as tasks
    on the Ray cluster this process has joined (workcell.cluster.connect), instead of in ``jobs`` processes."""
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.glob("*/*.hdf5.partial"):  # a run that was killed mid-write
        stale.unlink()
    todo, rows = [], []
    with SourceCache() as sources:
        for job in plan_jobs(inputs, out):
            done = already_done(job, lambda job=job: placed_of(sources.demo(job).attrs))
            (rows.append(done) if done is not None else todo.append(job))
        bar = progress_bar(len(todo), "converting", "demo", enabled=progress)
        if on_ray:
            converted = ray_rows(todo, out, render, kinematic, sources.demo)
        else:
            converted = local_rows(todo, jobs, render, kinematic)
        for row in converted:
            rows.append(row)
            bar.update()
        bar.close()
    rows.sort(key=lambda r: (r["source"], demo_order(r["demo"])))
    tmp = out / (SUMMARY_FILE + ".partial")
    tmp.write_text(json.dumps(rows, indent=2))
    tmp.replace(out / SUMMARY_FILE)
    return rows


class SourceCache:
    """The source file read last, kept open (its links checked once): jobs come file by file, and each reads its
    own demo only (without images), never the whole file."""

    def __init__(self) -> None:
        self.reader: DemoReader | None = None

    def demo(self, job: Job) -> Demo:
        if self.reader is None or self.reader.path != Path(job.source):
            self.close()
            self.reader = DemoReader(job.source)
        return self.reader.demo(job.demo)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
            self.reader = None

    def __enter__(self) -> SourceCache:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def local_rows(todo: Sequence[Job], jobs: int, render: bool, kinematic: bool) -> Iterator[dict[str, Any]]:
    """The rows of ``todo`` converted here, in ``jobs`` worker processes (one: in this one), as each finishes."""
    if jobs <= 1:
        for job in todo:
            yield convert_one(job, render, kinematic)
        return
    # spawn: each worker builds its own MuJoCo world and GL context (never forked from this process's)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        pending: set[Future] = {pool.submit(convert_one, job, render, kinematic) for job in todo}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                yield f.result()


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = [f"{'source':<28} {'demo':<9} {'status':<9} {'pos rms':>8} {'rot rms':>8}  {'outcome':<24} {'s':>6}"]
    for r in rows:
        if r["status"] == "failed":
            lines.append(f"{Path(r['source']).name:<28} {r['demo']:<9} failed    {r['error']}")
            continue
        same = {True: "same", False: "DIFFERENT", None: "n/a"}[r["same_outcome"]]
        placed = "".join("x" if p else "." for p in (r["placed"] or []))
        lines.append(
            f"{Path(r['source']).name:<28} {r['demo']:<9} {r['status']:<9} {r['tracking_pos_rms_m'] * 1e3:6.2f}mm "
            f"{r['tracking_rot_rms_deg']:6.2f}deg  {same + ' (' + placed + ')':<24} {r['seconds']:6.1f}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", type=Path, nargs="+", help="LIBERO-layout .hdf5 files or folders of them")
    ap.add_argument("--out", type=Path, required=True, help="output folder (resumed if it exists)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 1), help="worker processes")
    where.add_argument("--ray", metavar="auto|HOST:PORT",
                       help="as tasks on a Ray cluster: auto (this machine's, else one started for this run) or "
                            "its head's address (docs/cluster.md)")  # fmt: skip
    ap.add_argument("--no-images", action="store_true", help="headless: no camera images in the output")
    ap.add_argument("--kinematic", action="store_true",
                    help="with --no-images: the fast path without physics (no task outcome; replay for it), "
                         "falling back to physics per demo where a driver limit would act")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        if args.kinematic and not args.no_images:
            raise ValueError("--kinematic renders nothing: give --no-images too")
        rows = convert(args)
    except (FileNotFoundError, ValueError, ClusterError, ConnectionError) as exc:
        print(f"convert_batch: {exc}", file=sys.stderr)
        return 2
    print(table(rows))
    failed = sum(r["status"] == "failed" for r in rows)
    print(f"{len(rows)} demos: {sum(r['status'] == 'converted' for r in rows)} converted, "
          f"{sum(r['status'] == 'kept' for r in rows)} kept from an earlier run, {failed} failed; "
          f"summary in {args.out / SUMMARY_FILE}")  # fmt: skip
    return 1 if failed else 0


def convert(args: argparse.Namespace) -> list[dict[str, Any]]:
    """run_batch as the command line asks, on the Ray cluster it names (joined for the run alone) or here."""
    if not args.ray:
        return run_batch(args.inputs, args.out, args.jobs, render=not args.no_images, kinematic=args.kinematic)
    from workcell import cluster

    print(cluster.connect(args.ray), file=sys.stderr)
    try:
        return run_batch(args.inputs, args.out, render=not args.no_images, kinematic=args.kinematic, on_ray=True)
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    from sim_bridge.convert_batch import main as _main  # by its name: Ray and the spawned workers import it so

    raise SystemExit(_main())
