"""Trials to workers, results to the file as they come, failures retried on a fresh worker up to a bound.

A worker is a *host*: something that runs trial after trial (a warm simulated graph: evaluation.warm_graph; a
function, for the physical cell and the tests: :class:`FunctionHost`). A *pool* holds the hosts: in this process
(:class:`InProcess`), in worker processes of their own (:class:`LocalWorkers`), or as Ray actors across machines
(evaluation.ray_pool). The scheduler (:func:`run_trials`) is the same for all: it skips the trials the output
folder already holds, hands out the rest, writes each result as it arrives, and gives a trial that failed (its
host raised, or its worker died) to a fresh host again, at most ``max_attempts`` times in all; then the trial is
recorded as failed with every attempt's reason. Retrying is safe because a trial is a property of its settings
(docs/sim_time.md): a harness failure (a node that crashed, a worker that died) says nothing of the policy.
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evaluation.protocol import Trial
from evaluation.results import append_result, error_text, failed_row, finished_indices, latest_results
from libero_workcell.progress import progress_bar, write_beside

MAX_ATTEMPTS = 3  # per trial: the first and two retries
CHILD_STOP_TIMEOUT = 30.0  # s an interrupted worker has to stop its graph before it is killed

Row = dict[str, Any]


class TrialHost(Protocol):
    """Runs trials one after another (the result row of each; raises when a trial cannot be run)."""

    def run(self, trial: Trial) -> Row: ...

    def close(self) -> None: ...


# (output folder, DDS domain id) -> a host. Picklable (a module-level function or class, or a partial of one):
# worker processes and actors build their own host.
HostFactory = Callable[[Path, int], TrialHost]


class FunctionHost:
    """A host that calls ``fn(trial, out_dir, domain)`` per trial: nothing kept warm between trials."""

    def __init__(self, fn: Callable[[Trial, Path, int], Row], out_dir: Path, domain: int) -> None:
        self.fn, self.out_dir, self.domain = fn, out_dir, domain

    def run(self, trial: Trial) -> Row:
        return self.fn(trial, self.out_dir, self.domain)

    def close(self) -> None:
        pass


def function_host(fn: Callable[[Trial, Path, int], Row]) -> HostFactory:
    return functools.partial(FunctionHost, fn)


def close_quietly(host: TrialHost | None) -> None:
    """Close a host after a failed trial: its graph may be broken, and a failure to close must not hide the trial's
    own."""
    if host is not None:
        with contextlib.suppress(Exception):
            host.close()


@dataclass(frozen=True)
class Failure:
    """A trial that did not run to its end: the reason, where, and the exception itself where it is at hand."""

    reason: str
    traceback: str = ""
    exc: BaseException | None = field(default=None, compare=False)


class Pool(Protocol):
    def free(self) -> int:
        """How many more trials it takes now."""

    def busy(self) -> int:
        """How many trials it is running."""

    def submit(self, trial: Trial) -> None: ...

    def wait(self) -> list[tuple[Trial, Row | Failure, float]]:
        """Block until at least one trial finished: (trial, its row or failure, wall s)."""

    def close(self) -> None:
        """Stop every worker (and its graph); after an interrupt, give them time to stop cleanly."""


def run_trials(
    trials: Sequence[Trial],
    out_dir: Path,
    pool: Pool,
    progress: bool = True,
    stop_on_failure: bool = False,
    max_attempts: int = MAX_ATTEMPTS,
    say: Callable[[str], None] | None = None,
) -> list[Row]:
    """Run the trials ``out_dir``'s results do not hold yet (or hold as failed) on ``pool``; every result written
    as it comes. A failed attempt goes to a fresh host, up to ``max_attempts`` in all, then the trial's line says
    why (:func:`evaluation.results.failed_row`). ``stop_on_failure`` (the physical cell): the first failure ends
    the run instead, that trial unrecorded, its exception raised. Returns each trial's latest row."""
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    out_dir.mkdir(parents=True, exist_ok=True)
    done = finished_indices(out_dir)
    queue = deque(t for t in trials if t.index not in done)
    bar = progress_bar(len(trials), "trials", "trial", enabled=progress, initial=len(trials) - len(queue))
    say = say or (lambda text: write_beside(text, sys.stderr))  # beside the bar, never through it
    reasons: dict[int, list[str]] = {}
    try:
        while queue or pool.busy():
            while queue and pool.free():
                pool.submit(queue.popleft())
            for trial, result, wall_s in pool.wait():
                if isinstance(result, Failure):
                    if stop_on_failure:
                        raise result.exc if result.exc is not None else RuntimeError(result.reason)
                    tried = reasons.setdefault(trial.index, [])
                    tried.append(result.reason)
                    if len(tried) < max_attempts:
                        say(f"trial {trial.index}: attempt {len(tried)} of {max_attempts} failed ({result.reason}); "
                            "again on a fresh worker")  # fmt: skip
                        queue.appendleft(trial)
                        continue
                    row = failed_row(trial, result.reason, result.traceback, wall_s, tried)
                else:
                    row = dict(result)
                    if trial.index in reasons:
                        row["retried"] = reasons[trial.index]  # what failed before the attempt that ran
                append_result(out_dir, row)
                bar.update()
    finally:
        pool.close()
        bar.close()
    return latest_results(out_dir)


