"""What ``workcell check`` checks for a recorder (libero_workcell.preflight): where its session goes.

The session file's episode folder (or the nearest folder of its path that exists: the recorder creates the rest)
is writable, the session file too if it exists, and the disk has ``min_free_mb`` free. Nothing is created:
``os.access`` and ``shutil.disk_usage`` only, on the simulated workcell as on the physical one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from libero_workcell import faults
from libero_workcell.preflight import FAIL, OK, Check, Context
from recorder.session_file import MIN_FREE_BYTES, episodes_dir_of

MIB = 1024**2


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    path = Path(str(params["out_path"])).absolute()  # every recorder of the graph names its session
    need = int(params.get("min_free_mb", MIN_FREE_BYTES // MIB))
    what = f"session {path}"
    folder = episodes_dir_of(path)
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return [Check(node, what, FAIL, f"{existing} is not a folder this user can write",
                      f"record elsewhere (record_path:=...) or fix the permissions of {existing}")]  # fmt: skip
    if path.exists() and not os.access(path, os.W_OK):
        return [Check(node, what, FAIL, "the session file exists and is not writable",
                      "record into a new file (record_path:=...), or fix its permissions")]  # fmt: skip
    free = shutil.disk_usage(existing).free // MIB
    if free < need:
        return [Check(node, what, FAIL, f"{free} MiB free on its disk, {need} MiB needed (min_free_mb)",
                      faults.BY_CODE["REC-DISK"].recovery)]  # fmt: skip
    resumed = "resumed (it exists)" if path.exists() else "new"
    return [Check(node, what, OK, f"writable, {free} MiB free ({need} needed); {resumed}")]
