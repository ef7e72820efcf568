"""The commands that README.md and docs/ tell a user to type, as a test reads them.

A command is a line of a fenced block (bash, sh, console or no language) or an inline code span that starts
with a program the stack ships or a user runs (``workcell``, ``python -m``, ``ros2 launch``, ``./run.sh``...);
a line ending in ``\\`` continues, ``&&`` chains, ``  # ...`` is a comment, ``[...]`` an optional part and
``<...>`` or ``...`` a placeholder. tests/test_docs_commands.py checks each one.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
SHELL_LANGS = {"", "bash", "sh", "console", "shell"}
PROGRAMS = ("./run.sh", "./test.sh", "workcell", ".venv/bin/workcell", "python", "python3", ".venv/bin/python",
            "ros2", "colcon", "pip", "git", "rosdep", "uv", "eval", "cd", "source", "scripts/", "bench/",
            "sudo", "udevadm", "export", "mkdir", "ls", "h5ls")  # fmt: skip
INLINE_PROGRAMS = ("workcell ", ".venv/bin/", "python -m ", "ros2 launch ", "ros2 run ", "./run.sh", "./test.sh",
                   "bench/", "scripts/")  # fmt: skip


@dataclass(frozen=True)
class DocCommand:
    file: str  # relative to the repository
    line: int
    text: str  # as written, continuation lines joined, comment removed

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.text}"

    def tokens(self) -> list[str]:
        """The words, optional ``[...]`` parts dropped."""
        text = re.sub(r"(^|\s)\[[^\]]*\]", " ", self.text)  # an optional part, not a list value (:=[2,0,1])
        try:
            words = shlex.split(text)
        except ValueError:  # an unbalanced quote in prose
            words = text.split()
        return [w for w in words if w != "\\"]


def _strip_comment(line: str) -> str:
    out, quote = [], ""
    for i, ch in enumerate(line):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            break
        out.append(ch)
    return "".join(out).rstrip()


def _is_command(text: str, programs: tuple[str, ...]) -> bool:
    return any(text == p.strip() or text.startswith(p if p.endswith(("/", " ")) else p + " ") for p in programs)


def _split_chain(text: str) -> list[str]:
    return [part.strip() for part in re.split(r"\s&&\s|\s;\s", text) if part.strip()]


def _fenced(rel: str, lines: list[str]) -> list[DocCommand]:
    found: list[DocCommand] = []
    lang: str | None = None
    pending, start = "", 0
    for no, raw in enumerate(lines, 1):
        fence = re.match(r"^\s*```(\w*)", raw)
        if fence:
            lang = None if lang is not None else fence.group(1).lower()
            continue
        if lang is None or lang not in SHELL_LANGS:
            continue
        line = raw.strip()
        if line.startswith("$ "):
            line = line[2:]
        if not pending:
            start = no
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        text, pending = _strip_comment(pending + line), ""
        for part in _split_chain(text):
            if _is_command(part, PROGRAMS):
                found.append(DocCommand(rel, start, part))
    return found


def _inline(rel: str, lines: list[str]) -> list[DocCommand]:
    found: list[DocCommand] = []
    in_fence = False
    for no, raw in enumerate(lines, 1):
        if re.match(r"^\s*```", raw):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for span in re.findall(r"(?<!`)`([^`\n]+)`(?!`)", raw):
            span = span.strip()
            if _is_command(span, INLINE_PROGRAMS):
                found.extend(DocCommand(rel, no, part) for part in _split_chain(_strip_comment(span)))
    return found


def doc_commands() -> list[DocCommand]:
    """Every command in README.md and docs/*.md, in file order."""
    out: list[DocCommand] = []
    for path in DOC_FILES:
        rel = str(path.relative_to(REPO))
        lines = path.read_text().splitlines()
        out += sorted(_fenced(rel, lines) + _inline(rel, lines), key=lambda c: c.line)
    return out