# ---------------------------------------------------------------------- in this process
class InProcess:
    """One host in this process, a trial at a time (the physical cell: one cell, the operator at it)."""

    def __init__(self, factory: HostFactory, out_dir: Path, domain: int) -> None:
        self.factory, self.out_dir, self.domain = factory, out_dir, domain
        self._host: TrialHost | None = None
        self._next: Trial | None = None

    def free(self) -> int:
        return 0 if self._next is not None else 1

    def busy(self) -> int:
        return 1 if self._next is not None else 0

    def submit(self, trial: Trial) -> None:
        self._next = trial

    def wait(self) -> list[tuple[Trial, Row | Failure, float]]:
        trial, self._next = self._next, None
        assert trial is not None
        t0 = time.monotonic()
        try:
            if self._host is None:
                self._host = self.factory(self.out_dir, self.domain)
            result: Row | Failure = self._host.run(trial)
        except Exception as exc:  # one trial's failure; its host may be broken: the next trial gets a new one
            result = Failure(*error_text(exc), exc=exc)
            self._drop_host()
        return [(trial, result, time.monotonic() - t0)]

    def _drop_host(self) -> None:
        host, self._host = self._host, None
        close_quietly(host)

    def close(self) -> None:
        self._drop_host()


# ---------------------------------------------------------------------- worker processes on this machine
class _Worker:
    def __init__(self, ctx: Any, factory: HostFactory, out_dir: Path, domain: int | None) -> None:
        self.conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(target=worker_main, args=(factory, out_dir, domain, child), name="eval-worker")
        self.proc.start()
        child.close()  # only the worker holds it now: its death reads as EOF here
        self.domain = domain
        self.trial: Trial | None = None
        self.t0 = 0.0


