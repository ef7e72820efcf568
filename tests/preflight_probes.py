"""Child probes that go wrong, for tests/test_preflight.py (run by libero_workcell.preflight.in_child)."""

from __future__ import annotations

import os
import time
from typing import Any


def crash(arg: dict[str, Any]) -> dict[str, Any]:
    """As an SDK that takes its process down (SIGABRT) before answering."""
    os.abort()


def hang(arg: dict[str, Any]) -> dict[str, Any]:
    """As an SDK call that never returns."""
    time.sleep(float(arg["seconds"]))
    return {}


def echo(arg: dict[str, Any]) -> dict[str, Any]:
    print("text an SDK prints without a newline", end="", flush=True)
    return {"got": arg}
