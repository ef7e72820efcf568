"""What produced a number: library versions, the CPU and the BLAS kernel it ran on.

Why: contact-rich physics amplifies the last bit of a floating-point result, and that bit depends on the
BLAS kernel OpenBLAS picks for the CPU (``OPENBLAS_CORETYPE`` can force another one). A figure stored in the
repository (calibration statistics, benchmark output) therefore records where it was made, so a reader can
tell a regression from another machine.
"""

from __future__ import annotations

import ctypes
import os
import platform
from functools import cache
from importlib import metadata
from typing import Any

PACKAGES = ("numpy", "scipy", "mujoco")


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def blas_core() -> str:
    """The kernel the OpenBLAS loaded with numpy chose ("Haswell", "SkylakeX", ...), or "unknown"."""
    import numpy  # noqa: F401  (loads the BLAS library whose name we look up)

    try:
        with open("/proc/self/maps", encoding="utf-8") as f:
            paths = sorted({p for p in (line.split()[-1] for line in f) if "openblas" in p and ".so" in p})
    except OSError:
        return "unknown"
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
            getter = getattr(lib, symbol, None)
            if getter is not None:
                getter.restype = ctypes.c_char_p
                return str(getter().decode())
    return "unknown"


@cache
def produced_by() -> dict[str, Any]:
    """This process's numerical environment, as a JSON-able mapping."""
    return {
        "python": platform.python_version(),
        **{package: _version(package) for package in PACKAGES},
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "blas_core": blas_core(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
    }
