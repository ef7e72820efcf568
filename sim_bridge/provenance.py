"""What produced a number: library versions, the CPU and the BLAS kernel it ran on.

Why: contact-rich physics amplifies the last bit of a floating-point result, and that bit depends on the
BLAS kernel OpenBLAS picks for the CPU (``OPENBLAS_CORETYPE`` can force another one). A figure stored in the
repository (calibration statistics, benchmark output) therefore records where it was made, so a reader can
tell a regression from another machine; and a process elsewhere can compute with the kernel that made it
(:func:`kernel_env`): the kernel, not the CPU model, decides that last bit (docs/preferences.md).
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import subprocess
import sys
from functools import cache
from importlib import metadata
from typing import Any

PACKAGES = ("numpy", "scipy", "mujoco")
# What each OpenBLAS x86-64 kernel needs of the CPU (/proc/cpuinfo flags), by the name openblas_get_corename gives
# it: forcing one the CPU lacks ends the process on an illegal instruction.
KERNEL_FLAGS: dict[str, frozenset[str]] = {
    "Nehalem": frozenset({"sse4_2"}),
    "Sandybridge": frozenset({"avx"}),
    "Haswell": frozenset({"avx2", "fma"}),
    "Zen": frozenset({"avx2", "fma"}),
    "SkylakeX": frozenset({"avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl"}),
}


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpuinfo(field: str) -> str | None:
    """The first value of ``field`` in /proc/cpuinfo, or None (no such file or field)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith(field):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_flags() -> frozenset[str]:
    return frozenset((_cpuinfo("flags") or "").split())


def _cpu_model() -> str:
    return _cpuinfo("model name") or platform.processor() or platform.machine()


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


def kernel_env(kernel: str) -> dict[str, str] | None:
    """The environment in which a new process on this machine computes with OpenBLAS's ``kernel`` (as another
    machine's :func:`produced_by` named it); None where this CPU lacks its instructions or the kernel is not one
    listed here (no guess: a wrong one crashes the process)."""
    needs = KERNEL_FLAGS.get(kernel)
    if platform.machine() != "x86_64" or needs is None or not needs <= _cpu_flags():
        return None
    return {"OPENBLAS_CORETYPE": kernel}


def produced_by_child(env: dict[str, str]) -> dict[str, Any]:
    """What a new process of this interpreter, started with ``env`` over this one's environment, reports of itself
    (:func:`produced_by`): whether a kernel :func:`kernel_env` forces is the one it computes with."""
    ask = "import json; from sim_bridge.provenance import produced_by; print(json.dumps(produced_by()))"
    out = subprocess.run([sys.executable, "-c", ask], env={**os.environ, **env}, capture_output=True, text=True,
                         check=True, timeout=120)  # fmt: skip
    return dict(json.loads(out.stdout))
