"""LIBERO's HDF5 layout: a written demo reads back; a malformed file is a clear error and stays untouched."""

from __future__ import annotations

import hashlib
import json

import h5py
import numpy as np
import pytest
from demo_files import T, demo, make_file

from libero_workcell.demo_reading import path_from_demo
from libero_workcell.libero_format import LiberoFormatError, read_demo, read_demos


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_written_file_reads_back_in_demo_order(tmp_path) -> None:
    path = tmp_path / "demos.hdf5"
    make_file(path)
    f = read_demos(path, images=True)
    assert [d.name for d in f.demos] == ["demo_0", "demo_1", "demo_10"]  # numeric order, not text order
    assert f.problem_info == {"language_instruction": "pick up the gear"} and f.env_args == {"env_name": "workcell"}
    d0, ref = f.demos[0], demo("demo_0")
    np.testing.assert_array_equal(d0.actions, ref.actions)
    np.testing.assert_array_equal(d0.ee_ori, ref.ee_ori)
    np.testing.assert_array_equal(d0.images["agentview_rgb"], ref.images["agentview_rgb"])
    assert d0.attrs["num_samples"] == T and json.loads(d0.attrs["slot_permutation"]) == [2, 0, 1]
    with h5py.File(path, "r") as h:
        assert h["data"].attrs["num_demos"] == 3 and h["data"].attrs["total"] == T + 9 + 5
        np.testing.assert_array_equal(h["data/demo_0/obs/ee_states"][()], np.c_[ref.ee_pos, ref.ee_ori])
        assert h["data/demo_0/dones"][-1] == 1 and h["data/demo_0/dones"][:-1].sum() == 0
    path_ = path_from_demo(d0)
    np.testing.assert_array_equal(path_.gripper, ref.actions[:, 6])


def replace(f: h5py.File, key: str, data) -> None:
    del f[key]
    f.create_dataset(key, data=data)


def _corrupt(path, edit) -> None:
    with h5py.File(path, "a") as f:
        edit(f)


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda f: f["data/demo_1/obs"].__delitem__("ee_pos"), r"data/demo_1/obs: missing 'ee_pos'"),
        (lambda f: f["data/demo_1"].__delitem__("actions"), r"data/demo_1: missing 'actions'"),
        (lambda f: f["data/demo_1"].__delitem__("obs"), r"data/demo_1: missing 'obs'"),
        (lambda f: f["data/demo_1"].__delitem__("robot_states"), r"data/demo_1: missing 'robot_states'"),
        (
            lambda f: replace(f, "data/demo_1/obs/ee_ori", np.zeros((9, 4))),
            r"'ee_ori' has shape \(9, 4\), expected \(T, 3\)",
        ),
        (
            lambda f: replace(f, "data/demo_1/obs/ee_pos", np.zeros((8, 3))),
            r"'ee_pos' has shape \(8, 3\), expected 9 rows",
        ),
        (
            lambda f: replace(f, "data/demo_1/obs/gripper_states", np.zeros((9, 3))),
            r"'gripper_states' has shape \(9, 3\), expected \(T, g\) with g in \[1, 2\]",
        ),
        (
            lambda f: f["data/demo_1/obs/ee_pos"].__setitem__((4, 1), np.nan),
            r"'ee_pos' holds a non-finite value at step 4",
        ),
        (lambda f: f["data/demo_1/actions"].__setitem__((2, 0), 1.5), r"'actions' leaves \[-1.0, 1.0\] at step 2"),
        (
            lambda f: f["data/demo_1/actions"].__setitem__((3, 6), np.inf),
            r"'actions' holds a non-finite value at step 3",
        ),
        (
            lambda f: f["data/demo_1"].attrs.__setitem__("num_samples", 99),
            r"num_samples is 99 but 'actions' has 9 rows",
        ),
        (
            lambda f: f["data"].attrs.__setitem__("problem_info", "{not json"),
            r"attribute 'problem_info' is not JSON",
        ),
        (  # read as numbers, they would be a ValueError from numpy (issue 35, item 13)
            lambda f: replace(f, "data/demo_1/robot_states", np.array([[b"x"] * 9] * 9)),
            r"data/demo_1: 'robot_states' is \|S1, expected numbers",
        ),
        (  # an attribute from elsewhere may be an array: compared with the step count, it is no count
            lambda f: f["data/demo_1"].attrs.__setitem__("num_samples", [9, 9]),
            r"num_samples is \[9 9\] but 'actions' has 9 rows",
        ),
        (  # a dataset where a group belongs ('obs' in a dataset would iterate its rows)
            lambda f: (f["data/demo_1"].__delitem__("obs"), f["data/demo_1"].create_dataset("obs", data=np.zeros(9))),
            r"data/demo_1: missing 'obs'",
        ),
    ],
)
def test_a_malformed_file_is_a_clear_error_and_is_not_modified(tmp_path, edit, message) -> None:
    path = tmp_path / "demos.hdf5"
    make_file(path)
    _corrupt(path, edit)
    before = digest(path)
    with pytest.raises(LiberoFormatError, match=message) as info:
        read_demos(path)
    assert str(path) in str(info.value)
    assert digest(path) == before


