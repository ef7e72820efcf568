"""Untrusted demo files (issue 21, defects 9 and 12): crafted HDF5 files that would make a reader take bytes from
another local file, or allocate what a tiny file declares, are refused with a LiberoFormatError naming what and
where, by every reader; the recorder's own index (links into its ``_episodes`` folder) still reads."""

from __future__ import annotations

import json
import re

import h5py
import numpy as np
import pytest
from demo_files import demo, make_file
from hypothesis import event, given, settings
from hypothesis import strategies as st
from memory_cap import run_capped
from tqdm import tqdm

from libero_workcell.libero_format import (
    MAX_ARRAY_BYTES,
    MAX_LOAD_BYTES,
    MAX_STEPS,
    Demo,
    DemoReader,
    LiberoFormatError,
    LoadBudget,
    open_demo_file,
    read_demos,
    read_frames,
    write_demo,
    write_file_attrs,
)

SECRET = b"root:x:0:0:root:/root:/bin/bash\n" * 200  # an /etc/passwd-like file the reader must never pass on


@pytest.fixture
def secret(tmp_path):
    """A private file outside the folder the demo files are in."""
    path = tmp_path / "private" / "passwd"
    path.parent.mkdir()
    path.write_bytes(SECRET)
    return path


@pytest.fixture
def demos(tmp_path):
    folder = tmp_path / "demos"
    folder.mkdir()
    return folder


def file_with_demo(path, images: bool = True, t: int = 6) -> None:
    make_file(path, [demo("demo_0", t=t, images=images)])


def test_an_image_backed_by_another_file_is_refused_by_every_reader(demos, secret) -> None:
    path = demos / "d.hdf5"
    file_with_demo(path, images=False)
    with h5py.File(path, "a") as f:  # the camera's frames "stored" in the private file: shapes all look right
        f["data/demo_0/obs"].create_dataset("agentview_rgb", shape=(6, 8, 8, 3), dtype=np.uint8,
                                            external=[(str(secret), 0, 6 * 8 * 8 * 3)])  # fmt: skip
    with h5py.File(path, "r") as f:  # what plain h5py does: the private bytes come out as an image
        assert f["data/demo_0/obs/agentview_rgb"][()].tobytes() == SECRET[: 6 * 8 * 8 * 3]
    for read in (lambda: read_demos(path, images=True), lambda: read_demos(path),
                 lambda: read_frames(path, "demo_0", "agentview_rgb", [0]), lambda: open_demo_file(path)):  # fmt: skip
        with pytest.raises(LiberoFormatError, match=r"agentview_rgb.*external files.*passwd"):
            read()


def test_a_virtual_dataset_is_refused(demos, secret) -> None:
    other = demos / "other.hdf5"
    with h5py.File(other, "w") as f:
        f["x"] = np.zeros((6, 7))
    path = demos / "d.hdf5"
    file_with_demo(path)
    layout = h5py.VirtualLayout(shape=(6, 7), dtype=float)
    layout[:] = h5py.VirtualSource(str(other), "x", shape=(6, 7))
    with h5py.File(path, "a") as f:
        del f["data/demo_0/robot_states"]
        f["data/demo_0"].create_virtual_dataset("robot_states", layout)
    with pytest.raises(LiberoFormatError, match=r"robot_states.*virtual"):
        read_demos(path)


def test_an_external_link_out_of_the_folder_is_refused(demos, secret, tmp_path) -> None:
    outside = tmp_path / "private" / "demos_of_someone.hdf5"
    file_with_demo(outside)
    path = demos / "d.hdf5"
    with h5py.File(path, "w") as f:
        f.create_group("data")["demo_0"] = h5py.ExternalLink("../private/demos_of_someone.hdf5", "/data/demo_0")
        f["data/demo_1"] = h5py.ExternalLink(str(secret), "/")  # the passwd-like file itself, by absolute path
    with h5py.File(path, "r") as f:
        assert f["data/demo_0/actions"].shape == (6, 7)  # plain h5py follows it
    with pytest.raises(LiberoFormatError, match=r"'data/demo_0' links to '../private/demos_of_someone.hdf5', "
                                                r"outside the file's folder .* \(and 1 more\)"):  # fmt: skip
        read_demos(path)
    with pytest.raises(LiberoFormatError, match="outside the file's folder"):
        open_demo_file(path, follow_links=False)  # listing only: still refused


