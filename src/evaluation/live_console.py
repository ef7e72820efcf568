"""``python -m evaluation ... --console PORT``: the evaluation's progress on the operator's console page.

The trials run on worker graphs (each on a DDS domain of its own, perhaps on other machines), so this console is
not a node of a graph: it serves the same page (console.app) from the evaluation's process, with the evaluation
panel only: trial k of N and the running table, read from the results file as the scheduler writes it. It
shows and has no buttons; it binds loopback only.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Final

from console.app import create_app
from console.frames import FrameStore
from console.model import ConsoleModel
from console.server import ConsoleServer
from evaluation.results import latest_results
from libero_workcell.loopback import LOOPBACK

POLL_S: Final = 1.0


def panel(rows: list[dict[str, Any]], total: int) -> dict[str, Any]:
    """The evaluation panel from each trial's latest results line."""
    table = []
    for row in rows:
        trial, outcome = row.get("trial", {}), row.get("outcome") or {}
        perm = tuple(trial.get("slot_permutation", ()))
        table.append({
            "trial": trial.get("index"),
            "task": f"belt {trial.get('belt_speed')} m/s, combination {trial.get('combination')}, slots {perm}"
                    + (f", {trial['preference']}" if trial.get("preference") else ""),
            "success": None if row.get("failed") else bool(outcome.get("SR")),
            "metrics": {"PCR_T": outcome.get("PCR_T"), "PCR_S": outcome.get("PCR_S")},
            "wall_s": row.get("wall_s"),
            "error": str(row["failed"])[:200] if row.get("failed") else (row.get("aborted") or ""),
            "retried": bool(row.get("retried")),
        })  # fmt: skip
    done = sum(1 for r in rows if not r.get("failed"))
    return {"total": total, "done": done, "failed": len(rows) - done, "rows": table}


class EvaluationConsole:
    """The page at ``http://127.0.0.1:port`` while the evaluation runs; :meth:`close` at its end."""

    def __init__(self, out_dir: Path, total: int, port: int) -> None:
        self.out_dir, self.total = Path(out_dir), int(total)
        self.model = ConsoleModel()
        app = create_app(self.model, FrameStore(()), None, host=LOOPBACK, port=port, title="evaluation")
        self.server = ConsoleServer(app, LOOPBACK, port)
        self._stop = threading.Event()
        self.refresh()
        self.server.start()
        self._thread = threading.Thread(target=self._poll, name="evaluation-console", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return self.server.url

    def refresh(self) -> None:
        self.model.update_evaluation(panel(latest_results(self.out_dir), self.total))

    def _poll(self) -> None:
        while not self._stop.wait(POLL_S):
            self.refresh()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.refresh()
        self.server.stop()
