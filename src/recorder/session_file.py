"""The file a recording session writes: LIBERO's layout, crash-safe, resumable.

``PATH`` (say ``demos/d2s.hdf5``) is what training tools open: LIBERO's ``data/`` group with its
attributes (``env_args``, ``problem_info``, ``num_demos``, ``total``) and one entry per demo. Each entry is
an HDF5 external link to that demo's own file in ``PATH``'s episodes folder (``demos/d2s_episodes/
demo_N.hdf5``, itself a complete one-demo LIBERO file); h5py, robomimic and LIBERO's loaders follow the
links without knowing. This is what makes ``kill -9`` harmless:

- an episode is written as ``demo_N.hdf5.partial`` and renamed only when complete (flushed and synced);
  a partial file is never linked, so a crash mid-episode or mid-save leaves it clearly marked and nothing
  else touched;
- ``PATH`` itself is small (links and attributes) and is replaced atomically (written beside, synced,
  renamed) after each saved episode, so it always lists exactly the complete episodes;
- resuming finds a complete episode file the index does not list (a crash between its rename and the
  index's) and adds it: what the operator saved is never lost;
- an episode file that cannot be read at resume (torn: a copy cut short, a disk that failed) is reported by
  name and moved aside as ``demo_N.hdf5.unreadable`` (never deleted, its number never reused); the session
  resumes with the rest;
- an episode the graph stopped before the operator saved or discarded it (Ctrl-C, a node that died) is
  completed as ``demo_N.hdf5.interrupted``: whole and readable, its ``interrupted`` attribute saying why, and
  never linked (no training tool, count or plan takes it for a good demo; ``export_lerobot --interrupted``
  includes it);
- index writes are serialized (one lock; two saves may finish at once), each through a temporary file of its
  own, synced and renamed into place; a failed write is a :class:`RecorderError` (the episode files stay
  complete, and the next start adds any the index missed).
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import h5py

from libero_workcell.libero_format import LiberoFormatError, checked_dataset, demo_order, open_demo_file
from recorder.step import ACCEPTED_STEPS, REFUSED_STEPS, arm_counts

log = logging.getLogger(__name__)
PARTIAL: Final = ".partial"
UNREADABLE: Final = ".unreadable"  # a complete episode file resume could not read, moved aside (never deleted)
INTERRUPTED: Final = ".interrupted"  # a complete episode the graph stopped before a save or discard: kept, unlisted
INDEX_TEMP: Final = ".writing"  # suffix of the index's temporary files (each write its own)
MIN_FREE_BYTES: Final = 512 * 1024**2  # refuse to start below this: ~5 minutes of two-camera recording
_EPISODE = re.compile(r"^demo_(\d+)\.hdf5$")


class RecorderError(RuntimeError):
    pass


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def episodes_dir_of(path: str | Path) -> Path:
    """Where a session file keeps its episode files (one HDF5 file per demo)."""
    path = Path(path).absolute()
    return path.with_name(path.stem + "_episodes")


def complete_episodes(folder: Path) -> list[str]:
    """The demo names of the complete episode files in ``folder``, in demo order."""
    names = [p.name.removesuffix(".hdf5") for p in folder.iterdir() if _EPISODE.match(p.name)]
    return sorted(names, key=demo_order)


def demo_number(filename: str) -> int | None:
    """N of an episode file's name, complete, partial, interrupted or set aside
    (``demo_N.hdf5[.partial|.interrupted|.unreadable]``)."""
    m = _EPISODE.match(filename.removesuffix(PARTIAL).removesuffix(INTERRUPTED).removesuffix(UNREADABLE))
    return int(m.group(1)) if m else None


def interrupted_episodes(path: str | Path) -> list[Path]:
    """A session's interrupted episode files (``demo_N.hdf5.interrupted``), in demo order."""
    folder = episodes_dir_of(path)
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob(f"*{INTERRUPTED}") if demo_number(p.name) is not None]
    return sorted(found, key=lambda p: demo_number(p.name) or 0)


def episode_samples(episode: Path) -> int:
    """``num_samples`` of a one-demo episode file, checked against its ``actions``: OSError, KeyError or
    ValueError when the file cannot be read (torn, not an episode)."""
    with open_demo_file(episode) as f:  # a LiberoFormatError (a ValueError) for what a demo file may not hold
        (name,) = list(f["data"])
        demo = f["data"][name]
        samples = int(demo.attrs["num_samples"])
        if demo["actions"].shape[0] != samples:
            raise ValueError(f"{name} declares {samples} samples and holds {demo['actions'].shape[0]} actions")
        return samples