def test_one_demo_reads_alone_as_it_reads_among_the_others(tmp_path) -> None:
    path = tmp_path / "demos.hdf5"
    make_file(path)
    one, among = read_demo(path, "demo_10", images=True), read_demos(path, images=True).demos[2]
    assert one.name == among.name == "demo_10" and one.attrs == among.attrs
    for key in ("actions", "ee_pos", "ee_ori", "gripper_states", "joint_states", "robot_states"):
        np.testing.assert_array_equal(getattr(one, key), getattr(among, key))
    np.testing.assert_array_equal(one.images["agentview_rgb"], among.images["agentview_rgb"])
    _corrupt(path, lambda f: f["data/demo_1"].__delitem__("actions"))  # another demo's fault is not this one's
    assert read_demo(path, "demo_0").num_samples == T
    with pytest.raises(LiberoFormatError, match=r"data/demo_1: missing 'actions'") as info:
        read_demo(path, "demo_1")
    assert str(path) in str(info.value)
    with pytest.raises(LiberoFormatError, match="'data' holds no demo 'demo_2'"):
        read_demo(path, "demo_2")


def test_files_that_are_not_libero_layout(tmp_path) -> None:
    with pytest.raises(LiberoFormatError, match="no such file"):
        read_demos(tmp_path / "absent.hdf5")
    (tmp_path / "text.hdf5").write_text("hello")
    with pytest.raises(LiberoFormatError, match="not an HDF5 file"):
        read_demos(tmp_path / "text.hdf5")
    with h5py.File(tmp_path / "other.hdf5", "w") as f:
        f.create_dataset("x", data=[1])
    with pytest.raises(LiberoFormatError, match="missing the 'data' group"):
        read_demos(tmp_path / "other.hdf5")
    with h5py.File(tmp_path / "empty.hdf5", "w") as f:
        f.create_group("data")
    with pytest.raises(LiberoFormatError, match="holds no demos"):
        read_demos(tmp_path / "empty.hdf5")
    make_file(tmp_path / "short.hdf5", [demo("demo_0", t=1, images=False)])
    with pytest.raises(LiberoFormatError, match="1 steps; a demonstration needs at least 2"):
        read_demos(tmp_path / "short.hdf5")


def test_bad_images_are_refused_when_images_are_read(tmp_path) -> None:
    path = tmp_path / "demos.hdf5"
    make_file(path)
    _corrupt(path, lambda f: replace(f, "data/demo_0/obs/agentview_rgb", np.zeros((T, 8, 8), np.uint8)))
    read_demos(path)  # not reading images: fine
    with pytest.raises(LiberoFormatError, match=r"'agentview_rgb' has shape \(12, 8, 8\) uint8, expected"):
        read_demos(path, images=True)
