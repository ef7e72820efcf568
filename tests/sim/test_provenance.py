"""What produced a number, and computing elsewhere as it was computed: a process started with kernel_env's
environment takes that OpenBLAS kernel, and a kernel this CPU cannot run is never forced."""

from __future__ import annotations

import platform

import pytest

from sim_bridge import provenance
from sim_bridge.provenance import KERNEL_FLAGS, kernel_env, produced_by, produced_by_child


@pytest.mark.skipif(platform.machine() != "x86_64", reason="OpenBLAS's x86-64 kernels")
def test_a_process_started_with_a_kernels_environment_computes_with_that_kernel() -> None:
    here = produced_by()["blas_core"]
    other = "Nehalem" if here != "Nehalem" else "Sandybridge"  # SSE4.2 / AVX: every x86-64 CPU of this kind
    env = kernel_env(other)
    assert env == {"OPENBLAS_CORETYPE": other}
    child = produced_by_child(env)
    assert (child["blas_core"], child["OPENBLAS_CORETYPE"]) == (other, other)
    assert produced_by_child({})["blas_core"] == here  # and without it, the one OpenBLAS picks for this CPU


def test_a_kernel_this_cpu_lacks_or_one_not_listed_is_never_forced(monkeypatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(provenance, "_cpu_flags", lambda: frozenset({"sse4_2", "avx", "avx2"}))  # no FMA
    assert kernel_env("Sandybridge") == {"OPENBLAS_CORETYPE": "Sandybridge"}
    assert kernel_env("Haswell") is None  # AVX2 without FMA: not enough
    assert kernel_env("SkylakeX") is None
    assert kernel_env("Cooperlake") is None and kernel_env("") is None  # not listed: no guess
    monkeypatch.setattr(provenance, "_cpu_flags", lambda: frozenset().union(*KERNEL_FLAGS.values()))
    assert all(kernel_env(k) == {"OPENBLAS_CORETYPE": k} for k in KERNEL_FLAGS)
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")  # another architecture: none of these
    assert all(kernel_env(k) is None for k in KERNEL_FLAGS)