def demo_record(episode: Path, name: str) -> dict[str, Any]:
    """A demo's attributes, with what the arm did with its actions summed up (recorder.step.arm_counts): a demo
    saved before the recorder stored the sums has them counted from its ``action_accepted`` (its declared size
    checked first), so the plan judges every demo alike. OSError, KeyError or LiberoFormatError when unreadable."""
    with open_demo_file(episode) as f:
        g = f["data"][name]
        attrs = dict(g.attrs)
        if not {ACCEPTED_STEPS, REFUSED_STEPS} <= attrs.keys() and "action_accepted" in g:
            accepted = checked_dataset(g, "action_accepted", f"{episode}: data/{name}")[()]
            attrs.update(arm_counts(accepted))
    return attrs


def saved_demos(path: str | Path) -> list[tuple[str, dict[str, Any]]]:
    """Every complete demo of a session, by name, with its :func:`demo_record`, read-only (a recorder may be
    writing it): an unreadable episode file is skipped with a warning (the recorder sets it aside at its next
    start)."""
    folder = episodes_dir_of(path)
    if not folder.is_dir():
        return []
    out = []
    for name in complete_episodes(folder):
        try:
            out.append((name, demo_record(folder / f"{name}.hdf5", name)))
        except (OSError, KeyError, LiberoFormatError) as exc:
            log.warning("%s: %s is unreadable, not counted: %s", path, name, exc)
    return out


def saved_demo_attrs(path: str | Path) -> list[dict[str, Any]]:
    """The :func:`demo_record` of every complete demo of a session (:func:`saved_demos` without the names)."""
    return [attrs for _, attrs in saved_demos(path)]