class LocalWorkers:
    """``workers`` processes of their own (spawn: no rclpy state forked), each keeping its host between trials
    and on a DDS domain no other process on this machine has (``domains``, else each claims one:
    libero_workcell.dds.claim_domain). A worker that dies fails its own trial only and is replaced."""

    def __init__(self, factory: HostFactory, out_dir: Path, workers: int, domains: Sequence[int] | None = None
                 ) -> None:  # fmt: skip
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        if domains is not None and len(domains) < workers:
            raise ValueError(f"{workers} workers need as many DDS domains, got {list(domains)}")
        self.factory, self.out_dir, self.slots = factory, out_dir, workers
        self._ctx = multiprocessing.get_context("spawn")
        self._slots: list[int | None] = list(domains[:workers]) if domains is not None else [None] * workers
        self._workers: list[_Worker] = []
        self._idle_slots = list(range(workers))
        self._slot_of: dict[int, int] = {}  # id(worker) -> slot

    def free(self) -> int:
        return sum(w.trial is None for w in self._workers) + len(self._idle_slots)

    def busy(self) -> int:
        return sum(w.trial is not None for w in self._workers)

    def submit(self, trial: Trial) -> None:
        worker = next((w for w in self._workers if w.trial is None), None)
        if worker is None:
            slot = self._idle_slots.pop(0)
            worker = _Worker(self._ctx, self.factory, self.out_dir, self._slots[slot])
            self._slot_of[id(worker)] = slot
            self._workers.append(worker)
        worker.conn.send(trial)
        worker.trial, worker.t0 = trial, time.monotonic()

    def wait(self) -> list[tuple[Trial, Row | Failure, float]]:
        busy = {w.conn: w for w in self._workers if w.trial is not None}
        out: list[tuple[Trial, Row | Failure, float]] = []
        for conn in multiprocessing.connection.wait(list(busy)):
            worker = busy[conn]
            trial, worker.trial = worker.trial, None
            assert trial is not None
            try:
                kind, *payload = conn.recv()
                result: Row | Failure = payload[0] if kind == "row" else Failure(*payload)
            except (EOFError, OSError):  # it died before it could answer
                worker.proc.join()
                code = worker.proc.exitcode
                result = Failure(f"ChildProcessError: the trial's worker process died (exit code {code})")
                self._retire(worker)
            except Exception as exc:
                result = Failure(f"ChildProcessError: the trial's worker process sent garbage ({exc})")
                self._retire(worker)
            out.append((trial, result, time.monotonic() - worker.t0))
        return out

    def _retire(self, worker: _Worker) -> None:
        self._workers.remove(worker)
        worker.conn.close()
        if worker.proc.is_alive():
            worker.proc.terminate()
        worker.proc.join()
        self._idle_slots.append(self._slot_of.pop(id(worker)))

    def close(self) -> None:
        """Each worker stops its graph and ends: an idle one when told, one still in a trial (an interrupted run)
        at once, by SIGTERM (on Ctrl-C it got the same SIGINT and is already at it)."""
        for w in self._workers:
            if w.trial is not None:
                w.proc.terminate()
            else:
                with contextlib.suppress(OSError, ValueError):
                    w.conn.send(None)
        deadline = time.monotonic() + CHILD_STOP_TIMEOUT
        for w in self._workers:
            w.proc.join(timeout=max(0.0, deadline - time.monotonic()))
            if w.proc.is_alive():
                w.proc.kill()
                w.proc.join()
            w.conn.close()
        self._workers.clear()


def worker_main(factory: HostFactory, out_dir: Path, domain: int | None, conn: Any) -> None:
    """A worker process: claims its DDS domain (unless given one), then runs each trial it is sent on its host
    until told to stop (None) or its parent is gone. A trial that raises is answered as a failure and its host
    closed (a graph that failed a trial may be broken): the next trial gets a fresh one."""
    from libero_workcell import dds

    signal.signal(signal.SIGTERM, _interrupted)  # stopped from outside: stop the graph (finally), as on Ctrl-C
    _end_with_parent()
    claim = dds.claim_domain() if domain is None else None
    domain = claim.domain_id if claim is not None else int(domain)  # type: ignore[arg-type]
    host: TrialHost | None = None
    try:
        while True:
            try:
                trial = conn.recv()
            except (EOFError, OSError):
                return
            if trial is None:
                return
            try:
                if host is None:
                    host = factory(out_dir, domain)
                conn.send(("row", host.run(trial)))
            except Exception as exc:
                conn.send(("failed", *error_text(exc)))
                old, host = host, None
                close_quietly(old)
    except KeyboardInterrupt:  # Ctrl-C reached the whole process group: stop the graph (finally) and end
        pass
    finally:
        if host is not None:
            host.close()
        if claim is not None:
            claim.release()


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _end_with_parent() -> None:
    """This process gets SIGTERM when its parent dies (a run killed with SIGKILL), so its graph does not outlive
    the run; a parent already gone ends it at once."""
    from libero_workcell.processes import die_with_parent

    parent = multiprocessing.parent_process()
    die_with_parent()
    if parent is not None and os.getppid() != parent.pid:
        raise SystemExit(0)
