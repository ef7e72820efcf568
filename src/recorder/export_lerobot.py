"""Export recorded demos to a LeRobot dataset, laid out as openpi's LIBERO converter lays it out.

``python -m recorder.export_lerobot DEMOS... --out ROOT [--repo-id local/d2s] [--images libero|upright] [--all]
[--interrupted]``
reads LIBERO-layout files (a folder's ``*.hdf5``, or files; each demo once, its images frame by frame) and
writes one LeRobot episode per demo with LeRobot's own dataset code (``lerobot`` 0.3.3, codebase v2.1, the
format openpi's pinned LeRobot reads): features ``image`` and ``wrist_image`` (256 x 256 x 3, stored as
images, not video), ``state`` (the contract's 7-D state: TCP position, axis-angle, gripper coordinate,
float32), ``actions`` (7, float32), the task text per frame (the demo's instruction; with a preference the
LIBERO-PeRM prompt), fps = the demo's control rate.

What is exported: successful demos only, as LIBERO's and openpi's training data hold (``--all``: every
demo). A demo's outcome is its ``SR`` attribute (1: success), else its ``placed`` list (every workpiece
placed); a demo with neither (teleop on the physical cell, where the operator saves the demos to keep) is
exported and counted as one without a recorded outcome. An episode the graph stopped while it was recorded
(``interrupted``: kept beside its session, never in it; docs/data.md) is not exported either: with
``--interrupted`` it is, and each session named brings its interrupted episodes. Steps whose action the arm
refused (a recorder's ``action_accepted`` = 0) are dropped: training data never holds an action the arm did
not execute. The command prints what it skipped and dropped.

Images: ``--images libero`` (default) writes the LIBERO policy convention, the one inference uses
(libero_workcell.image_convention.policy_view: openpi's 180-degree rotation of the raw simulator image,
i.e. the upright image mirrored left to right), from whatever convention the file names in
``env_args["images"]``; ``--images upright`` writes them upright.

LeRobot is an optional dependency (``requirements-export.txt``, installed by ``scripts/bootstrap.sh --dev``);
without it the command says how to install it.
"""

from __future__ import annotations

import argparse
import inspect
import math
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np

from libero_workcell import libero_format
from libero_workcell.contract import STATE_DIM, format_prompt
from libero_workcell.demo_reading import outcome_of
from libero_workcell.image_convention import POLICY_LIBERO, POLICY_VIEWS, convention_of, policy_image
from libero_workcell.progress import progress_bar

IMAGE_OUT: Final = POLICY_VIEWS
ROBOT_TYPE: Final = "aubo_i5h"
_IMG = {"dtype": "image", "shape": (256, 256, 3), "names": ["height", "width", "channel"]}
FEATURES: Final = {
    "image": _IMG,
    "wrist_image": dict(_IMG),
    "state": {"dtype": "float32", "shape": (STATE_DIM,), "names": ["state"]},
    "actions": {"dtype": "float32", "shape": (7,), "names": ["actions"]},
}
CAMERA_FEATURES: Final = {"agentview_rgb": "image", "eye_in_hand_rgb": "wrist_image"}


class ExportError(RuntimeError):
    pass


