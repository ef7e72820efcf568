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
  index's) and adds it: what the operator saved is never lost.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import h5py

from libero_workcell.libero_format import demo_order, open_demo_file

log = logging.getLogger(__name__)
PARTIAL: Final = ".partial"
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


def saved_demo_attrs(path: str | Path) -> list[dict[str, Any]]:
    """The attributes of every complete demo of a session, read-only (a recorder may be writing it)."""
    folder = episodes_dir_of(path)
    if not folder.is_dir():
        return []
    out = []
    for name in complete_episodes(folder):
        with open_demo_file(folder / f"{name}.hdf5") as f:
            out.append(dict(f["data"][name].attrs))
    return out


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
        self._prepare()
        if self.path.exists():
            self._load()
        self.partials = sorted(p.name for p in self.episodes_dir.glob(f"*{PARTIAL}"))
        if self.partials:
            log.warning("%s: incomplete episodes from an earlier run, kept as they are: %s", self.path, self.partials)
        adopted = [n for n in complete_episodes(self.episodes_dir) if n not in self._counts]
        for name in adopted:  # saved, but the crash came before the index was rewritten
            self._counts[name] = self._samples_of(self.episode_path(name))
        if adopted:
            log.warning("%s: complete episodes not yet in the index, added: %s", self.path, adopted)
        if adopted or not self.path.exists():
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

    def episode_path(self, name: str, partial: bool = False) -> Path:
        return self.episodes_dir / (f"{name}.hdf5" + (PARTIAL if partial else ""))

    def next_name(self) -> str:
        """The next demo name: after every index on disk (complete or partial), so nothing is overwritten."""
        used = [
            int(m.group(1)) for p in self.episodes_dir.iterdir() if (m := _EPISODE.match(p.name.removesuffix(PARTIAL)))
        ]
        return f"demo_{max(used, default=-1) + 1}"

    def demo_attrs(self) -> list[dict[str, Any]]:
        """Each listed demo's attributes (what the collection plan counts); a complete episode file never
        changes, so each is read once."""
        for name in self.names:
            if name not in self._attrs:
                with open_demo_file(self.episode_path(name)) as f:
                    self._attrs[name] = dict(f["data"][name].attrs)
        return [self._attrs[name] for name in self.names]

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
        self.check_space()

    def _load(self) -> None:
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
            self._counts[name] = self._samples_of(episode)

    @staticmethod
    def _samples_of(episode: Path) -> int:
        with open_demo_file(episode) as f:
            (name,) = list(f["data"])
            return int(f["data"][name].attrs["num_samples"])

    def _write_index(self) -> None:
        tmp = self.path.with_name(self.path.name + ".writing")
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            for name in self.names:
                data[name] = h5py.ExternalLink(f"{self.episodes_dir.name}/{name}.hdf5", f"/data/{name}")
            data.attrs["problem_info"] = json.dumps(self.problem_info)
            data.attrs["env_args"] = json.dumps(self.env_args)
            data.attrs["num_demos"] = self.num_demos
            data.attrs["total"] = self.total
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        fsync_dir(self.path.parent)
