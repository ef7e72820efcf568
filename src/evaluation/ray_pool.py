"""Trials as Ray actors: one warm graph per actor, on whatever machine of the cluster Ray places it.

Imported only with ``--ray`` (nothing else imports Ray). Each actor is a :class:`TrialActor`: on its machine it
claims a DDS domain no other process there holds (libero_workcell.dds.claim_domain: DDS stays on that machine's
loopback) and keeps its host (evaluation.warm_graph.WarmWorkcell) from trial to trial, as a local worker process
does. Results come back to the head as each trial ends and the scheduler (evaluation.scheduler) writes them, so
the progress bar, the table, resuming and retrying are the local runner's. An actor or machine that dies fails its
trial's attempt; the trial is retried on a new actor, which Ray spreads over the cluster's machines.

Files: when the head's output folder is the actor's too (a shared file system: the actor finds the head's token in
it), the actor writes there, as a local worker does; otherwise it runs in a scratch folder on its machine and
sends the trial's files (rollout, timing) back with its row, and the head writes them into its output folder.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from evaluation.protocol import Trial
from evaluation.results import error_text
from evaluation.scheduler import Failure, HostFactory, Row, TrialHost, close_quietly

TOKEN_FILE = ".ray-run-token"  # the head's token in its output folder: an actor that reads it shares the folder
FILE_KEYS = ("rollout", "timing")  # the row's fields that name a trial's files
CLOSE_TIMEOUT = 60.0  # s for an actor to stop its graph


class TrialActor:
    """A worker on a cluster node (Ray makes it a remote class: ``ray.remote(TrialActor)``)."""

    def __init__(self, factory: HostFactory, out_dir: str, token: str) -> None:
        from libero_workcell import dds
        from workcell import cluster

        self.claim = dds.claim_domain()
        shared = Path(out_dir)
        self.shared = cluster.sees(shared / TOKEN_FILE, token)
        self.out_dir = shared if self.shared else Path(tempfile.mkdtemp(prefix="libero-eval-"))
        self.factory = factory
        self.host: TrialHost | None = None

    def where(self) -> dict[str, Any]:
        import socket

        return {"host": socket.gethostname(), "domain": self.claim.domain_id, "shared_output": self.shared}

    def run(self, trial: Trial) -> tuple[str, Any, dict[str, bytes]]:
        """("row", the row, its files by path relative to the output folder when not shared), or ("failed", the
        reason, the traceback); a failed trial's host is closed (its graph may be broken)."""
        try:
            if self.host is None:
                self.host = self.factory(self.out_dir, self.claim.domain_id)
            row = self.host.run(trial)
        except Exception as exc:
            self._close_host()
            return "failed", error_text(exc), {}
        files: dict[str, bytes] = {}
        if not self.shared:
            for key in FILE_KEYS:
                if row.get(key):
                    path = Path(row[key])
                    rel = path.relative_to(self.out_dir).as_posix()
                    files[rel] = path.read_bytes()
                    row[key] = rel
        return "row", row, files

    def _close_host(self) -> None:
        host, self.host = self.host, None
        close_quietly(host)

    def close(self) -> None:
        self._close_host()
        if not self.shared:
            shutil.rmtree(self.out_dir, ignore_errors=True)
        self.claim.release()


class RayActors:
    """A pool of :class:`TrialActor` on the Ray cluster at ``address`` (workcell.cluster.connect): ``actors`` at
    once (default: one per CPU of the cluster, ``cpus_per_actor`` each)."""

    def __init__(self, factory: HostFactory, out_dir: Path, address: str, actors: int | None = None,
                 cpus_per_actor: float = 1.0) -> None:  # fmt: skip
        from workcell import cluster

        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.description = cluster.connect(address)  # before Ray is imported: it sets Ray's network settings
        import ray

        self._ray = ray
        self._token = cluster.mark_folder(self.out_dir / TOKEN_FILE)
        cpus = float(ray.cluster_resources().get("CPU", 1.0))
        self.slots = max(1, int(actors or cpus // cpus_per_actor))
        self._remote = ray.remote(num_cpus=cpus_per_actor, max_restarts=0, scheduling_strategy="SPREAD")(TrialActor)
        self.factory = factory
        self._idle: list[Any] = []
        self._running: dict[Any, tuple[Any, Trial, float]] = {}  # ObjectRef -> (actor, trial, start)

    def free(self) -> int:
        return self.slots - len(self._running)

    def busy(self) -> int:
        return len(self._running)

    def submit(self, trial: Trial) -> None:
        actor = self._idle.pop() if self._idle else self._remote.remote(self.factory, str(self.out_dir), self._token)
        self._running[actor.run.remote(trial)] = (actor, trial, time.monotonic())

    def wait(self) -> list[tuple[Trial, Row | Failure, float]]:
        ray = self._ray
        ready, _ = ray.wait(list(self._running), num_returns=1)
        out: list[tuple[Trial, Row | Failure, float]] = []
        for ref in ready:
            actor, trial, t0 = self._running.pop(ref)
            try:
                kind, payload, files = ray.get(ref)
            except ray.exceptions.RayError as exc:  # the actor, its process or its machine is gone
                out.append((trial, Failure(f"RayActorError: the trial's actor died ({_first_line(exc)})"),
                            time.monotonic() - t0))  # fmt: skip
                with contextlib.suppress(Exception):
                    ray.kill(actor)
                continue
            if kind == "failed":
                out.append((trial, Failure(*payload), time.monotonic() - t0))
            else:
                out.append((trial, land_files(self.out_dir, payload, files), time.monotonic() - t0))
            self._idle.append(actor)
        return out

    def close(self) -> None:
        """Every actor stops its graph (an interrupted trial's actor is killed: Ray ends its process, and its graph
        ends with it), then this process leaves the cluster."""
        ray = self._ray
        for actor, _trial, _t0 in self._running.values():
            with contextlib.suppress(Exception):
                ray.kill(actor)
        closing = [a.close.remote() for a in self._idle]
        with contextlib.suppress(Exception):
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_TIMEOUT)
        for actor in self._idle:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        self._idle.clear()
        self._running.clear()
        with contextlib.suppress(OSError):
            (self.out_dir / TOKEN_FILE).unlink()
        from workcell import cluster

        cluster.shutdown()


def land_files(out_dir: Path, row: Row, files: dict[str, bytes]) -> Row:
    """A row from an actor that did not share the output folder: its files written here (each whole, or not at all;
    an earlier attempt's kept aside), its paths made this folder's. A path that would leave the folder is refused:
    what an actor sends is not trusted to name where it goes."""
    root = out_dir.resolve()
    for rel in files:
        if root not in (root / rel).resolve().parents:
            raise ValueError(f"an actor sent a file outside the output folder: {rel!r}")
    for rel, data in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            target.rename(target.with_name(f"{target.stem}.interrupted-{int(time.time())}{target.suffix}"))
        tmp = target.with_name(target.name + ".partial")
        tmp.write_bytes(data)
        tmp.replace(target)
    landed = dict(row)
    for key in FILE_KEYS:
        if landed.get(key) in files:
            landed[key] = str(out_dir / landed[key])
    return landed


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__
