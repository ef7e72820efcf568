"""One demo of a batch conversion: its job, its conversion into its own file, and its summary row.

The unit both runners of :mod:`sim_bridge.convert_batch` hand out: its local worker processes and the Ray tasks of
:mod:`sim_bridge.convert_cluster` (which is why it lives apart from either).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libero_workcell.demo_reading import placed_of
from libero_workcell.libero_format import Demo, LiberoFormatError, read_demo, read_demos, write_demo_file
from sim_bridge.aubo_demos import ENV_ARGS as AUBO_ENV_ARGS

ENV_ARGS = {**AUBO_ENV_ARGS, "retargeting": "seed 002 Appendix D: k = 3, s_p = 0.05 m, s_R = 0.5 rad"}

@dataclass(frozen=True)
class Job:
    source: Path
    demo: str
    out: Path


def convert_one(job: Job, render: bool, kinematic: bool = False, demo: Demo | None = None,
                write_to: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Worker: convert one demo (``demo``, else read from ``job.source``) and write its file (atomically) to
    ``write_to`` (default ``job.out``); the summary row. Never raises."""
    t0 = time.monotonic()
    row: dict[str, Any] = {"source": str(job.source), "demo": job.demo, "output": str(job.out)}
    try:
        from sim_bridge.convert import convert_demo

        demo = demo if demo is not None else source_demo(job)
        result = convert_demo(demo, render=render, kinematic=kinematic)
        target = write_to or job.out
        target.parent.mkdir(parents=True, exist_ok=True)
        info = {"language_instruction": str(demo.attrs.get("language_instruction", ""))}
        write_demo_file(target, [result.demo], info, ENV_ARGS)
        row.update(summary_of(result.demo, result.source_placed), status="converted",
                   conversion=result.demo.attrs["conversion"])  # fmt: skip
    except Exception as exc:  # one bad demo must not stop the batch: its row says why
        row.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    row["seconds"] = time.monotonic() - t0
    return row


def source_demo(job: Job) -> Demo:
    """``job``'s demo as its source file holds it, without images (the conversion renders its own)."""
    return read_demo(job.source, job.demo)


def summary_of(demo: Demo, source_placed: list[bool] | None) -> dict[str, Any]:
    """A converted demo's summary row: its length, tracking error and outcome against its source's."""
    placed = placed_of(demo.attrs)
    return {
        "steps": demo.num_samples,
        "tracking_pos_rms_m": float(demo.attrs["tracking_pos_rms_m"]),
        "tracking_rot_rms_deg": float(demo.attrs["tracking_rot_rms_deg"]),
        "source_placed": source_placed,
        "placed": placed,
        "same_outcome": None if source_placed is None or placed is None else placed == list(source_placed),
    }


def already_done(job: Job, source_placed: Callable[[], list[bool] | None]) -> dict[str, Any] | None:
    """The summary row of a demo converted by an earlier run (its file complete), or None.
    ``source_placed()``: the source demo's recorded outcome (read only when needed)."""
    if not job.out.is_file():
        return None
    try:
        demo = read_demos(job.out).demos[0]
    except LiberoFormatError:
        return None  # unreadable: convert it again (the new file replaces it only when complete)
    row = {"source": str(job.source), "demo": job.demo, "output": str(job.out), "status": "kept", "seconds": 0.0,
           "conversion": demo.attrs.get("conversion")}  # fmt: skip
    row.update(summary_of(demo, source_placed()))
    return row