def lerobot_dataset_class() -> Any:
    """LeRobot's ``LeRobotDataset``, importable on a CPU-only machine.

    PyPI's torchvision wheels are CUDA builds: beside the CPU torch their compiled ops cannot load and
    ``import torchvision`` fails on its fake registration of ``torchvision::nms``. LeRobot's dataset code
    needs only torchvision's Python transforms, so the two op schemas that registration expects are
    declared first (torchvision.ops.nms itself stays unusable; nothing here calls it)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local root: never the Hub
    try:
        import torch
    except ImportError:
        raise ExportError("LeRobot export needs requirements-export.txt: scripts/bootstrap.sh --dev") from None
    try:
        import torchvision
    except RuntimeError as exc:
        if "torchvision::nms" not in str(exc):
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        lib = torch.library.Library("torchvision", "DEF")
        lib.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lib.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        lerobot_dataset_class._keep = lib  # type: ignore[attr-defined]  # the schemas live as long as the library
        import torchvision
    del torchvision  # imported for its side effect: LeRobot's own import of it now works
    try:
        from lerobot.datasets.lerobot_dataset import LeRobotDataset
    except ImportError:
        raise ExportError("LeRobot export needs lerobot 0.3.3: scripts/bootstrap.sh --dev") from None
    return LeRobotDataset


@dataclass(frozen=True)
class ExportSummary:
    root: Path
    episodes: int
    frames: int
    seconds: float
    skipped: tuple[str, ...] = ()  # demos not exported, each with the reason
    dropped: tuple[str, ...] = ()  # demos exported without some of their steps, each with how many and why
    no_outcome: int = 0  # demos exported that record no outcome (kept by the operator who saved them)

    @property
    def frames_per_second(self) -> float:
        return self.frames / self.seconds if self.seconds > 0 else float("nan")


def demo_files(sources: Sequence[str | Path]) -> list[Path]:
    """The files to export (libero_format.demo_files), as an export error."""
    try:
        return libero_format.demo_files(sources)
    except FileNotFoundError as exc:
        raise ExportError(str(exc)) from None


def executed_steps(demo: h5py.Group, t: int, where: str) -> np.ndarray:
    """The steps whose action the arm executed or may have (bool, T): all but those a recorder stored as refused
    (``action_accepted`` 0; -1, no report, is kept). Its declared size is checked before it is read."""
    if "action_accepted" not in demo:
        return np.ones(t, bool)
    try:
        ds = libero_format.checked_dataset(demo, "action_accepted", where, rows=t)
    except libero_format.LiberoFormatError as exc:
        raise ExportError(str(exc)) from None
    if ds.shape != (t,) or ds.dtype.kind not in "biuf":
        raise ExportError(f"{where}: action_accepted is {ds.shape} {ds.dtype}, expected ({t},) integers")
    return ds[()] != 0


def _reader(path: Path) -> libero_format.DemoReader:
    try:  # a file from elsewhere: nothing read from outside its folder, nothing bigger than its bounds
        return libero_format.DemoReader(path)
    except (OSError, libero_format.LiberoFormatError) as exc:
        raise ExportError(str(exc)) from None


def count_demos(files: Sequence[Path]) -> int:
    """How many demos the files hold (the progress bar's total)."""
    total = 0
    for path in files:
        with _reader(path) as r:
            total += len(r.names)
    return total


def with_interrupted(files: Sequence[Path]) -> list[Path]:
    """``files`` and, after each recorder session among them, its interrupted episodes (recorder.session_file)."""
    from recorder.session_file import interrupted_episodes

    out: list[Path] = []
    for path in files:
        out += [path, *(p for p in interrupted_episodes(path) if p not in files)]
    return out


def _episodes(
    path: Path, images: str, everything: bool, summary: dict[str, Any], bar: Any, interrupted: bool = False
) -> Iterator[tuple[str, float, Iterator[dict[str, Any]]]]:
    """(task text, fps, frames) per demo of ``path`` to export, each demo read when its turn comes (validated as
    libero_format reads it, within its bounds), its frames one by one; what is skipped or dropped goes into
    ``summary`` (``skipped``, ``dropped``, ``no_outcome``). ``bar`` steps for each demo skipped (the caller steps
    it for each demo exported)."""
    with _reader(path) as r:
        try:
            stored = convention_of(r.env_args)
        except ValueError as exc:
            raise ExportError(f"{path}: {exc}") from None
        for name in r.names:
            g = r.group(name)
            a = {k: (v.decode(errors="replace") if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
            where = f"{path.name}:{name}"
            if "interrupted" in a and not interrupted:
                summary["skipped"].append(f"{where}: interrupted ({a['interrupted']}); --interrupted exports it")
                bar.update()
                continue
            try:
                success, outcome = outcome_of(a, f"{path}: data/{name}")
            except libero_format.LiberoFormatError as exc:
                raise ExportError(str(exc)) from None
            if success is False and not everything:
                summary["skipped"].append(f"{where}: not successful ({outcome}); --all exports it")
                bar.update()
                continue
            demo = _demo(r, name)
            keep = executed_steps(g, demo.num_samples, f"{path}: data/{name}")
            if not keep.any():
                summary["skipped"].append(f"{where}: the arm refused every action")
                bar.update()
                continue
            summary["no_outcome"] += success is None
            if not keep.all():
                summary["dropped"].append(f"{where}: {int((~keep).sum())} of {len(keep)} steps dropped: the arm "
                                          "refused their actions")  # fmt: skip
            task = str(a.get("language_instruction", "") or r.problem_info.get("language_instruction", ""))
            if not task:
                raise ExportError(f"{path}:{name}: no language instruction (demo attrs or problem_info)")
            preference = a.get("preference")
            prompt = format_prompt(task, str(preference) if preference else None)
            fps = _fps(a.get("control_hz", r.env_args.get("control_freq", 20.0)), f"{path}: data/{name}")
            cameras = _cameras(g, demo.num_samples, f"{path}: data/{name}")
            state = np.concatenate([demo.ee_pos, demo.ee_ori, demo.gripper_states[:, :1]], axis=1)
            view = lambda im, stored=stored: policy_image(im, images, stored)  # noqa: E731

            def frames(cameras=cameras, state=state, actions=demo.actions, view=view,
                       keep=keep) -> Iterator[dict[str, Any]]:  # fmt: skip
                for t in np.flatnonzero(keep):
                    frame = {out: np.ascontiguousarray(view(cameras[key][t])) for key, out in CAMERA_FEATURES.items()}
                    frame["state"] = state[t].astype(np.float32)
                    frame["actions"] = actions[t].astype(np.float32)
                    yield frame

            yield prompt, fps, frames()


def _demo(r: libero_format.DemoReader, name: str) -> libero_format.Demo:
    """Demo ``name`` as libero_format reads it (every key, shape and value checked), within a budget of its own:
    the export holds one demo at a time."""
    try:
        return r.demo(name)
    except libero_format.LiberoFormatError as exc:
        raise ExportError(str(exc)) from None


def _fps(value: Any, where: str) -> float:
    try:
        fps = float(value)
    except (TypeError, ValueError, OverflowError):
        fps = float("nan")
    if not (math.isfinite(fps) and fps >= 1.0):
        raise ExportError(f"{where}: control_hz {value!s:.40} is not a control rate (Hz, at least 1)")
    return fps


def _cameras(g: h5py.Group, t: int, where: str) -> dict[str, h5py.Dataset]:
    """A demo's camera datasets, read frame by frame later: each frame checked now to be what the dataset's
    features are ((256, 256, 3) uint8; LeRobot refuses anything else)."""
    obs, cameras = g["obs"], {}
    for key, out in CAMERA_FEATURES.items():
        try:
            ds = libero_format.checked_frames(obs, key, f"{where}/obs", rows=t)
        except libero_format.LiberoFormatError as exc:
            raise ExportError(str(exc)) from None
        if ds.shape[1:] != FEATURES[out]["shape"] or ds.dtype != np.uint8:
            raise ExportError(f"{where}/obs: {key!r} frames are {ds.shape[1:]} {ds.dtype}; the export writes "
                              f"{FEATURES[out]['shape']} uint8 (LeRobot's {out!r} feature)")  # fmt: skip
        cameras[key] = ds
    return cameras


def export(
    sources: Sequence[str | Path], root: str | Path, repo_id: str = "local/d2s", images: str = "libero",
    image_writer_threads: int = 2, everything: bool = False, progress: bool = True, interrupted: bool = False,
) -> ExportSummary:  # fmt: skip
    """Write the successful demos of ``sources`` (``everything``: every demo) as a LeRobot dataset at ``root``
    (which must not exist), without the steps whose action the arm refused; ``interrupted``: with
    the episodes the graph stopped while they were recorded. ``progress``: a bar of the demos
    done (exported or skipped) on stderr."""
    if images not in IMAGE_OUT:
        raise ExportError(f"images must be one of {IMAGE_OUT}, got {images!r}")
    root = Path(root)
    if root.exists():
        raise ExportError(f"{root} exists: LeRobot writes a new dataset (choose a new --out)")
    files = demo_files(sources)
    if interrupted:
        files = with_interrupted(files)
    dataset_class = lerobot_dataset_class()
    started = time.monotonic()
    ds = None
    episodes = frames = 0
    summary: dict[str, Any] = {"skipped": [], "dropped": [], "no_outcome": 0}
    with progress_bar(count_demos(files), "exporting", "demo", enabled=progress) as bar:
        for path in files:
            for prompt, fps, steps in _episodes(path, images, everything, summary, bar, interrupted):
                if ds is None:
                    ds = dataset_class.create(
                        repo_id=repo_id, root=root, fps=round(fps), robot_type=ROBOT_TYPE, features=FEATURES,
                        use_videos=False, image_writer_threads=image_writer_threads, image_writer_processes=0,
                    )  # fmt: skip
                    task_argument = "task" in inspect.signature(ds.add_frame).parameters
                elif round(fps) != ds.fps:
                    raise ExportError(f"{path}: demos at {fps:g} Hz and at {ds.fps} Hz cannot share one dataset")
                for frame in steps:
                    if task_argument:
                        ds.add_frame(frame, task=prompt)
                    else:  # LeRobot's v2.1 / v3.0 API: the task in the frame
                        ds.add_frame({**frame, "task": prompt})
                    frames += 1
                ds.save_episode()
                episodes += 1
                bar.update()
    if ds is not None and hasattr(ds, "finalize"):
        ds.finalize()
    return ExportSummary(root, episodes, frames, time.monotonic() - started, tuple(summary["skipped"]),
                         tuple(summary["dropped"]), summary["no_outcome"])  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sources", nargs="+", help="LIBERO-layout .hdf5 files or folders of them")
    ap.add_argument("--out", required=True, type=Path, help="the new LeRobot dataset's root folder")
    ap.add_argument("--repo-id", default="local/d2s")
    ap.add_argument("--images", choices=IMAGE_OUT, default=POLICY_LIBERO)
    ap.add_argument("--all", action="store_true", dest="everything",
                    help="export every demo, not only the successful ones")  # fmt: skip
    ap.add_argument("--interrupted", action="store_true",
                    help="export the episodes the graph stopped while they were recorded too (docs/data.md)")
    args = ap.parse_args(argv)
    try:
        s = export(args.sources, args.out, args.repo_id, args.images, everything=args.everything,
                   interrupted=args.interrupted)  # fmt: skip
    except ExportError as exc:
        print(f"export: {exc}", file=sys.stderr)
        return 2
    for line in s.skipped:
        print(f"skipped {line}")
    for line in s.dropped:
        print(f"dropped {line}")
    if s.no_outcome:
        print(f"{s.no_outcome} demos record no outcome: exported as kept by the operator who saved them")
    if not s.episodes:
        print("export: nothing to export (every demo was skipped): no dataset written", file=sys.stderr)
        return 1
    print(
        f"{s.root}: {s.episodes} episodes, {s.frames} frames in {s.seconds:.1f} s ({s.frames_per_second:.0f} frames/s)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
