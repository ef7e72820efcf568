"""The one progress behaviour (libero_workcell.progress, docs/operator.md "Progress on long commands"): a bar on a
terminal, plain lines elsewhere (the first, at most one per LINE_INTERVAL_S, the last with the final counts),
nothing when disabled; lines printed beside a bar come out whole."""

from __future__ import annotations

import io
import re

from conftest import CODE_FOLDERS, REPO

from libero_workcell.progress import LINE_INTERVAL_S, BesideBars, counted, progress_bar, write_beside


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_bar_is_plain_lines_its_start_and_its_final_counts() -> None:
    out = io.StringIO()
    with progress_bar(1000, "converting", "demo", file=out) as bar:
        for _ in range(1000):  # many updates, far quicker than LINE_INTERVAL_S: no line for each
            bar.update()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "\r" not in out.getvalue(), lines
    assert lines[0].startswith("converting:") and "0/1000" in lines[0]
    assert lines[1].startswith("converting: 100%") and "1000/1000" in lines[1]
    assert bar.mininterval == LINE_INTERVAL_S and bar.maxinterval == LINE_INTERVAL_S


def test_on_a_terminal_it_is_tqdms_bar_redrawn_in_place() -> None:
    out = Terminal()
    with progress_bar(3, "trials", "trial", file=out) as bar:
        for _ in counted(range(3), bar):
            pass
    assert "\r" in out.getvalue() and "3/3" in out.getvalue()
    assert bar.mininterval < LINE_INTERVAL_S


def test_a_disabled_bar_shows_nothing_and_a_bar_without_a_total_counts() -> None:
    out = io.StringIO()
    with progress_bar(3, "trials", "trial", file=out, enabled=False) as bar:
        bar.update(3)
    assert out.getvalue() == ""
    with progress_bar(None, "fitting", "iteration", file=out) as bar:
        bar.update(7)
    assert out.getvalue().splitlines()[-1].startswith("fitting: 7iteration")


def test_lines_beside_a_bar_come_out_whole(capsys) -> None:
    out = io.StringIO()
    stream = BesideBars(out)
    stream.write("[alpha] one\n[beta] tw")
    stream.write("o\n")
    print("three", file=stream)
    write_beside("four", out)
    assert out.getvalue() == "[alpha] one\n[beta] two\nthree\nfour\n"
    assert not stream.isatty() and BesideBars(Terminal()).isatty()
    with progress_bar(1, "x", file=None) as bar:  # default: stderr, never stdout
        bar.update()
    captured = capsys.readouterr()
    assert captured.out == "" and "1/1" in captured.err


def test_every_bar_is_in_the_operators_table() -> None:
    """docs/operator.md, "Progress on long commands", names what each bar shows: a new bar goes into the table
    (its label as the code gives it; an f-string's fixed part)."""
    doc = (REPO / "docs" / "operator.md").read_text().split("## Progress on long commands", 1)[1].split("\n## ")[0]
    calls = [m for path in (*(p for folder in CODE_FOLDERS for p in folder.rglob("*.py")),
                            *(REPO / "tools").rglob("*.py"))
             for m in re.findall(r"progress_bar\([^,]+, (f?)\"([^\"]+)\"", path.read_text())]  # fmt: skip
    assert len(calls) >= 10, calls
    for is_f, label in calls:
        shown = re.sub(r"\{[^}]*\}", "", label).strip() if is_f else label
        assert shown in doc, f"progress bar {label!r} is not in docs/operator.md's table"
