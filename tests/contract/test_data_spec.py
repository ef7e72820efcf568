"""One data layout, one spec: a demo written by each writer of AUBO demonstrations holds exactly the keys,
shapes and dtypes docs/data.md states (and the robot_states layout means what it says)."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import REPO
from scipy.spatial.transform import Rotation

from libero_workcell.libero_format import read_demos, write_demo_file
from libero_workcell.task import TaskSpec

DOC = (REPO / "docs" / "data.md").read_text()


def _spec() -> dict[str, tuple[str, str, str]]:
    """key -> (shape, dtype, writers) from the doc's per-demo table (a cell may name several keys)."""
    table = DOC.split("## Each demo", 1)[1].split("\n\n", 2)[2]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or not cells[0].startswith("`"):
            continue
        for key in re.findall(r"`([\w/]+)`", cells[0]):
            out[key] = (cells[1], cells[2], cells[4])
    return out


SPEC = _spec()


def _shape_matches(documented: str, shape: tuple[int, ...], t: int) -> bool:
    dims = [d.strip() for d in documented.strip("()").split(",") if d.strip()]
    if len(dims) != len(shape):
        return False
    return all(d in ("N", "k") or (d == "T" and s == t) or (d.isdigit() and int(d) == s) for d, s in
               zip(dims, shape, strict=True))  # fmt: skip


def _check(path: Path, writer: str) -> set[str]:
    """Every dataset of every demo is in the spec with its shape and dtype; the keys every writer writes are
    there; robot_states is (gripper, TCP position, TCP quaternion x y z w) of the same demo's obs."""
    seen: set[str] = set()
    with h5py.File(path, "r") as f:
        for name, demo in f["data"].items():
            t = int(demo.attrs["num_samples"])
            keys: list[str] = []
            demo.visit(lambda k, g=demo, ks=keys: ks.append(k) if isinstance(g[k], h5py.Dataset) else None)
            for key in keys:
                assert key in SPEC, f"{writer}: {name}/{key} is not in docs/data.md"
                shape, dtype, _ = SPEC[key]
                ds = demo[key]
                assert _shape_matches(shape, ds.shape, t), f"{writer}: {name}/{key} {ds.shape} is not {shape}"
                assert ds.dtype == np.dtype(dtype), f"{writer}: {name}/{key} {ds.dtype} is not {dtype}"
            everyone = {k for k, (_, _, w) in SPEC.items() if w == "all"}
            assert everyone <= set(keys), f"{writer}: {name} lacks {sorted(everyone - set(keys))}"
            seen |= set(keys)
    for d in read_demos(path).demos:
        rs = d.robot_states
        np.testing.assert_allclose(rs[:, 0], d.gripper_states[:, 0], err_msg=writer)
        np.testing.assert_allclose(rs[:, 1:4], d.ee_pos, err_msg=writer)
        np.testing.assert_allclose(Rotation.from_quat(rs[:, 4:8]).as_matrix(),
                                   Rotation.from_rotvec(d.ee_ori).as_matrix(), atol=1e-9, err_msg=writer)  # fmt: skip
    return seen


def test_the_graph_recorder_writes_the_spec(tmp_path) -> None:
    from recorded_steps import ENV, PROBLEM, record

    from recorder.session_file import SessionFile

    session = SessionFile(tmp_path / "d2s.hdf5", PROBLEM, ENV)
    record(session, 6).save()
    seen = _check(session.episode_path("demo_0"), "recorder")
    assert {"timing/obs_stamp", "timing/servo_tick", "obs/agentview_rgb", "applied_actions", "action_accepted"} <= seen


def test_the_simulated_expert_demos_write_the_spec(tmp_path) -> None:
    from sim_bridge.aubo_demos import write_aubo_demos

    path = tmp_path / "aubo.hdf5"
    write_aubo_demos(path, [TaskSpec.from_seed(3)], max_steps=4, render=True)
    seen = _check(path, "aubo_demos")
    assert {"scene/workpiece_pos", "obs/eye_in_hand_rgb"} <= seen


def test_the_conversion_and_the_response_reference_write_the_spec(tmp_path) -> None:
    from source_demos import SPEC as TASK
    from source_demos import source_demo

    from sim_bridge.convert import convert_kinematic
    from sim_bridge.response_reference import load_reference, reference_demo

    converted = convert_kinematic(source_demo()).demo
    write_demo_file(tmp_path / "converted.hdf5", [converted], {"language_instruction": "x"}, {"robot": "AUBO-i5H"})
    _check(tmp_path / "converted.hdf5", "convert")
    ref, _ = reference_demo(load_reference()[:2], TASK.to_json())
    write_demo_file(tmp_path / "reference.hdf5", [ref], {"language_instruction": "x"}, {"robot": "AUBO-i5H"})
    _check(tmp_path / "reference.hdf5", "response_reference")


@pytest.mark.parametrize("key", ["actions", "robot_states", "obs/ee_pos", "timing/obs_stamp"])
def test_the_spec_states_shape_dtype_and_unit(key) -> None:
    shape, dtype, _ = SPEC[key]
    assert shape.startswith("(T") and np.dtype(dtype)