def test_a_link_to_a_file_not_in_the_folder_is_refused_rather_than_looked_up_in_the_working_directory(
    demos, tmp_path, monkeypatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    file_with_demo(cwd / "elsewhere.hdf5")
    monkeypatch.chdir(cwd)
    path = demos / "d.hdf5"
    with h5py.File(path, "w") as f:
        f.create_group("data")["demo_0"] = h5py.ExternalLink("elsewhere.hdf5", "/data/demo_0")
    with h5py.File(path, "r") as f:
        assert f["data/demo_0/actions"].shape == (6, 7)  # HDF5 found it in the working directory
    with pytest.raises(LiberoFormatError, match=r"'data/demo_0' links to 'elsewhere\.hdf5', which is not in"):
        read_demos(path)
    with open_demo_file(path, follow_links=False) as f:  # listing only (a recorder resuming): names are fine
        assert list(f["data"]) == ["demo_0"]


def test_the_recorders_index_linking_its_episodes_folder_reads_and_a_bad_episode_is_refused(demos, secret) -> None:
    episodes = demos / "d2s_episodes"
    episodes.mkdir()
    for i in range(2):
        with h5py.File(episodes / f"demo_{i}.hdf5", "w") as f:
            write_demo(f.create_group("data"), demo(f"demo_{i}", t=5 + i))
    index = demos / "d2s.hdf5"
    with h5py.File(index, "w") as f:
        data = f.create_group("data")
        for i in range(2):
            data[f"demo_{i}"] = h5py.ExternalLink(f"d2s_episodes/demo_{i}.hdf5", f"/data/demo_{i}")
        data["latest"] = h5py.SoftLink("/data/demo_1")  # a soft link stays in the file: fine
        write_file_attrs(data, {"language_instruction": "x"}, {})
    got = read_demos(index, images=True)
    assert [d.num_samples for d in got.demos] == [5, 6, 6]
    assert read_frames(index, "demo_1", "eye_in_hand_rgb", [5]).any()
    with h5py.File(episodes / "demo_1.hdf5", "a") as f:  # an episode inside the folder, its data outside it
        del f["data/demo_1/obs/eye_in_hand_rgb"]
        f["data/demo_1/obs"].create_dataset("eye_in_hand_rgb", shape=(6, 8, 8, 3), dtype=np.uint8,
                                            external=[(str(secret), 0, 6 * 8 * 8 * 3)])  # fmt: skip
    with pytest.raises(LiberoFormatError, match=r"d2s_episodes/demo_1.hdf5: refused: dataset .*external files"):
        read_demos(index)
    (episodes / "demo_1.hdf5").write_bytes(b"torn")  # an episode that is no HDF5 file
    with pytest.raises(LiberoFormatError, match=r"links to .*demo_1\.hdf5, which is no readable HDF5 file"):
        read_demos(index)
    with open_demo_file(index, follow_links=False) as f:  # a recorder resuming lists it all the same
        assert sorted(f["data"]) == ["demo_0", "demo_1", "latest"]


def test_a_tiny_file_declaring_a_huge_dataset_is_a_format_error_not_a_memory_error(demos) -> None:
    path = demos / "d.hdf5"
    file_with_demo(path, images=False)
    with h5py.File(path, "a") as f:
        del f["data/demo_0/actions"]  # 15 GiB of actions declared, nothing stored
        f["data/demo_0"].create_dataset("actions", shape=(15 * 1024**3 // 56, 7), dtype=float, chunks=(1, 7))
    assert path.stat().st_size < 64 * 1024
    with pytest.raises(LiberoFormatError, match=r"'actions' declares shape \(287609417, 7\) float64 \(15360 MiB\)"):
        read_demos(path)


@pytest.mark.parametrize(
    "key, shape, dtype",
    [
        ("obs/agentview_rgb", (6, 2**16, 2**16, 3), np.uint8),  # 72 GiB of frames for 6 steps
        ("obs/ee_pos", (6, 2**31), float),  # the right number of rows, 96 GiB wide
        ("robot_states", (MAX_STEPS + 1, 8), float),  # more steps than any demo: and not one per action
    ],
)
def test_declared_sizes_are_checked_before_reading_for_every_key(demos, key, shape, dtype) -> None:
    path = demos / "d.hdf5"
    file_with_demo(path)
    with h5py.File(path, "a") as f:
        del f[f"data/demo_0/{key}"]
        f.create_dataset(f"data/demo_0/{key}", shape=shape, dtype=dtype, chunks=(1,) * len(shape))
    with pytest.raises(LiberoFormatError, match=key.split("/")[-1]):
        read_demos(path, images=True)
    if key == "obs/agentview_rgb":  # frames read one at a time: one frame is already too big
        with pytest.raises(LiberoFormatError, match="expected frames"):
            read_frames(path, "demo_0", "agentview_rgb", [0])


def test_no_reader_opens_demo_files_with_h5py_directly() -> None:
    """Every reader of demo files goes through open_demo_file: h5py.File is called only to write, or by it."""
    import re

    from conftest import CODE_FOLDERS, REPO

    root = REPO
    opens = []
    for src in [*(p for folder in CODE_FOLDERS for p in folder.glob("**/*.py")), *root.glob("bench/**/*.py")]:
        for n, line in enumerate(src.read_text().splitlines(), 1):
            for call in re.findall(r"h5py\.File\(([^)]*)\)", line):
                if not re.search(r"""["'](w|a|x|w-|r\+)["']""", call):  # a write is the writer's business
                    opens.append(f"{src.relative_to(root)}:{n}: {line.strip()}")
    allowed = ["src/libero_workcell/libero_format.py"]  # open_demo_file itself
    assert [o for o in opens if not o.startswith(tuple(allowed))] == []
    assert len([o for o in opens if o.startswith(allowed[0])]) == 2  # the file, and a linked file, in one place


def test_the_export_the_batch_conversion_and_the_recorder_refuse_it_too(demos, secret, tmp_path, caplog) -> None:
    from recorder.export_lerobot import ExportError, _episodes
    from recorder.session_file import RecorderError, SessionFile, saved_demo_attrs
    from sim_bridge.convert_batch import plan_jobs

    path = demos / "d.hdf5"
    file_with_demo(path, images=False)
    with h5py.File(path, "a") as f:
        f["data/demo_0/obs"].create_dataset("agentview_rgb", shape=(6, 8, 8, 3), dtype=np.uint8,
                                            external=[(str(secret), 0, 6 * 8 * 8 * 3)])  # fmt: skip
    with pytest.raises(ExportError, match="external files"):
        next(_episodes(path, "libero", True, {}, tqdm(disable=True)))
    with pytest.raises(LiberoFormatError, match="external files"):
        list(plan_jobs([path], tmp_path / "out"))
    (demos / "junk.hdf5").write_bytes(b"not hdf5")
    with pytest.raises(LiberoFormatError, match=r"junk\.hdf5: not an HDF5 file"):
        list(plan_jobs([demos / "junk.hdf5"], tmp_path / "out"))
    session = demos / "s.hdf5"  # a session index whose demo links out of its folder
    with h5py.File(session, "w") as f:
        data = f.create_group("data")
        data["demo_0"] = h5py.ExternalLink(str(path.parent.parent / "private" / "x.hdf5"), "/data/demo_0")
        data.attrs.update(problem_info="{}", env_args="{}", num_demos=1, total=6)
    (demos / "s_episodes").mkdir()
    with pytest.raises(RecorderError, match="outside the file's folder"):
        SessionFile(session, {}, {}, min_free_bytes=0)
    path.rename(demos / "s_episodes" / "demo_0.hdf5")  # an episode file of the session, its data elsewhere
    with caplog.at_level("WARNING", logger="recorder.session_file"):  # the plan counts it not, and says why
        assert saved_demo_attrs(session) == []
    assert "demo_0 is unreadable, not counted" in caplog.text and "external files" in caplog.text


# ------------------------------------------------------------------ what a reader loads in total (issue 35, item 13)
CAP = MAX_LOAD_BYTES + 1024**3  # the address space a reader within its budget needs, the interpreter included


def demos_past_memory(path, demos: int = 12, dtype=float, good: Demo | None = None) -> None:
    """``demos`` demos of MAX_STEPS steps, every dataset within every per-dataset bound, together far more than a
    machine holds, in a file of some 60 KiB (declared, never written: HDF5 reads the fill value for a chunk never
    stored); ``good``: a real demo beside them."""
    t = MAX_STEPS
    wide = MAX_ARRAY_BYTES // (np.dtype(dtype).itemsize * t)
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        for i in range(demos):
            g = data.create_group(f"demo_{i}")
            for key, width in (("actions", 7), ("robot_states", wide), ("obs/ee_pos", 3), ("obs/ee_ori", 3),
                               ("obs/gripper_states", 2), ("obs/joint_states", wide),
                               ("preference/satisfaction", wide)):  # fmt: skip
                g.create_dataset(key, shape=(t, width), dtype=dtype, chunks=(4096, width))
        if good is not None:
            write_demo(data, good)
        data.attrs.update(problem_info="{}", env_args="{}")


# every reader on the crafted files, in a child under CAP: what each did, or its MemoryError
READERS = """
import json
from pathlib import Path

from libero_workcell.libero_format import LiberoFormatError, read_demo, read_demos, read_frames
from preferences.__main__ import main as preferences
from recorder.export_lerobot import ExportError, _episodes
from sim_bridge.convert_batch import SourceCache
from sim_bridge.convert_job import Job
from sim_cell.replay import load_plan

big, wide, accepted, frames, out = {paths!r}


class Bar:
    def update(self):
        pass


def outcome(read):
    try:
        return f"read {{read()}}"
    except (LiberoFormatError, ExportError) as exc:
        return f"refused: {{exc}}"
    except MemoryError as exc:
        return f"MemoryError: {{exc}}"


print(json.dumps({{
    "read_demos": outcome(lambda: len(read_demos(big).demos)),
    "float32 demo": outcome(lambda: read_demo(wide, "demo_0").num_samples),
    "replay plan": outcome(lambda: load_plan(big, "demo_99").steps),
    "conversion source": outcome(lambda: SourceCache().demo(Job(Path(big), "demo_99", Path(out))).num_samples),
    "export": outcome(lambda: next(_episodes(Path(accepted), "libero", True, {{}}, Bar()))),
    "frames": outcome(lambda: read_frames(frames, "demo_0", "agentview_rgb", [0, 1] * 200).shape),
    "preferences": outcome(lambda: preferences([big, "--out", out])),
}}))
"""


def test_demos_each_within_bounds_that_add_up_past_memory_are_refused_not_a_memory_error(tmp_path) -> None:
    """12 demos, each within the per-dataset bounds, asked read_demos for 10 GiB (a 60 KiB file; MemoryError
    under a 3 GiB cap); the export read a declared 64 GiB ``action_accepted`` whole before any check. Under a cap
    a reader within its budget fits in, every reader ends with its answer: the whole file is refused before
    anything is read, a demo whose float32 datasets are 0.8 GiB as stored and 1.6 GiB as read too; replay and
    conversion read the one demo they need; the preference report refuses the file it would keep whole; the
    export refuses the declared ``action_accepted``; read_frames refuses 400 frames of 3 MiB."""
    from dataclasses import replace

    from source_demos import source_demo

    big, wide, accepted = tmp_path / "big.hdf5", tmp_path / "wide.hdf5", tmp_path / "accepted.hdf5"
    demos_past_memory(big, good=replace(source_demo(), name="demo_99"))
    demos_past_memory(wide, demos=1, dtype=np.float32)
    file_with_demo(accepted, t=8)
    with h5py.File(accepted, "a") as f:  # one row per step, 64 GiB declared, nothing stored
        f["data/demo_0"].create_dataset("action_accepted", shape=(8, 2**30), dtype=np.int64, chunks=(1, 4096))
    assert max(p.stat().st_size for p in (big, wide, accepted)) < 128 * 1024
    frames = tmp_path / "frames.hdf5"
    file_with_demo(frames, images=False, t=6)
    with h5py.File(frames, "a") as f:  # 3 MiB frames, declared: 400 of them asked for are 1.2 GiB
        f["data/demo_0/obs"].create_dataset("agentview_rgb", shape=(6, 1024, 1024, 3), dtype=np.uint8,
                                            chunks=(1, 64, 64, 3))  # fmt: skip
    paths = (str(big), str(wide), str(accepted), str(frames), str(tmp_path / "out"))
    child = run_capped(READERS.format(paths=paths), CAP)
    assert child.returncode == 0, child.stderr[-2000:]
    got = json.loads(child.stdout.splitlines()[-1])
    assert not [k for k, v in got.items() if "MemoryError" in v], got
    assert re.fullmatch(r"refused: .*big\.hdf5: 13 demos would load 10437 MiB \(0 bytes loaded already\), over "
                        r"the 1024 MiB a reader loads \(MAX_LOAD_BYTES\).*", got["read_demos"]), got  # fmt: skip
    assert re.fullmatch(r"refused: .*wide\.hdf5: data/demo_0 would load 1648 MiB .*", got["float32 demo"]), got
    assert got["replay plan"] == got["conversion source"] == f"read {source_demo().num_samples}", got
    assert re.fullmatch(r"refused: .*'action_accepted' declares shape \(8, 1073741824\) int64 \(65536 MiB\), over "
                        r"the bounds for a demo.*", got["export"]), got  # fmt: skip
    assert re.fullmatch(r"refused: .*frames\.hdf5: data/demo_0/obs/agentview_rgb would load 1200 MiB .*",
                        got["frames"]), got
    assert got["preferences"] == "read 2" and "preferences: " in child.stderr and "13 demos would load" in child.stderr


def test_one_budget_bounds_a_whole_preference_report(tmp_path, monkeypatch, capsys) -> None:
    """The report keeps every trajectory it reads: one budget spans its files, and the file that would pass it is
    refused before it is read (the ones before it fit)."""
    from source_demos import source_demo

    from libero_workcell import libero_format
    from preferences.__main__ import main

    paths = [tmp_path / f"{name}.hdf5" for name in ("a", "b", "c")]
    for p in paths:
        make_file(p, [source_demo()])
    with DemoReader(paths[0]) as r:
        demo = r.demo("demo_0")
    one = sum(a.nbytes for a in demo.__dict__.values() if isinstance(a, np.ndarray))  # what a demo holds, as read
    assert demo.num_samples == source_demo().num_samples and one > 0
    limit = 2 * one + one // 2  # two files fit, three do not
    monkeypatch.setattr(libero_format, "MAX_LOAD_BYTES", limit)
    assert main([str(p) for p in paths] + ["--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"preferences: {paths[2]}: data/demo_0 would load {one:,} bytes ({2 * one:,} bytes loaded already), " \
           f"over the {limit:,} bytes a reader loads (MAX_LOAD_BYTES)" in err, err  # fmt: skip
    monkeypatch.setattr(libero_format, "MAX_LOAD_BYTES", 3 * one)
    assert main([str(p) for p in paths] + ["--out", str(tmp_path / "report")]) == 0


# each key's shape in a valid 6-step demo; widths that may grow without breaking it ("n", "k", "N", "H W")
VALID = {"actions": (6, 7), "obs/ee_pos": (6, 3), "obs/ee_ori": (6, 3), "obs/gripper_states": (6, 2),
         "obs/joint_states": (6, 6), "robot_states": (6, 8), "timing/servo_tick": (6,),
         "scene/workpiece_pos": (6, 3, 3), "scene/workpiece_held": (6, 3), "preference/satisfaction": (6, 2),
         "obs/agentview_rgb": (6, 8, 8, 3)}  # fmt: skip
GROWS = {"obs/joint_states": (1,), "robot_states": (1,), "preference/satisfaction": (1,), "obs/agentview_rgb": (1, 2)}
SIZES = [0, 1, 3, 5, 2**10, 2**16, 2**20, 2**40]


@st.composite
def declared_dataset(draw, key: str) -> tuple[tuple[int, ...], str]:
    """A shape and dtype for ``key``: as a valid demo has it, with a width grown (to any size), or anything."""
    shape, kind = list(VALID[key]), draw(st.sampled_from(["valid", "grown", "grown", "grown", "any"]))
    if kind == "grown" and key in GROWS:
        for axis in GROWS[key]:
            shape[axis] = draw(st.sampled_from(SIZES[1:]))
    elif kind == "any":
        shape = draw(st.lists(st.sampled_from([6, *SIZES]), max_size=4))
    dtype = draw(st.sampled_from(["<f8", "<f4", "<f2", "<i8", "|u1", "|b1", "|S4", "<c16"]) if kind == "any" else
                 st.just("|u1" if key == "obs/agentview_rgb" else "<i8" if key == "timing/servo_tick" else "<f4"))
    return tuple(shape), dtype


DECLARED = st.lists(st.sampled_from([*VALID, *GROWS, *GROWS]), unique=True, max_size=3).flatmap(
    lambda keys: st.fixed_dictionaries({k: declared_dataset(k) for k in keys}))


@settings(max_examples=60, deadline=None)
@given(declared=DECLARED)
def test_whatever_a_demo_declares_a_read_holds_at_most_its_budget_or_is_refused(tmp_path_factory, declared) -> None:
    """Any shapes and dtypes, declared and never stored: read_demos returns demos that hold at most the budget it
    was given, or refuses with LiberoFormatError (never MemoryError, never another exception)."""
    path = tmp_path_factory.mktemp("declared") / "d.hdf5"
    file_with_demo(path, images=True, t=6)
    with h5py.File(path, "a") as f:
        g = f["data/demo_0"]
        for key, (shape, dtype) in declared.items():
            if key in g:
                del g[key]
            chunks = tuple(min(d, 64) for d in shape) if shape and all(shape) else None
            g.create_dataset(key, shape=shape, dtype=dtype, chunks=chunks)
    budget = LoadBudget(256 * 1024)
    try:
        demos = read_demos(path, images=True, budget=budget).demos
    except LiberoFormatError as exc:
        event("over the budget" if "MAX_LOAD_BYTES" in str(exc) else "refused otherwise")
        return
    event("read")
    held = sum(a.nbytes for d in demos for a in [*d.__dict__.values(), *d.images.values()] if isinstance(a, np.ndarray))
    assert held <= budget.used <= budget.limit


def _set(key: str, value):
    return lambda f: f["data/demo_0"].attrs.__setitem__(key, value)


def _replace(key: str, **dataset):
    def edit(f: h5py.File) -> None:
        del f[f"data/demo_0/{key}"]
        f["data/demo_0"].create_dataset(key, **dataset)

    return edit


EXPORT_REFUSALS = {
    "an unknown image convention": (lambda f: f["data"].attrs.__setitem__("env_args", json.dumps({"images": "fish"})),
                                    r"unknown image convention 'fish' in env_args; known: \['upright', "),
    "env_args that is not JSON": (lambda f: f["data"].attrs.__setitem__("env_args", "{images"),
                                  "attribute 'env_args' is not JSON"),
    "an SR that is no number": (_set("SR", "high"), "data/demo_0: SR high is not a number"),
    "placed that is no list": (_set("placed", "[tr"), r"data/demo_0: placed \[tr is not a list of outcomes"),
    "a control rate that is none": (_set("control_hz", np.inf), "control_hz inf is not a control rate"),
    "actions outside the contract": (_replace("actions", data=np.full((6, 7), 2.0)), r"'actions' leaves \[-1.0, 1.0\]"),
    "action_accepted of other rows": (_replace("action_accepted", data=np.ones(5, np.int8)), "expected 6 rows"),
    "action_accepted of strings": (_replace("action_accepted", data=np.array([b"yes"] * 6)),
                                   r"action_accepted is \(6,\) \|S3, expected \(6,\) integers"),
    "frames of another size": (lambda f: None, r"'agentview_rgb' frames are \(8, 8, 3\) uint8; the export writes "
                                               r"\(256, 256, 3\) uint8 \(LeRobot's 'image' feature\)"),
}  # fmt: skip


@pytest.mark.parametrize("edit, reason", EXPORT_REFUSALS.values(), ids=EXPORT_REFUSALS.keys())
def test_the_export_refuses_what_it_cannot_export_with_the_reason(demos, edit, reason) -> None:
    """Issue 35, item 13: an unknown image convention (and each of these) ended the export in a traceback."""
    from recorder.export_lerobot import ExportError, _episodes

    path = demos / "d.hdf5"
    file_with_demo(path, t=6)
    with h5py.File(path, "a") as f:
        f["data/demo_0"].create_dataset("action_accepted", data=np.ones(6, np.int8))
        edit(f)
    with pytest.raises(ExportError, match=reason):
        next(_episodes(path, "libero", True, {"skipped": [], "dropped": [], "no_outcome": 0}, tqdm(disable=True)))
