"""The one home of how this stack talks to Ray (``--ray auto|HOST:PORT``): join or start a cluster, refuse nodes that
run other code, run calls as tasks whose results come back as each finishes, running again those whose worker process
or machine died. docs/cluster.md says how a lab starts a cluster and what each machine needs.

Ray is imported inside these functions only, so a run without ``--ray`` never imports it. Its settings are made here,
before that import (Ray reads them as it is imported), each only where the environment does not already say:
loopback (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` keeps Ray from replacing 127.0.0.1 with the machine's network
address; a node whose address is not exactly 127.0.0.1 binds its servers on every interface), token authentication
on, usage statistics off. This module never starts a dashboard.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import socket
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CODE_ROOTS = (REPO / "src", REPO)  # where this checkout's packages import from (setup.py's package_dir)
LOOPBACK = "127.0.0.1"
RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",  # 127.0.0.1 stays 127.0.0.1, so every Ray server binds loopback
    "RAY_AUTH_MODE": "token",  # every connection carries the cluster's token (Ray's default only for ray.init)
    "RAY_USAGE_STATS_ENABLED": "0",
}
WORKER_ENV = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "OPENBLAS_CORETYPE")  # the head's, carried to every task
ATTEMPTS = 3  # runs of one task in all, when its worker process or machine dies


class ClusterError(RuntimeError):
    """The cluster cannot be used as asked: a node runs other code, or Ray was imported before its settings."""


@dataclass(frozen=True)
class Outcome:
    """One call's end: its value, why each failed attempt failed, where the one that finished ran (None: none did)."""

    index: int  # the call's position in run_tasks' ``calls``
    value: Any = None
    failures: tuple[str, ...] = ()
    node: str | None = None


def connect(address: str, worker_env: Mapping[str, str] | None = None) -> str:
    """Join the Ray cluster at ``address``, every node checked to run this code; a one-line description to print.

    ``auto``: the cluster this machine belongs to (``RAY_ADDRESS``, else the one ``ray start`` started here), or when
    none runs, a single-machine Ray on loopback for this run alone (:func:`shutdown` stops it). ``HOST:PORT``: the
    cluster whose head listens there. Every task gets :func:`task_env` (``worker_env`` last)."""
    if "://" in address:
        raise ClusterError(f"--ray takes auto or the head's HOST:PORT, not a Ray Client address ({address})")
    _prepare()
    import ray

    target = cluster_address(address)
    options: dict[str, Any] = {"runtime_env": {"env_vars": task_env(worker_env)}, "log_to_driver": False,
                               "logging_level": logging.WARNING}  # fmt: skip
    if target is None:
        ray.init(address="local", include_dashboard=False, _node_ip_address=LOOPBACK, **options)
    else:
        ray.init(address=target, **options)
    try:
        check_nodes()
        return describe(started=target is None)
    except BaseException:
        ray.shutdown()
        raise


def shutdown() -> None:
    """Leave the cluster (a single-machine Ray started for this run stops with it)."""
    if "ray" in sys.modules:
        import ray

        ray.shutdown()


def cluster_address(address: str) -> str | None:
    """The head to join for ``address``; None: start a single-machine Ray (``auto``, and no cluster runs here).
    Only ``ray start``'s own record counts, with a node of it alive here: never a test's or another job's Ray."""
    if address != "auto":
        return address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    from ray._private import services

    started = services.find_bootstrap_address(None)  # what `ray start` wrote in Ray's temp folder
    return started if started and started in services.find_gcs_addresses() else None


def task_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment every task's process gets: PYTHONPATH with this checkout's code first (a node whose clone sits
    elsewhere imports its own, and :func:`check_nodes` compares the two), WORKER_ENV as set here, then ``extra``."""
    paths = [str(p) for p in CODE_ROOTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
    env.update({name: os.environ[name] for name in WORKER_ENV if name in os.environ})
    env.update(extra or {})
    return env


@cache
def code_version(where: Path = REPO) -> str:
    """The commit of the checkout holding ``where``, with ``+`` and a hash of its uncommitted changes to tracked files
    when it has any: results made by different code are not comparable, so the head refuses nodes whose differs.
    Computed once per process."""

    def git(*args: str) -> bytes:
        return subprocess.run(["git", "-C", str(where), *args], capture_output=True, check=True, timeout=60).stdout

    try:
        commit = git("rev-parse", "HEAD").decode().strip()
        changes = git("diff", "HEAD", "--binary")
    except (OSError, subprocess.SubprocessError):
        return f"unknown ({where} is not in a git checkout)"
    return f"{commit}+{hashlib.sha256(changes).hexdigest()[:12]}" if changes else commit


def node_code(timeout: float = 300.0) -> dict[str, str]:
    """Every alive node's code version (or why it has none), keyed by node, from a CPU-less task pinned to it."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe = ray.remote(num_cpus=0, max_retries=0)(_code_here)
    refs = {f"{n['NodeManagerAddress']} {n['NodeID'][:8]}": probe.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in ray.nodes() if n["Alive"]}  # fmt: skip
    found = {}
    for node, ref in refs.items():
        try:
            found[node] = ray.get(ref, timeout=timeout)
        except ray.exceptions.RayError as exc:
            found[node] = f"none: {reason(exc)}"
    return found