class SessionFile:
    def __init__(
        self,
        path: str | Path,
        problem_info: Mapping[str, Any],
        env_args: Mapping[str, Any],
        min_free_bytes: int = MIN_FREE_BYTES,
    ) -> None:
        self.path = Path(path).absolute()
        self.episodes_dir = episodes_dir_of(self.path)
        self.min_free_bytes = int(min_free_bytes)
        self.problem_info, self.env_args = dict(problem_info), dict(env_args)
        self._counts: dict[str, int] = {}  # demo name -> num_samples, in the index
        self._attrs: dict[str, dict[str, Any]] = {}  # demo name -> its attributes, read once (demo_attrs)
        self._lock = threading.RLock()  # the index and the names: saves finish on threads of their own
        self.set_aside: dict[str, str] = {}  # demo name -> why its episode file was unreadable at resume
        self._prepare()
        listed = self._load() if self.path.exists() else []
        self.partials = sorted(p.name for p in self.episodes_dir.glob(f"*{PARTIAL}"))
        if self.partials:
            log.warning("%s: incomplete episodes from an earlier run, kept as they are: %s", self.path, self.partials)
        self.interrupted = [p.name for p in interrupted_episodes(self.path)]  # kept, never listed in the index
        adopted = []
        for name in complete_episodes(self.episodes_dir):
            samples = self._readable(name)
            if samples is None:
                continue
            self._counts[name] = samples
            if name not in listed:  # saved, but the crash came before the index was rewritten
                adopted.append(name)
        if adopted:
            log.warning("%s: complete episodes not yet in the index, added: %s", self.path, adopted)
        if adopted or self.set_aside or not self.path.exists():
            self._write_index()

    # ------------------------------------------------------------------ state
    @property
    def names(self) -> list[str]:
        return sorted(self._counts, key=demo_order)

    @property
    def num_demos(self) -> int:
        return len(self._counts)

    @property
    def total(self) -> int:
        return sum(self._counts.values())

    def episode_path(self, name: str, partial: bool = False, interrupted: bool = False) -> Path:
        return self.episodes_dir / (f"{name}.hdf5" + (PARTIAL if partial else INTERRUPTED if interrupted else ""))

    def next_name(self) -> str:
        """The next demo name: after every number on disk (complete, partial, interrupted or set aside), so
        nothing is overwritten and no number is reused."""
        used = [n for p in self.episodes_dir.iterdir() if (n := demo_number(p.name)) is not None]
        return f"demo_{max(used, default=-1) + 1}"

    def reserve(self) -> tuple[str, Path]:
        """A new episode's name and its partial file, created here (exclusively): two episodes started in a row
        never share a name even before their writers have written a byte. RecorderError when it cannot be made."""
        with self._lock:
            name = self.next_name()
            partial = self.episode_path(name, partial=True)
            try:
                partial.touch(exist_ok=False)
            except OSError as exc:
                raise RecorderError(f"cannot start {partial}: {exc.strerror or exc}") from None
            return name, partial

    def record_of(self, name: str) -> dict[str, Any]:
        """A listed demo's :func:`demo_record` (read once)."""
        if name not in self._attrs:
            self._attrs[name] = demo_record(self.episode_path(name), name)
        return self._attrs[name]

    def demo_attrs(self) -> list[dict[str, Any]]:
        """Each listed demo's :func:`demo_record` (what the collection plan counts); a complete episode file never
        changes, so each is read once."""
        return [self.record_of(name) for name in self.names]

    def check_space(self) -> None:
        free = shutil.disk_usage(self.episodes_dir).free
        if free < self.min_free_bytes:
            raise RecorderError(
                f"{self.episodes_dir}: only {free / 1024**2:.0f} MiB free, at least "
                f"{self.min_free_bytes / 1024**2:.0f} MiB are needed to record an episode: free some space or "
                "record elsewhere"
            )

    # ------------------------------------------------------------------ changes
    def add(self, name: str, num_samples: int, language_instruction: str = "") -> None:
        """A complete episode file (renamed into place) joins the index (its instruction becomes the file's
        when the file has none yet: in sim the task is known only once the world runs)."""
        with self._lock:
            self._counts[name] = int(num_samples)
            if language_instruction and not self.problem_info.get("language_instruction"):
                self.problem_info["language_instruction"] = language_instruction
            self._write_index()

    # ------------------------------------------------------------------ internals
    def _prepare(self) -> None:
        try:
            self.episodes_dir.mkdir(parents=True, exist_ok=True)
            probe = self.episodes_dir / f".write_probe_{os.getpid()}"
            probe.write_bytes(b"ok")
            probe.unlink()
        except OSError as exc:
            raise RecorderError(
                f"cannot record into {self.path}: {exc.strerror or exc} ({exc.filename or ''})"
            ) from None
        if self.path.exists() and not os.access(self.path, os.W_OK):
            raise RecorderError(f"cannot record into {self.path}: the file is not writable")
        for stale in self.path.parent.glob(f".{self.path.name}.*{INDEX_TEMP}"):  # an index write a crash cut short
            stale.unlink(missing_ok=True)
        self.check_space()

    def _load(self) -> list[str]:
        """The demos the index lists (each checked with the complete episodes on disk by the caller)."""
        try:
            with open_demo_file(self.path, follow_links=False) as f:  # the index: names and attributes
                data = f["data"]
                self.problem_info = json.loads(data.attrs["problem_info"])
                env_args = json.loads(data.attrs["env_args"])
                names = [k for k in data]
        except (OSError, KeyError, ValueError) as exc:
            raise RecorderError(f"{self.path} is not a session file this recorder can resume: {exc}") from None
        if env_args != self.env_args:
            raise RecorderError(
                f"{self.path} was recorded with env_args {env_args}, this session has {self.env_args}: "
                "record into a new file"
            )
        for name in names:
            episode = self.episode_path(name)
            if not episode.exists():
                raise RecorderError(f"{self.path}: {name}'s episode file {episode} is missing")
        return names

    def _readable(self, name: str) -> int | None:
        """The episode's sample count; None after moving an unreadable file aside (reported, never deleted)."""
        episode = self.episode_path(name)
        try:
            return episode_samples(episode)
        except (OSError, KeyError, ValueError) as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        aside = episode.with_name(episode.name + UNREADABLE)
        n = 1
        while aside.exists():  # never over an earlier one
            aside, n = episode.with_name(f"{episode.name}{UNREADABLE}.{n}"), n + 1
        try:
            os.replace(episode, aside)
        except OSError as exc:
            raise RecorderError(f"{episode} is unreadable ({reason}) and cannot be moved aside: {exc}") from None
        self.set_aside[name] = reason
        log.error("%s: %s is unreadable (%s): moved aside as %s; resuming with the other episodes",
                  self.path, name, reason, aside.name)  # fmt: skip
        return None

    def _write_index(self) -> None:
        """Write the index beside (a temporary file of this write's own), sync, rename into place.

        HDF5 builds it in memory and the bytes go to disk with plain writes: a full disk is then an ordinary
        OSError here, never an HDF5 file object whose close failed (freeing one crashes the process)."""
        with self._lock:
            image = io.BytesIO()
            with h5py.File(image, "w") as f:
                data = f.create_group("data")
                for demo in self.names:
                    data[demo] = h5py.ExternalLink(f"{self.episodes_dir.name}/{demo}.hdf5", f"/data/{demo}")
                data.attrs["problem_info"] = json.dumps(self.problem_info)
                data.attrs["env_args"] = json.dumps(self.env_args)
                data.attrs["num_demos"] = self.num_demos
                data.attrs["total"] = self.total
            tmp: Path | None = None
            try:
                fd, name = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=INDEX_TEMP, dir=self.path.parent)
                tmp = Path(name)
                with open(fd, "wb") as fh:
                    fh.write(image.getbuffer())
                    fh.flush()
                    os.fsync(fh.fileno())
                os.replace(tmp, self.path)
                tmp = None
                fsync_dir(self.path.parent)
            except OSError as exc:
                raise RecorderError(
                    f"{self.path}: the index could not be rewritten ({exc.strerror or exc}); the episode files are "
                    "complete, and the recorder's next start lists any the index missed"
                ) from None
            finally:
                if tmp is not None:
                    tmp.unlink(missing_ok=True)
