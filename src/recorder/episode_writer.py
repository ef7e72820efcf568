"""Records one episode into its own LIBERO-layout file while it is recorded; the file is written off the
control path, in a process of its own (recorder.episode_child), forked from a fork server started once.

:meth:`EpisodeWriter.add` is called at control frequency and only appends: the step goes to a queue that a
sender thread passes to the episode's writer process, which writes its images into the episode's file as it
goes and keeps its low-dimensional data. :meth:`EpisodeWriter.save` (call it off the operator's path: the
node runs it in a thread) has the child write the rest (LIBERO's datasets, what the arm did with each
action, the timing, the attributes), sync and close the file; then renames ``demo_N.hdf5.partial`` to
``demo_N.hdf5`` and adds it to the session's index (:mod:`recorder.session_file`).

Why a child: a full disk can make HDF5's close fail, and freeing that file object crashes the process that
holds it. In the child, that costs the child: any write error (a full disk), a writer that dies, or a save
that does not end within ``SAVE_TIMEOUT`` (the child is then killed) fails this episode with a clear
:class:`RecorderError` and leaves its partial file marked; the node, the episodes saved before and the one
being recorded meanwhile are untouched.

Per step, besides LIBERO's datasets, the file holds what the arm did with the action (``action_accepted``,
``applied_actions``: the arm driver's reports) and ``timing/``, the evidence that the data is honest: the
observation stamp, the action latency, each camera's frame age and whether its frame was stale, and the
servo tick each action took effect on (-1 where the arm driver's report did not arrive or the action was
refused): a replay holds each action for as many servo ticks as the arm did (sim_cell.replay).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any, Final

import numpy as np

from libero_workcell.contract import IMAGE_SIZE
from libero_workcell.processes import killed_by
from recorder import episode_child
from recorder.episode_child import SaveRequest
from recorder.session_file import RecorderError, SessionFile, fsync_dir
from recorder.step import ArmReport, RecordedStep

log = logging.getLogger(__name__)
QUEUE_SECONDS: Final = 20.0  # of steps the writer may fall behind before recording refuses more steps
# s from save() until the episode's file must be complete: the frames still queued (at most QUEUE_SECONDS of
# them), the low-dimensional datasets and a sync, on a loaded machine; a save still running then is killed.
SAVE_TIMEOUT: Final = 120.0
EXIT_TIMEOUT: Final = 10.0  # s for a writer process to end after its last answer (or a discard) before a kill
# Writer processes are forked from multiprocessing's fork server, a clean interpreter that imports the writer's
# module once (never from the node's process, which runs DDS threads): a writer is ready at once. The preference
# scoring a save runs (scipy: most of a second of CPU) is imported there too, once, not by every writer.
_PROCESSES = multiprocessing.get_context("forkserver")
_PROCESSES.set_forkserver_preload(["recorder.episode_child", "preferences.scoring"])


@dataclass(frozen=True)
class SavedEpisode:
    name: str
    num_samples: int
    duration: float  # s, first to last observation
    dropped_steps: int  # control periods with no step recorded
    stale_frames: dict[str, int]  # camera image key -> steps recorded with a stale frame
    save_latency: float  # s, from save() to the index listing it
    start_time: float = 0.0  # s, the first step's observation stamp (the graph's clock: a session log's log time)
    end_time: float = 0.0  # s, the last step's
    interrupted: str = ""  # why the graph stopped it before a save: kept aside, never in the index ("": saved)


_server_lock = threading.Lock()
_server_pid: int | None = None  # the process that started the fork server (this one, or a parent it forked from)


def warm_up() -> None:
    """Start the fork server writers come from, if this process has none (a second or so: the node calls it at
    start, so the first episode's writer is ready at once; every writer's start calls it too).

    The fork server is a fresh interpreter: it is given this process's import path (Python 3.11's fork server
    does not apply the one it is handed), so writers run the code this process runs. A process forked from one
    that had started it (a test runner's workers) starts its own: the server is its parent's child, not its."""
    global _server_pid
    with _server_lock:
        if _server_pid is not None and _server_pid != os.getpid():
            server = forkserver._forkserver  # (no public way to forget a server that is not this process's)
            server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        try:
            forkserver.ensure_running()
        finally:
            if before is None:
                os.environ.pop("PYTHONPATH", None)
            else:
                os.environ["PYTHONPATH"] = before
        _server_pid = os.getpid()


class EpisodeWriter:
    def __init__(
        self,
        session: SessionFile,
        attrs: Mapping[str, Any],
        image_keys: Sequence[str],
        control_hz: float,
        image_shape: tuple[int, int, int] = (IMAGE_SIZE, IMAGE_SIZE, 3),
        save_timeout: float = SAVE_TIMEOUT,
    ) -> None:
        session.check_space()
        self.session = session
        self.name, self.partial = session.reserve()
        self.attrs = dict(attrs)
        self.image_keys = tuple(image_keys)
        self.period = 1.0 / float(control_hz)
        self.save_timeout = float(save_timeout)
        self._stamps: list[float] = []  # each step's observation stamp
        self._action_times: list[float] = []  # each step's action send time
        self._stale = dict.fromkeys(self.image_keys, 0)  # steps recorded with a stale frame, per camera
        self._reports: dict[float, ArmReport] = {}  # action_time -> the arm driver's report on it
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(QUEUE_SECONDS * control_hz)))
        self._error: str | None = None
        self._closed = False
        self._outcome: tuple[str, Any] | None = None  # the child's last answer (saved / failed)
        self._answered = threading.Event()
        self._proc_lock = threading.Lock()
        parent, child = _PROCESSES.Pipe(duplex=True)
        # daemon: a writer never outlives the recorder's interpreter (the node lets every save finish first)
        self.proc = _PROCESSES.Process(target=episode_child.run, args=(child,), name=f"writer-{self.name}",
                                       daemon=True)  # fmt: skip
        try:
            warm_up()
            self.proc.start()
        except OSError as exc:
            parent.close()
            self.partial.unlink(missing_ok=True)
            raise RecorderError(f"cannot start the writer of {self.name}: {exc}") from None
        finally:
            child.close()  # this process keeps its own end only: EOF as soon as the child dies
        self._conn: Connection = parent
        self._queue.put(("open", str(self.partial), self.name, self.image_keys, tuple(image_shape)))
        self._thread = threading.Thread(target=self._send, name=f"writer-{self.name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the control path
    @property
    def steps(self) -> int:
        return len(self._stamps)

    @property
    def duration(self) -> float:
        return self._stamps[-1] - self._stamps[0] if self._stamps else 0.0

    @property
    def failed(self) -> str | None:
        """Why this episode can no longer be saved (its writer failed), or None."""
        return self._error

    def add(self, step: RecordedStep) -> None:
        """Append one step (non-blocking while the writer keeps up)."""
        if self._closed:
            raise RecorderError(f"{self.name} is closed")
        if self._error is not None:
            raise RecorderError(f"{self.name} failed: {self._error}; kept as {self.partial}")
        if set(step.images) != set(self.image_keys):
            raise RecorderError(f"a step needs images {sorted(self.image_keys)}, got {sorted(step.images)}")
        try:
            self._queue.put(("step", step), timeout=self.period)
        except queue.Full:
            self._error = f"the episode writer fell {QUEUE_SECONDS:.0f} s behind (disk too slow?)"
            raise RecorderError(f"{self.name} failed: {self._error}") from None
        self._stamps.append(step.stamp)
        self._action_times.append(step.action_time)
        for key in step.stale:
            self._stale[key] += 1

    def arm_report(self, action_time: float, report: ArmReport) -> None:
        """The arm driver's report on the action sent at ``action_time`` (it may come before or after the step
        is added; an action never recorded as a step is ignored at save)."""
        self._reports[action_time] = report

    def stale_counts(self) -> dict[str, int]:
        """Steps recorded so far with a stale frame, per camera image key."""
        return dict(self._stale)

    def dropped_steps(self) -> int:
        """Control periods with no step recorded: from the gaps between the actions' send times (the source's
        loop runs on absolute deadlines; observation stamps jitter with the state's own publishing)."""
        if len(self._action_times) < 2:
            return 0
        gaps = np.diff(self._action_times) / self.period
        return int(np.sum(np.maximum(np.round(gaps) - 1, 0)))

    # ------------------------------------------------------------------ end of episode
    def save(self, interrupted: str = "") -> SavedEpisode:
        """Complete the episode file and add it to the session (blocking: run it off the operator's path).
        ``interrupted``: why nobody saved it (the graph stopped while it recorded): the file is completed the same
        way, says why in its ``interrupted`` attribute, and is kept as ``demo_N.hdf5.interrupted``, never added to
        the session (nothing that reads the session takes it for a good demo)."""
        started = time.monotonic()
        if self._closed:
            raise RecorderError(f"{self.name} is closed")
        if len(self._stamps) < 2 and self._error is None:  # LIBERO's readers refuse shorter demos
            self.discard()
            raise RecorderError(f"{self.name}: {len(self._stamps)} steps recorded, a demo needs at least 2: discarded")
        self._closed = True
        stale = dict(self._stale)
        attrs = {**self.attrs, "dropped_steps": self.dropped_steps(), "stale_frames": stale,
                 "control_hz": 1.0 / self.period, "start_time": self._stamps[0] if self._stamps else 0.0,
                 "end_time": self._stamps[-1] if self._stamps else 0.0}  # fmt: skip
        if interrupted:
            attrs["interrupted"] = interrupted
        request = SaveRequest(attrs, dict(self._reports), dict(self.session.problem_info),
                              dict(self.session.env_args), 1.0 / self.period)  # fmt: skip
        deadline = started + self.save_timeout
        try:
            self._queue.put(("save", request), timeout=self.save_timeout)
            answered = self._answered.wait(max(0.0, deadline - time.monotonic()))
        except queue.Full:
            answered = False
        if not answered:
            self._end(kill=True)
            raise RecorderError(f"{self.name}: the save did not finish within {self.save_timeout:g} s: its writer "
                                f"was stopped; kept as {self.partial}")  # fmt: skip
        self._end()
        kind, detail = self._outcome or ("failed", self._error)
        if kind != "saved":
            raise RecorderError(f"{self.name} could not be written ({detail}); kept as {self.partial}")
        try:
            os.replace(self.partial, self.session.episode_path(self.name, interrupted=bool(interrupted)))
            fsync_dir(self.partial.parent)
        except OSError as exc:
            raise RecorderError(f"{self.name} could not be written ({exc}); kept as {self.partial}") from None
        if not interrupted:
            self.session.add(self.name, len(self._stamps), str(self.attrs.get("language_instruction", "")))
        return SavedEpisode(self.name, len(self._stamps), self.duration, attrs["dropped_steps"], stale,
                            time.monotonic() - started, attrs["start_time"], attrs["end_time"],
                            interrupted)  # fmt: skip

    def discard(self) -> None:
        """Drop the episode: its writer is stopped, its partial file goes, nothing else changes."""
        self._closed = True
        self._end(kill=True)
        self.partial.unlink(missing_ok=True)

    # ------------------------------------------------------------------ internals
    def _exit_code(self, timeout: float | None) -> int | None:
        """The writer process's exit code once it has ended (waiting up to ``timeout``), else None. One thread
        at a time: the fork server reports an exit code once."""
        with self._proc_lock:
            self.proc.join(timeout)
            return self.proc.exitcode

    def _end(self, kill: bool = False) -> None:
        """Wait for the writer process to end (kill it if told, or if it does not end in time); close the link."""
        if self._exit_code(0.0 if kill else EXIT_TIMEOUT) is None:
            self.proc.kill()
            self._exit_code(None)
        with contextlib.suppress(queue.Full):  # (full: the thread is sending, and meets the dead link)
            self._queue.put_nowait(("end",))  # the sender thread, if still waiting for work, ends
        self._thread.join(timeout=EXIT_TIMEOUT)  # (its link's other end is gone: it is not blocked on it)
        self._conn.close()

    def _exit_text(self) -> str:
        code = self._exit_code(EXIT_TIMEOUT)
        if code is None:
            return "the episode writer process stopped answering"
        how = f"killed by {sig}" if (sig := killed_by(code)) else f"exit code {code}"
        return f"the episode writer process ended ({how})"

    def _send(self) -> None:
        """The sender thread: every queued message to the child, in order; the child's answers back."""
        conn = self._conn
        while (item := self._queue.get())[0] != "end":
            if self._error is not None and item[0] == "step":
                continue  # the episode has failed: add() tells the caller; save() says why
            try:
                conn.send(item)
                while item[0] == "save" or conn.poll(0):  # the child's answers: early errors, then its outcome
                    kind, detail = conn.recv()
                    if kind == "error":
                        self._error = self._error or detail
                    else:
                        self._outcome = (kind, detail)
                        break
            except (EOFError, OSError):  # the child died (or was killed)
                self._error = self._error or self._exit_text()
                break
            except Exception as exc:  # (a message that cannot travel: never this thread's silent end)
                self._error = self._error or f"the episode writer could not be sent {item[0]}: {exc!r}"
                break
            if self._outcome is not None:
                break
        self._answered.set()
