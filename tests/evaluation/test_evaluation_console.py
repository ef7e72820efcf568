"""``--console``: the evaluation's progress on the console page: trial k of N and the running table, read from
the results file as the scheduler appends to it, shown in headless Chromium (no buttons: it only shows)."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from browser import browser_page
from conftest import TEST_OUTPUT

from evaluation.live_console import EvaluationConsole
from evaluation.protocol import protocol_trials
from evaluation.results import append_result, failed_row


def row(trial, sr: float, retried: bool = False) -> dict:
    return {"trial": {"index": trial.index, "belt_speed": trial.belt_speed, "combination": trial.combination,
                      "slot_permutation": list(trial.slot_permutation), "preference": ""},
            "outcome": {"SR": sr, "PCR_T": 1.0 if sr else 2 / 3, "PCR_S": 1.0 if sr else 1 / 3}, "wall_s": 61.5,
            "aborted": None, **({"retried": True} if retried else {})}  # fmt: skip


def test_the_progress_page_counts_trials_and_tables_them_as_they_are_written(tmp_path) -> None:
    trials = protocol_trials((0.03, 0.05), 2, "")
    append_result(tmp_path, row(trials[0], 1.0))
    console = EvaluationConsole(tmp_path, len(trials), 0)
    try:
        state = json.loads(urllib.request.urlopen(console.url + "/api/state", timeout=10).read())
        assert state["controls"] is False and state["cameras"] == {}
        assert (state["evaluation"]["done"], state["evaluation"]["total"]) == (1, 4)
        with browser_page(1200, 700) as page:
            page.goto(console.url)
            page.wait_for_function("document.querySelector('#eval-progress').textContent === '1 of 4 trials done'")
            append_result(tmp_path, row(trials[1], 0.0, retried=True))
            append_result(tmp_path, failed_row(trials[2], "RuntimeError: graph died", "", 12.0, ["a", "b", "c"]))
            page.wait_for_function("document.querySelectorAll('#eval-rows tr').length === 3")
            assert page.inner_text("#eval-progress") == "2 of 4 trials done, 1 failed (a rerun retries them)"
            cells = [[c.strip() for c in r.split("\t")] for r in page.inner_text("#eval-rows").splitlines()]
            assert [c[0] for c in cells] == ["0", "1", "2"]
            assert cells[0][2:5] == ["yes", "1.00", "1.00"] and cells[1][2] == "no" and cells[1][-1] == "retried"
            assert cells[2][2] == "-" and "graph died" in cells[2][-1]  # failed: no outcome, the reason
            for graph_only in ("#hold", "#arm-panel", "#conveyor-panel", ".cameras"):  # no graph behind this page
                assert page.is_hidden(graph_only), graph_only
            (TEST_OUTPUT / "console").mkdir(exist_ok=True)
            page.screenshot(path=str(TEST_OUTPUT / "console" / "evaluation.png"), full_page=True)
            assert page.errors == []
    finally:
        console.close()
    # closed: its threads have ended (none left waiting on a join's timeout) and the port takes no connection
    assert not [t.name for t in threading.enumerate() if t.name in ("console-http", "evaluation-console")]
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(console.url + "/api/state", timeout=10)
