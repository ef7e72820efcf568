"""workcell.cluster: the code version a head compares, its refusal of nodes running other code, and run_tasks' outcomes
(a call that raises is not run again). Drivers run in their own processes: Ray stays out of pytest's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workcell.cluster import REPO, code_version


def clone(into: Path) -> Path:
    """A clone of this checkout's commit (sharing its objects: quick, and no network)."""
    subprocess.run(["git", "clone", "-q", "--shared", str(REPO), str(into)], check=True, timeout=120)
    return into


def driver(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})  # fmt: skip


def test_the_code_version_is_the_commit_and_a_hash_of_uncommitted_changes(tmp_path: Path) -> None:
    a, b = clone(tmp_path / "a"), clone(tmp_path / "b")
    commit = subprocess.run(["git", "-C", str(a), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_version(a) == commit == code_version(a / "src" / "workcell")
    for checkout in (a, b):  # the same change in two clones, wherever they are: the same version
        with (checkout / "src" / "workcell" / "cluster.py").open("a") as f:
            f.write("# changed\n")
    code_version.cache_clear()  # once per process, as a worker computes it
    assert code_version(a) == code_version(b) != commit and code_version(a).startswith(commit + "+")
    assert code_version(tmp_path).startswith("unknown")


@pytest.mark.slow
def test_the_head_refuses_nodes_running_other_code(ray_cluster: str, tmp_path: Path) -> None:
    """Tasks on both nodes import workcell from a clone with a change the head does not have."""
    other = clone(tmp_path / "other")
    with (other / "src" / "workcell" / "cluster.py").open("a") as f:
        f.write("# another change\n")
    code = ("from workcell import cluster\n"
            f"cluster.connect({ray_cluster!r}, worker_env={{'PYTHONPATH': {f'{other}/src:{other}'!r}}})\n")  # fmt: skip
    done = driver(code)
    assert done.returncode == 1 and "ClusterError: this head runs" in done.stderr, done.stderr
    assert done.stderr.count(f"runs {code_version(other)}") == 2, done.stderr  # both nodes named
    assert "results from mixed code are not comparable" in done.stderr


@pytest.mark.slow
def test_run_tasks_yields_each_outcome_and_does_not_rerun_a_call_that_raised(ray_cluster: str) -> None:
    code = ("import json\nfrom workcell import cluster\ncluster.connect(" + repr(ray_cluster) + ")\n"
            "calls = [('good', ('{\"a\": 1}',)), ('bad', ('{',))]\n"
            "for o in sorted(cluster.run_tasks(json.loads, calls), key=lambda o: o.index):\n"
            "    print(o.index, o.value, o.failures, o.node is not None)\n"
            "cluster.shutdown()\n")  # fmt: skip
    done = driver(code)
    assert done.returncode == 0, done.stderr
    raised = "JSONDecodeError: Expecting property name enclosed in double quotes: line 1 column 2 (char 1)"
    assert done.stdout.splitlines() == ["0 {'a': 1} () True", f"1 None ({raised!r},) False"]
