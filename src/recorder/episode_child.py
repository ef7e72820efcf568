"""The HDF5 writer of one episode, in a process of its own (:func:`run`, started by recorder.episode_writer).

Why a process: on a full disk HDF5 can fail the file's ``close()``, and freeing an h5py file whose close
failed crashes the process that holds it (SIGSEGV; plain h5py does it too). Here that process is this
child: the recorder node loses at most the child, reports the error, keeps the episode it is recording, and
the next episode saves. The child leaves with ``os._exit``, so no failed HDF5 object is ever freed.

It is forked from multiprocessing's fork server: a clean interpreter, started once per recorder, that has
imported this module (h5py, numpy) and the preference scoring a save runs already, so a writer is ready at
once; never a fork of the node's process, which runs DDS threads. It leaves the node's process group and
ignores SIGINT: a stopping graph signals each node's whole group (SIGINT, then SIGTERM), and the node, not that
signal, ends its writer: it lets a save in progress finish, completes an episode the graph stopped, kills a
writer that does not answer; a node that dies outright ends it too (EOF). The protocol, over the connection it
is given, in order:

- node -> child: ``("open", partial path, demo name, image keys, image shape)``, ``("step", RecordedStep)``
  per step (its images written at once, its low-dimensional data kept), then ``("save", SaveRequest)`` or
  ``("discard",)``;
- child -> node: ``("error", text)`` once, as soon as writing fails (the node then refuses further steps);
  at a save, ``("saved", None)`` once the file is complete, synced and closed, or ``("failed", text)``.

A node that goes away (EOF) leaves the partial file where it stands (never linked).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import Any

import h5py
import numpy as np

from libero_workcell.contract import ACTION_DIM
from libero_workcell.libero_format import Demo, aubo_robot_states, image_dataset_options, write_demo, write_file_attrs
from recorder.step import ArmReport, RecordedStep, arm_counts

log = logging.getLogger("recorder.episode_child")
# Exceptions of a failed file, kept until the process leaves: their tracebacks hold HDF5 objects of that file,
# and freeing those fails (noisily, dozens of lines each) or crashes; os._exit frees nothing.
_FAILED: list[BaseException] = []
NOT_REPORTED = -1  # action_accepted / servo_tick of a step whose arm report never came


@dataclass(frozen=True)
class SaveRequest:
    """What the node knows at save that the child does not: the demo's attributes, the arm's reports on its
    actions (by the action's send time), and the file's attributes."""

    attrs: Mapping[str, Any]
    reports: Mapping[float, ArmReport]
    problem_info: Mapping[str, Any]
    env_args: Mapping[str, Any]
    control_hz: float


def arm_columns(rows: Sequence[RecordedStep], reports: Mapping[float, ArmReport]) -> dict[str, np.ndarray]:
    """Per step what the arm did with its action: ``action_accepted`` (1, 0 refused, -1 not reported),
    ``applied_actions`` (the action applied; NaN where refused or not reported) and ``servo_tick``."""
    accepted = np.full(len(rows), NOT_REPORTED, np.int8)
    applied = np.full((len(rows), ACTION_DIM), np.nan)
    ticks = np.full(len(rows), NOT_REPORTED, np.int64)
    for i, row in enumerate(rows):
        report = reports.get(row.action_time)
        if report is None:
            continue
        accepted[i] = 1 if report.accepted else 0
        if report.accepted and report.applied is not None:
            applied[i] = report.applied
        if report.accepted and report.servo_tick is not None:
            ticks[i] = report.servo_tick
    return {"action_accepted": accepted, "applied_actions": applied, "servo_tick": ticks}


def write_episode(f: h5py.File, name: str, rows: Sequence[RecordedStep], request: SaveRequest) -> None:
    """Everything but the images (already in ``obs/``): LIBERO's datasets, what the arm did, the timing and
    the attributes; then flush and sync."""
    from preferences.scoring import annotate

    arm = arm_columns(rows, request.reports)
    demo = Demo(
        name,
        np.array([r.action for r in rows]),
        np.array([r.ee_pos for r in rows], float),
        np.array([r.ee_ori for r in rows], float),
        np.array([[r.gripper] for r in rows], float),
        np.array([r.joints for r in rows], float),
        aubo_robot_states([r.gripper for r in rows], [r.ee_pos for r in rows], [r.ee_ori for r in rows]),
        attrs={**request.attrs, **arm_counts(arm["action_accepted"])},  # the verdicts summed: the plan counts them
    )
    try:  # the preferences asked and their per-step satisfaction (preference/satisfaction); never the episode
        demo = annotate(demo, control_hz=request.control_hz)
    except Exception as exc:
        log.error("%s: preference satisfaction not stored: %s", name, exc)
    data = f["data"]
    g = write_demo(data, demo, existing_obs=True)
    g.create_dataset("applied_actions", data=arm["applied_actions"])
    g.create_dataset("action_accepted", data=arm["action_accepted"])
    timing = g.create_group("timing")
    timing.create_dataset("obs_stamp", data=np.array([r.stamp for r in rows]))
    timing.create_dataset("action_latency", data=np.array([r.action_latency for r in rows]))
    timing.create_dataset("servo_tick", data=arm["servo_tick"])
    for key in sorted({k for r in rows for k in r.image_stamps}):
        timing.create_dataset(f"frame_age_{key}", data=np.array([r.frame_age(key) for r in rows]))
        timing.create_dataset(f"stale_{key}", data=np.array([key in r.stale for r in rows], np.uint8))
    problem = dict(request.problem_info)
    problem["language_instruction"] = request.attrs.get("language_instruction") or problem.get(
        "language_instruction", ""
    )
    write_file_attrs(data, problem, request.env_args)
    f.flush()
    os.fsync(f.id.get_vfd_handle())


def _text(exc: BaseException) -> str:
    """One line saying what went wrong: HDF5's own text spans lines, names the system's error only in passing
    (``error message = 'No space left on device'``) and may come as a RuntimeError without an errno."""
    text = str(exc)
    what = re.sub(r"^\[Errno \d+\] ", "", text.splitlines()[0] if text else "").split(" (file ")[0]
    found = re.search(r"error message = '([^']+)'", text)
    cause = os.strerror(exc.errno) if isinstance(exc, OSError) and exc.errno else found and found.group(1)
    if cause:
        return f"{cause} ({what})" if what and what != cause else cause
    return f"{type(exc).__name__}: {what}" if what else type(exc).__name__


def serve(conn: Connection) -> int:
    """Write one episode as the node sends it; the exit code (0: saved or discarded)."""
    _, partial, name, keys, shape = conn.recv()
    error: str | None = None
    f: h5py.File | None = None
    images: dict[str, h5py.Dataset] = {}
    try:
        f = h5py.File(partial, "w")
        obs = f.create_group(f"data/{name}/obs")
        images = {k: obs.create_dataset(k, shape=(0, *shape), maxshape=(None, *shape), dtype=np.uint8,
                                        **image_dataset_options(tuple(shape))) for k in keys}  # fmt: skip
    except Exception as exc:
        error = f"cannot start {partial}: {_text(exc)}"
        conn.send(("error", error))
    rows: list[RecordedStep] = []
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the node is gone: the partial stays as it is
            return 1
        if msg[0] == "step":
            if error is None:
                step: RecordedStep = msg[1]
                try:
                    for key in keys:
                        ds = images[key]
                        ds.resize(len(rows) + 1, axis=0)
                        ds[len(rows)] = step.images[key]
                    rows.append(replace(step, images={}))
                except Exception as exc:
                    _FAILED.append(exc)
                    error = f"image write failed: {_text(exc)}"
                    conn.send(("error", error))
            continue
        if msg[0] == "discard":
            return 0 if _close(f) is None else 1
        if error is None:  # save
            assert f is not None
            try:
                write_episode(f, name, rows, msg[1])
            except Exception as exc:
                _FAILED.append(exc)
                error = _text(exc)
        closing = _close(f)
        error = error or closing
        conn.send(("failed", error) if error else ("saved", None))
        return 1 if error else 0


def _close(f: h5py.File | None) -> str | None:
    """Close the file; the error text if that failed (a full disk can refuse even the close)."""
    if f is None:
        return None
    try:
        f.close()
    except Exception as exc:
        _FAILED.append(exc)
        return f"closing failed: {_text(exc)}"
    return None


def run(conn: Connection) -> None:
    """The writer process: serve one episode, then leave at once (``os._exit``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.setpgid(0, 0)  # out of the node's process group: the graph's SIGTERM is the node's to act on, not this one's
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="[episode writer] %(levelname)s %(message)s")
    code = 1
    try:
        code = serve(conn)
    except Exception as exc:  # the node sees the connection end and reports it
        log.error("episode writer failed: %s", _text(exc))
    finally:
        sys.stderr.flush()
        os._exit(code)  # never free an HDF5 object whose close failed (it crashes the process)
