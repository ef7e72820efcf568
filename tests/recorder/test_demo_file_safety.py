"""Untrusted demo files (issue 21, defects 9 and 12): crafted HDF5 files that would make a reader take bytes from
another local file, or allocate what a tiny file declares, are refused with a LiberoFormatError naming what and
where, by every reader; the recorder's own index (links into its ``_episodes`` folder) still reads."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from demo_files import demo, make_file
from tqdm import tqdm

from libero_workcell.libero_format import (
    MAX_STEPS,
    LiberoFormatError,
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
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    opens = []
    for src in [*root.glob("src/**/*.py"), *root.glob("sim_bridge/**/*.py"), *root.glob("bench/**/*.py")]:
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