def check_nodes() -> None:
    """ClusterError unless every node runs the code this head runs."""
    here = code_version()
    other = {node: version for node, version in node_code().items() if version != here}
    if other:
        nodes = "; ".join(f"node {node} runs {version}" for node, version in sorted(other.items()))
        raise ClusterError(f"this head runs {here}, but {nodes}: results from mixed code are not comparable "
                           "(check that commit out there, or stop its raylet)")  # fmt: skip


def describe(started: bool) -> str:
    """The cluster in one line: where, how many nodes and CPUs, and the code they all run."""
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    cpus = sum(n["Resources"].get("CPU", 0.0) for n in nodes)
    how = "started for this run" if started else "joined"
    return (f"Ray at {ray.get_runtime_context().gcs_address} ({how}): {len(nodes)} node{'s' * (len(nodes) != 1)}, "
            f"{cpus:g} CPUs, code {code_version()}")  # fmt: skip


def run_tasks(
    fn: Callable[..., Any], calls: Iterable[tuple[str, tuple]], attempts: int = ATTEMPTS, num_cpus: float = 1.0
) -> Iterator[Outcome]:
    """``fn(*args)`` for each ``(name, args)`` of ``calls`` as a Ray task named ``name`` (its worker's process title
    reads ``ray::<name>``), each :class:`Outcome` yielded as it finishes. A task whose worker process or machine dies
    runs again wherever the cluster has room, up to ``attempts`` runs in all; one whose ``fn`` raised does not (it
    would raise again). At most twice the cluster's CPUs are in flight, so ``calls`` is read as room frees. A result
    made by other code than this head's stops the run (ClusterError). ``fn`` must be importable by name on the nodes.
    """
    import ray

    here = code_version()
    task = ray.remote(num_cpus=num_cpus, max_retries=0)(_run)
    window = max(2, int(2 * ray.cluster_resources().get("CPU", 1.0)))
    todo = enumerate(calls)
    flying: dict[Any, tuple[int, str, tuple, tuple[str, ...]]] = {}

    def submit(index: int, name: str, args: tuple, failures: tuple[str, ...]) -> None:
        flying[task.options(name=name).remote(fn, *args)] = (index, name, args, failures)

    def refill() -> None:
        while len(flying) < window and (call := next(todo, None)) is not None:
            index, (name, args) = call
            submit(index, name, args, ())

    refill()
    while flying:
        [ref], _ = ray.wait(list(flying), num_returns=1)
        index, name, args, failures = flying.pop(ref)
        try:
            versions, node, value = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:
            yield Outcome(index, failures=(*failures, reason(exc)))
        except ray.exceptions.RayError as exc:  # its worker process or its machine died
            failures = (*failures, reason(exc))
            if len(failures) < attempts:
                submit(index, name, args, failures)
            else:
                yield Outcome(index, failures=failures)
        else:
            if versions != {here}:
                raise ClusterError(f"{name} ran on {node} with code {', '.join(sorted(versions))}, this head runs "
                                   f"{here}: results from mixed code are not comparable")  # fmt: skip
            yield Outcome(index, value, failures, node)
        refill()


def mark_folder(marker: Path) -> str:
    """Write a new random token into ``marker`` (a file in the head's output folder) and return it: a worker that
    reads the same token there (:func:`sees`) shares the folder and writes its files in place."""
    token = secrets.token_hex(16)
    marker.write_text(token)
    return token


def sees(marker: Path, token: str) -> bool:
    """Whether this machine sees the head's output folder: ``marker`` there holds this run's ``token``."""
    try:
        return marker.read_text() == token
    except OSError:
        return False


def reason(exc: BaseException) -> str:
    """An exception in one line: its type and the first line of its message (a task's own exception, not Ray's
    wrapper, whose message carries the traceback)."""
    cause = getattr(exc, "cause", None)
    exc = cause if isinstance(cause, BaseException) else exc
    first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
    return f"{type(exc).__name__}: {first}"


def _run(fn: Callable[..., Any], *args: Any) -> tuple[set[str], str, Any]:
    """On a worker: ``fn(*args)``, with the code versions it ran (this module's checkout, and ``fn``'s when ``fn``
    is of this project: its package is one of CODE_ROOTS') and where."""
    import ray

    versions = {code_version()}
    if any((root / fn.__module__.split(".")[0]).is_dir() for root in CODE_ROOTS):
        versions.add(code_version(Path(sys.modules[fn.__module__].__file__ or "").resolve().parent))
    node = f"{socket.gethostname()} {ray.get_runtime_context().get_node_id()[:8]}"
    return versions, node, fn(*args)


def _code_here() -> str:
    return code_version()


def _prepare() -> None:
    """Ray's settings (RAY_ENV) where the environment does not say otherwise, and a private token if none exists."""
    for name, value in RAY_ENV.items():
        os.environ.setdefault(name, value)
    if "ray" in sys.modules and os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0":
        from ray._private import ray_constants

        if ray_constants.ENABLE_RAY_CLUSTER:
            raise ClusterError("Ray was imported before workcell.cluster set it to loopback: import it through here")
    if os.environ["RAY_AUTH_MODE"] == "token" and not ({"RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"} & set(os.environ)):
        _own_token(Path.home() / ".ray" / "auth_token")


def _own_token(path: Path) -> None:
    """Ray's default token file, made readable by its owner only if it is missing (Ray would make it with the umask's
    mode); a warning if other users can read an existing one (they could join the cluster with it)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
    elif path.stat().st_mode & 0o077:
        print(f"workcell.cluster: other users can read the Ray token {path}: chmod 600 it", file=sys.stderr)
