"""An evaluation's results file: one JSON line per finished trial, written and synced as it finishes.

Why a line per trial: an interrupted run (Ctrl-C, a kill, a machine that went down) keeps every trial that
finished, and a rerun with the same output folder resumes with the others. A trial that failed is a line too
(``failed``: the reason); a later line for the same trial (a retry's) supersedes it.
"""

from __future__ import annotations

import json
import os
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from evaluation.protocol import Trial

RESULTS_FILE = "results.jsonl"


def load_results(out_dir: Path) -> list[dict[str, Any]]:
    """Every line of an earlier run, failed trials' included, in order (a torn line, from a kill mid-write, is
    ignored)."""
    path = out_dir / RESULTS_FILE
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def latest_results(out_dir: Path) -> list[dict[str, Any]]:
    """Each trial's last line (a retry's supersedes the failure before it), in trial order."""
    latest = {int(r["trial"]["index"]): r for r in load_results(out_dir)}
    return [latest[k] for k in sorted(latest)]


def finished_indices(out_dir: Path) -> set[int]:
    """The trials an earlier run finished (failed ones are not: a rerun tries them again)."""
    return {int(r["trial"]["index"]) for r in load_results(out_dir) if not r.get("failed")}


def error_text(exc: BaseException) -> tuple[str, str]:
    """(the reason, the traceback's last lines) of a trial's exception."""
    return f"{type(exc).__name__}: {exc}", "".join(traceback.format_exception(exc)[-3:])[-2000:]


def failed_row(trial: Trial, reason: str, tb: str, wall_s: float | None, attempts: list[str] | None = None
               ) -> dict[str, Any]:  # fmt: skip
    """The line of a trial that did not run to its end: which trial (its fields: cheap, unlike the task that
    ``as_dict`` derives), the reason, where (the traceback's last lines) and every attempt's reason."""
    row = {"trial": asdict(trial), "failed": reason, "traceback": tb, "wall_s": wall_s}
    if attempts:
        row["attempts"] = attempts
    return row


def append_result(out_dir: Path, row: dict[str, Any]) -> None:
    path = out_dir / RESULTS_FILE
    torn = path.is_file() and path.stat().st_size > 0 and not path.read_bytes().endswith(b"\n")
    with open(path, "a", encoding="utf-8") as f:
        f.write(("\n" if torn else "") + json.dumps(row) + "\n")  # after a torn line, on a line of its own
        f.flush()
        os.fsync(f.fileno())
