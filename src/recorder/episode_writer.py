"""Writes one episode into its own LIBERO-layout file while it is recorded; images off the control path.

:meth:`EpisodeWriter.add` is called at control frequency and only appends: the step's low-dimensional data
to in-memory lists, its images to a queue that a writer thread compresses into the episode's file as it
goes. :meth:`EpisodeWriter.save` (call it off the operator's path: the node runs it in a thread) waits for
the few frames still queued, writes the low-dimensional datasets, the timing and the attributes, syncs,
renames ``demo_N.hdf5.partial`` to ``demo_N.hdf5`` and adds it to the session's index
(:mod:`recorder.session_file`). Any write error (a full disk) fails the episode with a clear error and
leaves its partial file marked; earlier episodes are never touched.

Per step, besides LIBERO's datasets, ``timing/`` holds the evidence that the data is honest: the
observation stamp, the action latency, each camera's frame age and whether its frame was stale, and the
servo tick each action took effect on (-1 where the arm driver's report did not arrive): a replay holds each
action for as many servo ticks as the arm did (sim_bridge.replay).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import h5py
import numpy as np

from libero_workcell.libero_format import Demo, aubo_robot_states, image_dataset_options, write_demo, write_file_attrs
from preferences.scoring import annotate
from recorder.session_file import RecorderError, SessionFile, fsync_dir
from recorder.step import RecordedStep

log = logging.getLogger(__name__)
QUEUE_SECONDS: Final = 20.0  # of images the writer may fall behind before recording refuses more steps


@dataclass(frozen=True)
class SavedEpisode:
    name: str
    num_samples: int
    duration: float  # s, first to last observation
    dropped_steps: int  # control periods with no step recorded
    stale_frames: dict[str, int]  # camera image key -> steps recorded with a stale frame
    save_latency: float  # s, from save() to the index listing it


class EpisodeWriter:
    def __init__(
        self,
        session: SessionFile,
        attrs: Mapping[str, Any],
        image_keys: Sequence[str],
        control_hz: float,
        image_shape: tuple[int, int, int] = (256, 256, 3),
    ) -> None:
        session.check_space()
        self.session = session
        self.name = session.next_name()
        self.attrs = dict(attrs)
        self.image_keys = tuple(image_keys)
        self.period = 1.0 / float(control_hz)
        self.partial = session.episode_path(self.name, partial=True)
        self._rows: list[RecordedStep] = []
        self._servo_ticks: dict[float, int] = {}  # action_time -> servo tick it took effect on
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(QUEUE_SECONDS * control_hz)) * len(self.image_keys))
        self._error: BaseException | None = None
        self._closed = False
        try:
            self._file = h5py.File(self.partial, "w")
            obs = self._file.create_group(f"data/{self.name}/obs")
            self._images = {
                k: obs.create_dataset(k, shape=(0, *image_shape), maxshape=(None, *image_shape), dtype=np.uint8,
                                      **image_dataset_options(image_shape))
                for k in self.image_keys
            }  # fmt: skip
        except OSError as exc:
            self.partial.unlink(missing_ok=True)
            raise RecorderError(f"cannot start {self.partial}: {exc}") from None
        self._thread = threading.Thread(target=self._write_images, name=f"images-{self.name}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ the control path
    @property
    def steps(self) -> int:
        return len(self._rows)

    @property
    def duration(self) -> float:
        return self._rows[-1].stamp - self._rows[0].stamp if self._rows else 0.0

    @property
    def failed(self) -> BaseException | None:
        return self._error

    def add(self, step: RecordedStep) -> None:
        """Append one step (non-blocking while the image writer keeps up)."""
        if self._closed:
            raise RecorderError(f"{self.name} is closed")
        if self._error is not None:
            raise RecorderError(f"{self.name} failed: {self._error}") from self._error
        if set(step.images) != set(self.image_keys):
            raise ValueError(f"a step needs images {sorted(self.image_keys)}, got {sorted(step.images)}")
        index = len(self._rows)
        try:
            for key in self.image_keys:
                self._queue.put((index, key, step.images[key]), timeout=self.period)
        except queue.Full:
            self._error = RecorderError(f"the image writer fell {QUEUE_SECONDS:.0f} s behind (disk too slow?)")
            raise self._error from None
        self._rows.append(step)

    def took_effect(self, action_time: float, servo_tick: int) -> None:
        """The arm driver's report for the action sent at ``action_time`` (it may come before or after the
        step is added; an action never recorded as a step is ignored at save)."""
        self._servo_ticks[action_time] = int(servo_tick)

    def dropped_steps(self) -> int:
        """Control periods with no step recorded: from the gaps between the actions' send times (the source's
        loop runs on absolute deadlines; observation stamps jitter with the state's own publishing)."""
        if len(self._rows) < 2:
            return 0
        gaps = np.diff([r.action_time for r in self._rows]) / self.period
        return int(np.sum(np.maximum(np.round(gaps) - 1, 0)))

    # ------------------------------------------------------------------ end of episode
    def save(self) -> SavedEpisode:
        """Complete the episode file and add it to the session (blocking: run it off the operator's path)."""
        started = time.monotonic()
        self._finish_images()
        if self._error is not None:
            self._close()
            raise RecorderError(f"{self.name} could not be written ({self._error}); kept as {self.partial}") from None
        if len(self._rows) < 2:  # LIBERO's readers refuse shorter demos: an episode this short is no demo
            self.discard()
            raise RecorderError(f"{self.name}: {len(self._rows)} steps recorded, a demo needs at least 2: discarded")
        rows = self._rows
        stale = {k: int(sum(k in r.stale for r in rows)) for k in self.image_keys}
        attrs = {**self.attrs, "dropped_steps": self.dropped_steps(), "stale_frames": stale,
                 "control_hz": 1.0 / self.period}  # fmt: skip
        demo = Demo(
            self.name,
            np.array([r.action for r in rows]),
            np.array([r.ee_pos for r in rows], float),
            np.array([r.ee_ori for r in rows], float),
            np.array([[r.gripper] for r in rows], float),
            np.array([r.joints for r in rows], float),
            aubo_robot_states([r.gripper for r in rows], [r.ee_pos for r in rows], [r.ee_ori for r in rows]),
            attrs=attrs,
        )
        try:  # the preferences asked and their per-step satisfaction (preference/satisfaction); never the episode
            demo = annotate(demo, control_hz=1.0 / self.period)
        except Exception as exc:
            log.error("%s: preference satisfaction not stored: %s", self.name, exc)
        try:
            data = self._file["data"]
            write_demo(data, demo, existing_obs=True)
            timing = data[self.name].create_group("timing")
            timing.create_dataset("obs_stamp", data=np.array([r.stamp for r in rows]))
            timing.create_dataset("action_latency", data=np.array([r.action_latency for r in rows]))
            ticks = [self._servo_ticks.get(r.action_time, -1) for r in rows]
            timing.create_dataset("servo_tick", data=np.array(ticks, np.int64))
            for key in self.image_keys:
                timing.create_dataset(f"frame_age_{key}", data=np.array([r.frame_age(key) for r in rows]))
                timing.create_dataset(f"stale_{key}", data=np.array([key in r.stale for r in rows], np.uint8))
            problem = {**self.session.problem_info}
            problem["language_instruction"] = self.attrs.get("language_instruction") or problem.get(
                "language_instruction", ""
            )
            write_file_attrs(data, problem, self.session.env_args)
            self._file.flush()
            os.fsync(self._file.id.get_vfd_handle())
            self._close()
            os.replace(self.partial, self.session.episode_path(self.name))
            fsync_dir(self.partial.parent)
        except OSError as exc:
            self._close()
            raise RecorderError(f"{self.name} could not be written ({exc}); kept as {self.partial}") from None
        self.session.add(self.name, len(rows), str(self.attrs.get("language_instruction", "")))
        return SavedEpisode(self.name, len(rows), self.duration, attrs["dropped_steps"], stale,
                            time.monotonic() - started)  # fmt: skip

    def discard(self) -> None:
        """Drop the episode: its partial file goes, nothing else changes."""
        self._finish_images()
        self._close()
        self.partial.unlink(missing_ok=True)

    # ------------------------------------------------------------------ internals
    def _finish_images(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self._file.close()
            except OSError as exc:  # a full disk can refuse even the close: the partial stays marked
                log.error("%s: closing failed: %s", self.partial, exc)

    def _write_images(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is not None:
                continue  # drain: the episode has failed, add() tells the caller
            index, key, image = item
            try:
                ds = self._images[key]
                if ds.shape[0] <= index:
                    ds.resize(index + 1, axis=0)
                ds[index] = image
            except Exception as exc:
                log.error("%s: image write failed: %s", self.partial, exc)
                self._error = exc
