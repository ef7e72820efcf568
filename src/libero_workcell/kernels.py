"""Numeric kernels: plain Python until a process first needs their compiled speed.

The servo path's arithmetic on small arrays (the OSC law at the physics rate, the arm's chain and IK several times a
tick) costs more in numpy's per-call overhead than in the arithmetic, so it is compiled with numba. numba's import and
its first use cost about a second of CPU in every process that pays them, which a process that never runs the hot
path (the world, the device emulators, the CLI) should not: a module marks its kernels with :func:`kernel` (functions
written in numba's subset of Python and numpy) and they run as Python until :func:`compile_kernels` is called, by
the code whose loop needs the speed (the arm driver before its first servo tick, the OSC law at its first step). Then
every registered kernel becomes its compiled version in its module (compiled once, or loaded from numba's cache
beside the module), so kernels calling each other by module-level name call compiled code.

A kernel of scalar arithmetic gives the same bits compiled or not (no fast-math: nothing is reordered or fused). A
kernel that calls LAPACK (``np.linalg``) goes through scipy's LAPACK once compiled and numpy's before: its entry point
compiles first, so it only ever runs compiled.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

_registered: list[tuple[dict[str, Any], str]] = []  # (the module's globals, the kernel's name there)
_warmers: list[Callable[[], object]] = []
_compiled = False


def kernel(fn: F) -> F:
    """Register ``fn`` (a module-level function) as a kernel of its module; returns it unchanged, or compiled in a
    process that compiled its kernels before this module was imported."""
    _registered.append((fn.__globals__, fn.__name__))
    if _compiled:
        from numba import njit

        return njit(cache=True)(fn)
    return fn


def warmer(fn: F) -> F:
    """Register ``fn``, which calls its module's kernels with the argument types the servo path gives them, to run
    when the kernels are compiled: each is then compiled (or loaded from the cache) before the loop that needs it."""
    _warmers.append(fn)  # (in a module imported after the others compiled, its kernels load at their first call)
    return fn


def compile_kernels() -> None:
    """Make every registered kernel its compiled version and run the warmers (once per process)."""
    global _compiled
    if _compiled:
        return
    from numba import njit

    for namespace, name in _registered:
        namespace[name] = njit(cache=True)(namespace[name])
    _compiled = True
    for warm in _warmers:
        warm()


def compiled() -> bool:
    """Whether this process compiled its kernels."""
    return _compiled


def signatures() -> dict[str, int]:
    """How many argument types each compiled kernel was compiled for (``module.name`` -> count): one each on the
    servo path, since every other compiles again, for seconds, in the first process that meets it."""
    return {f"{ns['__name__']}.{name}": len(getattr(ns[name], "signatures", ())) for ns, name in _registered}
