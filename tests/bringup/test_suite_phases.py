"""test.sh's second phase collects only the realtime and the waiting modules (tests/realtime_modules.py): each name
of the lists is a module of the tree, and a name that is not (a module renamed) stops the listing, naming it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from realtime_modules import REALTIME_MODULES, SECOND_PHASE, TESTS, WAITING_MODULES, second_phase_paths


def test_the_second_phase_lists_every_realtime_and_waiting_module_once() -> None:
    out = subprocess.run([sys.executable, str(TESTS / "realtime_modules.py")], cwd=TESTS.parent, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    assert not REALTIME_MODULES & WAITING_MODULES
    assert sorted(Path(p).name for p in out) == sorted(REALTIME_MODULES | WAITING_MODULES)
    assert all((TESTS.parent / p).is_file() for p in out), out


def test_a_listed_module_that_is_gone_is_named(tmp_path) -> None:
    (tmp_path / "arm").mkdir()
    for name in sorted(SECOND_PHASE)[1:]:
        (tmp_path / "arm" / name).write_text("")
    with pytest.raises(SystemExit, match=sorted(SECOND_PHASE)[0]):
        second_phase_paths(tmp_path)
    (tmp_path / "arm" / sorted(SECOND_PHASE)[0]).write_text("")
    assert len(second_phase_paths(tmp_path)) == len(SECOND_PHASE)
