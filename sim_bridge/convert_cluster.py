"""Batch conversion on a Ray cluster (``convert_batch --ray``): each demo a task, its row back as it finishes.

The head reads each demo (without images: the conversion renders its own) and hands it to its task, so a worker
machine needs no copy of the inputs. Where the head's output folder is visible to the worker (a shared file system:
the task finds the marker file holding this run's random token), the task writes the demo's file there itself,
atomically, as the local runner does; elsewhere it returns the file's bytes and the head writes them. A task whose
worker process or machine dies runs again (workcell.cluster.run_tasks); after the last attempt its row is failed,
naming every attempt's reason.
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from libero_workcell.demo_reading import placed_of
from libero_workcell.libero_format import Demo
from sim_bridge.convert_job import Job, already_done, convert_one
from workcell import cluster

MARKER = ".convert_batch_token"  # in the output folder while a --ray run writes there


def ray_rows(
    todo: Sequence[Job], out: Path, render: bool, kinematic: bool, demo_of: Callable[[Job], Demo]
) -> Iterator[dict[str, Any]]:
    """The rows of ``todo`` converted as tasks on the joined Ray cluster, as each finishes (``demo_of``: a job's
    source demo, read here on the head)."""
    marker = out / MARKER
    token = cluster.mark_folder(marker)
    submitted: list[Job] = []  # by the index run_tasks reports
    unread: list[dict[str, Any]] = []  # jobs whose demo the head could not read: no task, a failed row

    def calls() -> Iterator[tuple[str, tuple]]:
        for job in todo:
            try:
                demo = demo_of(job)
            except Exception as exc:
                unread.append(failed_row(job, f"{type(exc).__name__}: {exc}"))
                continue
            submitted.append(job)
            yield f"convert {job.source.stem}/{job.demo}", (job, demo, render, kinematic, marker, token)

    try:
        for outcome in cluster.run_tasks(convert_task, calls()):
            yield from unread
            unread.clear()
            yield row_of(submitted[outcome.index], outcome)
        yield from unread
    finally:
        marker.unlink(missing_ok=True)


def convert_task(job: Job, demo: Demo, render: bool, kinematic: bool, marker: Path, token: str
                 ) -> tuple[dict[str, Any], bytes | None]:  # fmt: skip
    """On a worker: ``job``'s demo converted; its file written where the head wants it when this worker sees the
    head's folder (None), else its bytes. A complete file there already (an attempt that died after writing it) is
    kept."""
    demo = copy.deepcopy(demo)  # Ray hands numpy arguments over read-only (zero-copy); the conversion writes to its own
    if cluster.sees(marker, token):
        done = already_done(job, lambda: placed_of(demo.attrs))
        return (convert_one(job, render, kinematic, demo) if done is None else {**done, "status": "converted"}), None
    with tempfile.TemporaryDirectory(prefix="convert_") as tmp:
        local = Path(tmp) / job.out.name
        row = convert_one(job, render, kinematic, demo, write_to=local)
        return row, (local.read_bytes() if local.is_file() else None)


def row_of(job: Job, outcome: cluster.Outcome) -> dict[str, Any]:
    """A task's outcome as its summary row (its file written here when the task sent its bytes), with where it ran
    and why earlier attempts failed."""
    if outcome.node is None:
        reasons = outcome.failures
        error = reasons[0] if len(reasons) == 1 else "; ".join(f"attempt {i}: {r}" for i, r in enumerate(reasons, 1))
        return failed_row(job, error, reasons)
    row, data = outcome.value
    try:
        if data is not None:
            write_new(job.out, data)
    except OSError as exc:
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    row["node"] = outcome.node
    if outcome.failures:
        row["failed_attempts"] = list(outcome.failures)
    return row


def failed_row(job: Job, error: str, failures: Sequence[str] = ()) -> dict[str, Any]:
    row = {"source": str(job.source), "demo": job.demo, "output": str(job.out), "status": "failed", "error": error,
           "seconds": 0.0}  # fmt: skip
    if failures:
        row["failed_attempts"] = list(failures)
    return row


def write_new(path: Path, data: bytes) -> None:
    """``data`` as the new file ``path``, complete or absent (written beside as ``.partial``, then linked to its
    name: an existing file is never overwritten, FileExistsError)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        tmp.write_bytes(data)
        os.link(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
