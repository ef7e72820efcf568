"""LIBERO's processed HDF5 demonstration layout: read (validated) and write.

The layout (LIBERO's datasets, robomimic's readers, openpi's LIBERO converter)::

    data/                      attrs: env_args (JSON), problem_info (JSON, language_instruction), num_demos, total
      demo_<i>/                attrs: num_samples, + the task configuration
        actions                (T, 7)  the 7-D action issued after observation t
        rewards, dones         (T,)
        robot_states           (T, k)  LIBERO (Panda): finger qpos (2), eef pos (3), eef quat x y z w (4);
                                       AUBO (every writer here): gripper (1), TCP pos (3), TCP quat x y z w (4)
        obs/ee_pos             (T, 3)  TCP position, m
        obs/ee_ori             (T, 3)  TCP orientation, axis-angle, rad
        obs/ee_states          (T, 6)  ee_pos and ee_ori
        obs/gripper_states     (T, g)  finger joints (Panda: 2) or gripper coordinate (CTAG2F90D: 1)
        obs/joint_states       (T, n)  arm joints (Panda: 7, AUBO-i5H: 6)
        obs/agentview_rgb      (T, H, W, 3) uint8, obs/eye_in_hand_rgb likewise (optional here)
        timing/servo_tick      (T,)    int: the servo tick each action took effect on (recorders; optional)
        scene/workpiece_pos    (T, N, 3), scene/workpiece_held (T, N) uint8: the workpieces (simulation; optional)
        preference/satisfaction (T, k) each preference's satisfaction on the trace so far (optional)

:func:`read_demos` opens a file read-only and checks every key and shape it needs before returning
anything, so a malformed file is a clear error naming the demo, the key and what was expected, and is
never modified. :func:`write_demo` writes one demo in the same layout.

Demo files come from elsewhere (a shared drive, a download, a colleague), so every reader opens them with
:func:`open_demo_file`: HDF5 would otherwise read whatever local file a dataset's external raw storage, a
virtual dataset or an external link names (an image dataset backed by ``/etc/shadow`` passes every shape
check), and allocate whatever shape a dataset declares (a 7 KiB file can declare 15 GiB). It refuses
external storage and virtual datasets, and links that lead outside the file's own folder or to a file that is
not there (HDF5 would look for that one in the working directory); a recorder's index, linking its episodes
in the ``<name>_episodes/`` folder beside it, reads as before. Declared sizes are checked against
:data:`MAX_STEPS` and the byte bounds before anything is read (:func:`checked_dataset`).
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import h5py
import numpy as np

from libero_workcell.contract import ACTION_DIM, ACTION_HIGH, ACTION_LOW

IMAGE_KEYS = ("agentview_rgb", "eye_in_hand_rgb")
# robot_states of an AUBO demo, every writer's (docs/data.md): LIBERO's order (gripper, eef position, eef
# quaternion x y z w) with the CTAG2F90D's one gripper coordinate where the Panda has two finger joints
AUBO_ROBOT_STATE = ("gripper", "x", "y", "z", "qx", "qy", "qz", "qw")
CAMERA_IMAGE_KEYS = {"external": "agentview_rgb", "wrist": "eye_in_hand_rgb"}  # the workcell's camera -> its key


# Bounds on what a demo file may declare, checked before a dataset is read: far above any real demo, far below
# what would exhaust the memory of the machine reading it.
MAX_STEPS: Final = 1_000_000  # rows of a per-step dataset (14 hours at 20 Hz)
MAX_ARRAY_BYTES: Final = 256 * 1024**2  # a numeric dataset read whole (a 14-hour demo's actions: 56 MB)
MAX_FRAME_BYTES: Final = 64 * 1024**2  # one image frame (a 256 x 256 rgb8 frame is 192 KiB)
MAX_IMAGES_BYTES: Final = 8 * 1024**3  # one camera's frames read whole (40 minutes at 256 x 256, 20 Hz)
# what one read holds in memory at most, every dataset together (LoadBudget): 4 million steps of a demo's numbers
# (55 hours at 20 Hz; LIBERO-90's 4,500 demos are 0.7 million), or 11 minutes of both cameras' frames at 20 Hz
MAX_LOAD_BYTES: Final = 1024**3


class LiberoFormatError(ValueError):
    pass


def open_demo_file(path: str | Path, follow_links: bool = True) -> h5py.File:
    """``path`` opened read-only, once it is safe to read: no dataset in it (or in a file it links) has external
    raw storage or is virtual, and every external link leads to a file inside ``path``'s folder (its subfolders
    included) that is there. LiberoFormatError says what was refused and where; OSError (as from h5py) when
    ``path`` is no HDF5 file at all. ``follow_links=False``: the caller only lists this file's names and
    attributes (a recorder's index while it resumes): links must still stay inside the folder, but their files
    are neither required nor opened. The caller closes the file (``with open_demo_file(p) as f``)."""
    path = Path(path)
    f = h5py.File(path, "r")
    try:
        folder = path.resolve().parent
        _check_demo_file(f, path, folder, {path.resolve()}, follow_links)
    except BaseException:
        f.close()
        raise
    return f


def _check_demo_file(f: h5py.File, path: Path, folder: Path, seen: set[Path], follow: bool) -> None:
    """Refuse what would make HDF5 read outside ``folder``: in ``f`` and, with ``follow``, in what it links."""
    problems: list[str] = []
    links: list[tuple[str, h5py.ExternalLink]] = []

    def on_link(name: str, link: object) -> None:
        if isinstance(link, h5py.ExternalLink):
            links.append((name, link))
        elif not isinstance(link, (h5py.HardLink, h5py.SoftLink)):  # a soft link names a path in the same file
            problems.append(f"{name!r} is a {type(link).__name__} (only hard, soft and external links are read)")

    def on_object(name: str, obj: object) -> None:
        if isinstance(obj, h5py.Dataset):
            if obj.is_virtual:
                problems.append(f"dataset {name!r} is virtual (its data would come from other files)")
            elif obj.external:
                problems.append(f"dataset {name!r} keeps its data in external files {[e[0] for e in obj.external]}")

    f.visititems_links(on_link)  # every link, none followed
    f.visititems(on_object)  # every object in this file (external links are not followed)
    for name, link in links:
        target = _link_target(path, name, link.filename, folder, must_exist=follow, problems=problems)
        if follow and target is not None and target not in seen:
            seen.add(target)
            try:
                linked = h5py.File(target, "r")
            except OSError as exc:
                problems.append(f"{name!r} links to {target}, which is no readable HDF5 file ({exc})")
                continue
            with linked:
                _check_demo_file(linked, target, folder, seen, follow)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise LiberoFormatError(f"{path}: refused: {problems[0]}{more}. A demo file must hold its own data, or "
                                "link only files in its own folder: copy the data into the file")  # fmt: skip


def _link_target(path: Path, name: str, filename: str, folder: Path, must_exist: bool,
                 problems: list[str]) -> Path | None:  # fmt: skip
    """Where an external link in ``path`` leads (as HDF5 looks first: from the linking file's folder), or None
    after noting why it may not be followed."""
    target = (path.resolve().parent / filename).resolve()
    if not target.is_relative_to(folder):
        problems.append(f"{name!r} links to {filename!r}, outside the file's folder {folder}")
        return None
    if must_exist and not target.is_file():  # HDF5 would look for it in the working directory next
        problems.append(f"{name!r} links to {filename!r}, which is not in {target.parent}")
        return None
    return target


def checked_dataset(group: h5py.Group, key: str, where: str, max_bytes: int = MAX_ARRAY_BYTES,
                    rows: int | None = None) -> h5py.Dataset:  # fmt: skip
    """``group[key]`` as a dataset whose declared size may be read: at most :data:`MAX_STEPS` rows (exactly
    ``rows`` when given) and ``max_bytes``; LiberoFormatError before anything is read otherwise."""
    if key not in group:
        raise LiberoFormatError(f"{where}: missing {key!r}")
    item = group[key]
    if not isinstance(item, h5py.Dataset):
        raise LiberoFormatError(f"{where}: {key!r} is not a dataset")
    shape = item.shape or ()
    if len(shape) and rows is not None and shape[0] != rows:
        raise LiberoFormatError(f"{where}: {key!r} has shape {shape}, expected {rows} rows (one per action)")
    nbytes = math.prod(shape) * item.dtype.itemsize  # Python ints: no overflow whatever the file declares
    if (len(shape) and shape[0] > MAX_STEPS) or nbytes > max_bytes:
        raise LiberoFormatError(f"{where}: {key!r} declares shape {shape} {item.dtype} ({nbytes / 1024**2:.0f} MiB), "
                                f"over the bounds for a demo ({MAX_STEPS} steps, {max_bytes / 1024**2:.0f} MiB): "
                                "not a demo file, or a damaged one")  # fmt: skip
    return item


@dataclass(frozen=True)
class Demo:
    """One demonstration: T observations, each with the action issued after it."""

    name: str
    actions: np.ndarray  # (T, 7)
    ee_pos: np.ndarray  # (T, 3)
    ee_ori: np.ndarray  # (T, 3) axis-angle
    gripper_states: np.ndarray  # (T, g)
    joint_states: np.ndarray  # (T, n)
    robot_states: np.ndarray  # (T, k)
    images: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (T, H, W, 3) uint8, if read
    attrs: dict[str, Any] = field(default_factory=dict)
    # (T,) the servo tick each action took effect on, -1 unknown (a recorder's timing/servo_tick); None: not
    # recorded (simulation data: each action held exactly one control period)
    servo_tick: np.ndarray | None = None
    # (T, N, 3) / (T, N) each workpiece's centre and whether it is between the fingers (scene/, simulation only)
    scene_pos: np.ndarray | None = None
    scene_held: np.ndarray | None = None
    # (T, k) the per-step satisfaction of each of the episode's k preferences (preference/satisfaction: the
    # metric re-evaluated on the trace so far, NaN while undefined; src/preferences)
    satisfaction: np.ndarray | None = None

    @property
    def num_samples(self) -> int:
        return len(self.actions)


@dataclass(frozen=True)
class DemoFile:
    path: Path
    problem_info: dict[str, Any]
    env_args: dict[str, Any]
    demos: list[Demo]


def demo_files(sources: Sequence[str | Path]) -> list[Path]:
    """LIBERO-layout files named by ``sources``: each folder's ``*.hdf5`` (sorted; not its subfolders, such as a
    recorder's ``*_episodes``, which its index links), and files as given. FileNotFoundError for a missing
    source or when there are none."""
    files: list[Path] = []
    for src in map(Path, sources):
        if src.is_dir():
            files += sorted(p for p in src.glob("*.hdf5") if p.is_file())
        elif src.is_file():
            files.append(src)
        else:
            raise FileNotFoundError(f"{src}: no such file or folder")
    if not files:
        raise FileNotFoundError(f"no .hdf5 demo files in {[str(s) for s in sources]}")
    return files


def demo_order(name: str) -> tuple[int, str]:
    """Sort key of demo names: demo_2 before demo_10 (LIBERO's numbering), other names after."""
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def checked_frames(group: h5py.Group, key: str, where: str, rows: int | None = None) -> h5py.Dataset:
    """``group[key]`` as image frames (T, H, W, C) read one by one: each at most :data:`MAX_FRAME_BYTES`."""
    ds = checked_dataset(group, key, where, MAX_STEPS * MAX_FRAME_BYTES, rows)
    if ds.ndim != 4 or math.prod(ds.shape[1:]) * ds.dtype.itemsize > MAX_FRAME_BYTES:
        raise LiberoFormatError(f"{where}: {key!r} is {ds.shape} {ds.dtype}, expected frames (T, H, W, 3) of at "
                                f"most {MAX_FRAME_BYTES / 1024**2:.0f} MiB each")  # fmt: skip
    return ds


class LoadBudget:
    """The bytes a reader may still load. Each read takes the in-memory size of what it is about to read (as
    declared, before reading), so datasets that are each within their bounds cannot add up past what a machine
    holds: a 50 KiB file of 12 demos, each within the per-dataset bounds, declared 7 GiB. One budget can span
    every read of a run that keeps what it read (the preference report); by default each read has its own."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit, self.used = int(MAX_LOAD_BYTES if limit is None else limit), 0

    def take(self, nbytes: int, what: str) -> None:
        """Count ``nbytes`` of ``what`` as loaded; LiberoFormatError (nothing counted) if that passes the limit."""
        if self.used + nbytes > self.limit:
            raise LiberoFormatError(f"{what} would load {_amount(nbytes)} ({_amount(self.used)} loaded already), "
                                    f"over the {_amount(self.limit)} a reader loads (MAX_LOAD_BYTES): not a demo file, "
                                    "or read its demos one at a time (DemoReader)")  # fmt: skip
        self.used += nbytes


def _amount(nbytes: int) -> str:
    return f"{nbytes / 1024**2:.0f} MiB" if nbytes >= 10 * 1024**2 else f"{nbytes:,} bytes"


def _group(parent: h5py.Group, key: str) -> h5py.Group | None:
    """``parent[key]`` if it is a group (``key in`` a dataset would iterate its rows)."""
    item = parent.get(key)
    return item if isinstance(item, h5py.Group) else None


def _numeric(group: h5py.Group, key: str, where: str, rows: int | None = None,
             max_bytes: int = MAX_ARRAY_BYTES) -> h5py.Dataset:  # fmt: skip
    """:func:`checked_dataset` whose dtype is numbers (bool, integers, floats): nothing else converts to them."""
    ds = checked_dataset(group, key, where, max_bytes, rows)
    if ds.dtype.kind not in "biuf":
        raise LiberoFormatError(f"{where}: {key!r} is {ds.dtype}, expected numbers")
    return ds


def _held_bytes(found: Mapping[str, h5py.Dataset]) -> int:
    """What reading ``found`` holds in memory: images as stored, every other array as float64 (at least)."""
    images = {f"obs/{k}" for k in IMAGE_KEYS}
    return sum(math.prod(ds.shape) * (ds.dtype.itemsize if key in images else max(ds.dtype.itemsize, 8))
               for key, ds in found.items())  # fmt: skip


def _demo_datasets(g: h5py.Group, where: str, images: bool) -> dict[str, h5py.Dataset]:
    """The datasets of one demo a read loads (by their path in the demo), each checked before anything is read:
    there, numeric, its declared size within the bounds, one row per action; images (T, H, W, 3) uint8."""
    actions = _numeric(g, "actions", where)
    if actions.ndim != 2 or actions.shape[1] != ACTION_DIM:
        raise LiberoFormatError(f"{where}: 'actions' has shape {actions.shape}, expected (T, {ACTION_DIM})")
    t = actions.shape[0]
    obs, ow = _group(g, "obs"), f"{where}/obs"
    if obs is None:
        raise LiberoFormatError(f"{where}: missing 'obs'")
    found = {"actions": actions}
    for key in ("ee_pos", "ee_ori", "gripper_states", "joint_states"):
        if key != "joint_states" or key in obs:
            found[f"obs/{key}"] = _numeric(obs, key, ow, t)
    found["robot_states"] = _numeric(g, "robot_states", where, t)
    for key in IMAGE_KEYS if images else ():
        if key in obs:
            img = checked_dataset(obs, key, ow, MAX_IMAGES_BYTES, rows=t)
            if img.ndim != 4 or img.shape[3] != 3 or img.dtype != np.uint8:
                raise LiberoFormatError(f"{ow}: {key!r} has shape {img.shape} {img.dtype}, expected (T, H, W, 3) uint8")
            found[f"obs/{key}"] = img
    optional = {"timing": ("servo_tick",), "preference": ("satisfaction",),
                "scene": ("workpiece_pos", "workpiece_held")}  # fmt: skip
    for name, keys in optional.items():
        sub = _group(g, name)
        for key in keys if sub is not None else ():
            if key in sub or name == "scene":  # a scene has both
                found[f"{name}/{key}"] = _numeric(sub, key, f"{where}/{name}", t)
    return found


def _array(ds: h5py.Dataset, where: str, width: int | tuple[int, ...] | None) -> np.ndarray:
    """A checked numeric dataset read as float64 (T, width), every value finite."""
    key, a = ds.name.rsplit("/", 1)[-1], ds[()]
    if isinstance(width, int) and (a.ndim != 2 or a.shape[1] != width):
        raise LiberoFormatError(f"{where}: {key!r} has shape {a.shape}, expected (T, {width})")
    if isinstance(width, tuple) and (a.ndim != 2 or a.shape[1] not in width):
        raise LiberoFormatError(f"{where}: {key!r} has shape {a.shape}, expected (T, g) with g in {list(width)}")
    if width is None and a.ndim != 2:
        raise LiberoFormatError(f"{where}: {key!r} has shape {a.shape}, expected (T, n)")
    if np.issubdtype(a.dtype, np.floating) and not np.all(np.isfinite(a)):
        bad = int(np.argwhere(~np.isfinite(a))[0][0])
        raise LiberoFormatError(f"{where}: {key!r} holds a non-finite value at step {bad}")
    return np.asarray(a, dtype=float)


def json_attr(attrs: Mapping[str, Any], key: str, where: str) -> dict[str, Any]:
    """A JSON attribute (``env_args``, ``problem_info``) as a mapping ({} when absent, ``{"value": v}`` when not
    a mapping); LiberoFormatError when it is not JSON."""
    if key not in attrs:
        return {}
    raw = attrs[key]
    raw = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    try:
        value = json.loads(raw)
    except ValueError as exc:  # JSONDecodeError, and RecursionError's kin: a value nested past what json takes
        raise LiberoFormatError(f"{where}: attribute {key!r} is not JSON: {exc}") from None
    return value if isinstance(value, dict) else {"value": value}


def _load_demo(name: str, g: h5py.Group, found: Mapping[str, h5py.Dataset]) -> Demo:
    """Read and validate one demo's ``found`` datasets (:func:`_demo_datasets`, its load already taken)."""
    where = f"data/{name}"
    actions = _array(found["actions"], where, ACTION_DIM)
    if len(actions) < 2:
        raise LiberoFormatError(f"{where}: {len(actions)} steps; a demonstration needs at least 2")
    if np.any(actions < ACTION_LOW) or np.any(actions > ACTION_HIGH):
        bad = int(np.argwhere((actions < ACTION_LOW) | (actions > ACTION_HIGH))[0][0])
        raise LiberoFormatError(f"{where}: 'actions' leaves [{ACTION_LOW}, {ACTION_HIGH}] at step {bad}")
    t, ow = len(actions), f"{where}/obs"
    ee_pos, ee_ori = _array(found["obs/ee_pos"], ow, 3), _array(found["obs/ee_ori"], ow, 3)
    gripper = _array(found["obs/gripper_states"], ow, (1, 2))
    joints = _array(found["obs/joint_states"], ow, None) if "obs/joint_states" in found else np.zeros((t, 0))
    robot_states = _array(found["robot_states"], where, None)
    pictures = {key: found[f"obs/{key}"][()] for key in IMAGE_KEYS if f"obs/{key}" in found}
    attrs = {k: (v.decode(errors="replace") if isinstance(v, bytes) else v) for k, v in g.attrs.items()}
    if "num_samples" in attrs and not _equals(attrs["num_samples"], t):
        raise LiberoFormatError(f"{where}: num_samples is {attrs['num_samples']!s:.40} but 'actions' has {t} rows")
    servo_tick = scene_pos = scene_held = satisfaction = None
    if "timing/servo_tick" in found:
        servo_tick = found["timing/servo_tick"][()]
        if servo_tick.shape != (t,) or not np.issubdtype(servo_tick.dtype, np.integer):
            raise LiberoFormatError(f"{where}/timing: 'servo_tick' is {servo_tick.shape} {servo_tick.dtype}, "
                                    f"expected ({t},) integers")  # fmt: skip
        servo_tick = servo_tick.astype(np.int64)
    if "scene/workpiece_pos" in found:
        scene_pos = np.asarray(found["scene/workpiece_pos"][()], float)
        if scene_pos.ndim != 3 or scene_pos.shape[2] != 3:
            raise LiberoFormatError(f"{where}/scene: 'workpiece_pos' has shape {scene_pos.shape}, expected ({t}, N, 3)")
        scene_held = np.asarray(found["scene/workpiece_held"][()]).astype(bool)
        if scene_held.shape != scene_pos.shape[:2]:
            raise LiberoFormatError(f"{where}/scene: 'workpiece_held' is {scene_held.shape}, expected "
                                    f"{scene_pos.shape[:2]}")  # fmt: skip
    if "preference/satisfaction" in found:
        satisfaction = np.asarray(found["preference/satisfaction"][()], float)
        if satisfaction.ndim != 2:
            raise LiberoFormatError(f"{where}/preference: 'satisfaction' is {satisfaction.shape}, expected ({t}, k)")
    return Demo(name, actions, ee_pos, ee_ori, gripper, joints, robot_states, pictures, attrs, servo_tick,
                scene_pos, scene_held, satisfaction)  # fmt: skip


def _equals(value: Any, t: int) -> bool:
    """Whether an attribute records the integer ``t`` (HDF5 gives numpy scalars; a file from elsewhere, anything)."""
    try:
        return bool(value == t)
    except (TypeError, ValueError):  # an array attribute: its truth is ambiguous
        return False


class DemoReader:
    """A LIBERO-layout file, open read-only (:func:`open_demo_file`'s checks made once), whose demos are read
    when asked, by name, each validated, and never more than a :class:`LoadBudget` allows: a reader that needs
    one demo of a file (replay, one conversion job) or one at a time (the export, the preference report) loads
    only that. Every LiberoFormatError names the file. Close it (``with DemoReader(p) as r``)."""

    def __init__(self, path: str | Path) -> None:
        self._files = contextlib.ExitStack()
        self.path, data = self._files.enter_context(_data_group(path))
        try:
            self.names = sorted((k for k in data if isinstance(data[k], h5py.Group)), key=demo_order)
            if not self.names:
                raise LiberoFormatError(f"{self.path}: 'data' holds no demos")
            with self._named():
                self.problem_info = json_attr(data.attrs, "problem_info", "data")
                self.env_args = json_attr(data.attrs, "env_args", "data")
        except BaseException:
            self._files.close()
            raise
        self._data = data

    @contextlib.contextmanager
    def _named(self) -> Iterator[None]:
        """LiberoFormatError raised inside names this file."""
        try:
            yield
        except LiberoFormatError as exc:
            raise LiberoFormatError(f"{self.path}: {exc}") from None

    def group(self, name: str) -> h5py.Group:
        """Demo ``name``'s group, as stored (nothing checked beyond its name; valid while the reader is open)."""
        if name not in self.names:
            shown = self.names if len(self.names) <= 20 else [*self.names[:20], "..."]
            raise LiberoFormatError(f"{self.path}: 'data' holds no demo {name!r}; it holds {shown}")
        return self._data[name]

    def each(self, names: Iterable[str] | None = None, images: bool = False,
             budget: LoadBudget | None = None) -> Iterator[Demo]:  # fmt: skip
        """The demos ``names`` (default: all, in demo order), validated, read one at a time as the caller goes:
        their whole load is taken from ``budget`` (default: a budget of their own) before the first is read."""
        names = self.names if names is None else list(names)
        groups = [(n, self.group(n)) for n in names]
        what = f"data/{names[0]}" if len(names) == 1 else f"{len(names)} demos"
        with self._named():
            found = [(n, g, _demo_datasets(g, f"data/{n}", images)) for n, g in groups]
            (budget if budget is not None else LoadBudget()).take(sum(_held_bytes(f) for *_, f in found), what)
        for n, g, f in found:
            with self._named():
                demo = _load_demo(n, g, f)
            yield demo

    def demos(self, names: Iterable[str] | None = None, images: bool = False,
              budget: LoadBudget | None = None) -> list[Demo]:  # fmt: skip
        """:meth:`each`, as a list."""
        return list(self.each(names, images, budget))

    def demo(self, name: str, images: bool = False, budget: LoadBudget | None = None) -> Demo:
        """Demo ``name``, validated, its load taken from ``budget`` (default: its own)."""
        return self.demos([name], images, budget)[0]

    def close(self) -> None:
        self._files.close()

    def __enter__(self) -> DemoReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_demos(path: str | Path, images: bool = False, budget: LoadBudget | None = None) -> DemoFile:
    """Every demo of a LIBERO-layout file, validated; opened read-only (nothing is ever written). All of them
    together within ``budget`` (default :data:`MAX_LOAD_BYTES`), refused before any is read otherwise."""
    with DemoReader(path) as r:
        return DemoFile(r.path, r.problem_info, r.env_args, r.demos(images=images, budget=budget))


def read_demo(path: str | Path, name: str, images: bool = False, budget: LoadBudget | None = None) -> Demo:
    """One demo of a LIBERO-layout file, validated as :func:`read_demos` validates it, the others not read (a
    worker converting one demo of a file of many reads only its own)."""
    with DemoReader(path) as r:
        return r.demo(name, images, budget)


@contextlib.contextmanager
def _data_group(path: str | Path) -> Iterator[tuple[Path, h5py.Group]]:
    """A LIBERO-layout file's path and its ``data`` group, opened read-only (open_demo_file's checks made)."""
    path = Path(path)
    if not path.is_file():
        raise LiberoFormatError(f"{path}: no such file")
    try:
        f = open_demo_file(path)
    except OSError as exc:
        raise LiberoFormatError(f"{path}: not an HDF5 file ({exc})") from exc
    with f:
        if not isinstance(f.get("data"), h5py.Group):
            raise LiberoFormatError(f"{path}: missing the 'data' group (not LIBERO's layout)")
        yield path, f["data"]


def read_frames(path: str | Path, demo: str, key: str, steps: Sequence[int]) -> np.ndarray:
    """Some frames of one camera of one demo, (len(steps), H, W, 3) uint8, without loading the rest."""
    if key not in IMAGE_KEYS:
        raise LiberoFormatError(f"{key!r} is not an image key; image keys: {list(IMAGE_KEYS)}")
    with _data_group(path) as (path, data):
        where = f"data/{demo}/obs"
        obs = data.get(f"{demo}/obs") if isinstance(data.get(demo), h5py.Group) else None
        if not isinstance(obs, h5py.Group) or key not in obs:
            raise LiberoFormatError(f"{path}: {where} has no {key!r}")
        ds = checked_frames(obs, key, f"{path}: {where}")
        bad = [s for s in steps if not 0 <= s < ds.shape[0]]
        if bad:
            raise LiberoFormatError(f"{path}: {where}/{key} has {ds.shape[0]} frames; asked for steps {bad}")
        LoadBudget().take(len(steps) * math.prod(ds.shape[1:]) * ds.dtype.itemsize, f"{path}: {where}/{key}")
        return np.stack([ds[int(s)] for s in steps]) if len(steps) else np.zeros((0, *ds.shape[1:]), np.uint8)


def aubo_robot_states(gripper: Any, ee_pos: Any, ee_ori: Any) -> np.ndarray:
    """(T, 8) ``robot_states`` of an AUBO demo (:data:`AUBO_ROBOT_STATE`) from the gripper coordinate (T,),
    TCP positions (T, 3) and TCP axis-angles (T, 3): the one layout every writer uses."""
    from scipy.spatial.transform import Rotation

    pos, ori = np.atleast_2d(np.asarray(ee_pos, float)), np.atleast_2d(np.asarray(ee_ori, float))
    grip = np.asarray(gripper, float).reshape(-1, 1)
    return np.concatenate([grip, pos, Rotation.from_rotvec(ori).as_quat()], axis=1)


def image_dataset_options(frame_shape: tuple[int, ...]) -> dict[str, Any]:
    """How image datasets are stored: one chunk per frame, gzip level 4 (what LIBERO's files hold)."""
    return {"chunks": (1, *frame_shape), "compression": "gzip", "compression_opts": 4}


def write_demo(data: h5py.Group, demo: Demo, existing_obs: bool = False) -> h5py.Group:
    """Write ``demo`` as ``data/<demo.name>`` in LIBERO's layout (images compressed, chunked per frame).

    ``existing_obs``: the demo's group and its ``obs`` group exist already (a recorder streamed the images
    into them); the rest is written beside."""
    g = data[demo.name] if existing_obs else data.create_group(demo.name)
    g.attrs["num_samples"] = demo.num_samples
    for k, v in demo.attrs.items():
        if v is None:  # absent (no preference, ...): HDF5 has no null
            continue
        g.attrs[k] = json.dumps(v) if isinstance(v, (dict, list, tuple)) else v
    t = demo.num_samples
    g.create_dataset("actions", data=np.asarray(demo.actions, float))
    g.create_dataset("rewards", data=np.zeros(t, np.uint8))
    dones = np.zeros(t, np.uint8)
    dones[-1] = 1
    g.create_dataset("dones", data=dones)
    g.create_dataset("robot_states", data=np.asarray(demo.robot_states, float))
    obs = g["obs"] if existing_obs else g.create_group("obs")
    obs.create_dataset("ee_pos", data=demo.ee_pos)
    obs.create_dataset("ee_ori", data=demo.ee_ori)
    obs.create_dataset("ee_states", data=np.concatenate([demo.ee_pos, demo.ee_ori], axis=1))
    obs.create_dataset("gripper_states", data=demo.gripper_states)
    obs.create_dataset("joint_states", data=demo.joint_states)
    for key, img in demo.images.items():
        obs.create_dataset(key, data=img, **image_dataset_options(img.shape[1:]))
    if demo.scene_pos is not None and demo.scene_held is not None:
        g.create_dataset("scene/workpiece_pos", data=np.asarray(demo.scene_pos, float))
        g.create_dataset("scene/workpiece_held", data=np.asarray(demo.scene_held, np.uint8))
    if demo.satisfaction is not None:
        g.create_dataset("preference/satisfaction", data=np.asarray(demo.satisfaction, float))
    return g


def write_file_attrs(data: h5py.Group, problem_info: Mapping[str, Any], env_args: Mapping[str, Any]) -> None:
    """The ``data`` group's attributes; ``num_demos`` / ``total`` from what it holds now."""
    demos = [data[k] for k in data if isinstance(data[k], h5py.Group)]
    data.attrs["problem_info"] = json.dumps(dict(problem_info))
    data.attrs["env_args"] = json.dumps(dict(env_args))
    data.attrs["num_demos"] = len(demos)
    data.attrs["total"] = int(sum(int(d.attrs["num_samples"]) for d in demos))


def write_demo_file(
    path: str | Path, demos: Iterable[Demo], problem_info: Mapping[str, Any], env_args: Mapping[str, Any]
) -> Path:
    """A new LIBERO-layout file of ``demos`` (produced one at a time), complete or absent: written beside as
    ``<name>.partial`` and renamed at the end. An existing file is never overwritten."""
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists: choose a new file (nothing recorded is ever overwritten)")
    tmp = path.with_name(path.name + ".partial")
    try:
        with h5py.File(tmp, "w") as f:
            data = f.create_group("data")
            for demo in demos:
                write_demo(data, demo)
            write_file_attrs(data, problem_info, env_args)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.rename(path)
    return path
