"""What a demo says of itself (libero_workcell.demo_reading), read one way by every reader: its task, its outcome,
its robot and its TCP path; what is there but malformed is a LiberoFormatError naming the demo."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from libero_workcell.demo_reading import (
    PANDA_HAND_TO_TCP,
    TcpPath,
    outcome_of,
    placed_of,
    robot_of,
    task_of,
    tcp_path,
)
from libero_workcell.libero_format import Demo, LiberoFormatError
from libero_workcell.task import TaskSpec

SPEC = TaskSpec.from_seed(3)


def demo(attrs: dict, n: int = 4) -> Demo:
    rot = Rotation.from_euler("xyz", np.linspace(0.0, 0.3, n)[:, None] * [1.0, 0.5, 0.2]).as_rotvec()
    actions = np.zeros((n, 7))
    actions[:, 6] = [-1.0, -1.0, 1.0, 1.0][:n]
    return Demo("demo_3", actions, np.linspace([0.3, 0.0, 0.3], [0.4, 0.1, 0.2], n), rot, np.zeros((n, 2)),
                np.zeros((n, 6)), np.zeros((n, 9)), attrs=attrs)  # fmt: skip


def test_the_task_is_read_from_json_text_bytes_or_a_mapping_and_its_absence_or_damage_named() -> None:
    text = SPEC.to_json()
    for raw in (text, text.encode(), json.loads(text)):
        assert task_of({"task_spec": raw}) == SPEC
    with pytest.raises(LiberoFormatError, match="demo_3: no 'task_spec' attribute"):
        task_of({}, "demo_3")
    with pytest.raises(LiberoFormatError, match="demo_3: its task_spec is not a workcell task"):
        task_of({"task_spec": "{not json"}, "demo_3")
    with pytest.raises(LiberoFormatError, match="not a workcell task: unknown TaskSpec fields"):
        task_of({"task_spec": json.dumps({"speed_of_light": 1})})


def test_the_outcome_is_sr_else_every_workpiece_placed_and_a_malformed_one_is_named() -> None:
    assert placed_of({}) is None and placed_of({"placed": "[true, false]"}) == [True, False]
    assert placed_of({"placed": np.array([1, 1, 0])}) == [True, True, False]
    assert outcome_of({"SR": 1.0, "placed": "[false]"}) == (True, "SR 1")  # SR first
    assert outcome_of({"SR": "0.5"}) == (False, "SR 0.5")
    assert outcome_of({"placed": "[true, true]"}) == (True, "placed 2 of 2")
    assert outcome_of({"placed": "[true, false, true]"}) == (False, "placed 2 of 3")
    assert outcome_of({}) == (None, "no recorded outcome")
    with pytest.raises(LiberoFormatError, match=r"^f.hdf5: data/demo_0: SR high is not a number$"):
        outcome_of({"SR": "high"}, "f.hdf5: data/demo_0")
    with pytest.raises(LiberoFormatError, match=r"demo_3: placed \[tr is not a list of outcomes"):
        outcome_of({"placed": "[tr"}, "demo_3")
    with pytest.raises(LiberoFormatError, match="placed 7 is not a list of outcomes"):
        placed_of({"placed": 7})


def test_the_robot_is_the_demos_own_else_its_files_else_liberos_panda() -> None:
    assert robot_of({"robot": "AUBO-i5H"}, {"robot": "Panda"}) == "AUBO-i5H"
    assert robot_of({}, {"robot": "AUBO-i5H"}) == "AUBO-i5H"
    assert robot_of({}) == robot_of({}, {}) == "Panda"


def test_a_panda_demos_tcp_is_its_hand_turned_and_an_aubo_demos_is_as_recorded() -> None:
    aubo = demo({"robot": "AUBO-i5H"})
    path = tcp_path(aubo)
    np.testing.assert_allclose(path.R, Rotation.from_rotvec(aubo.ee_ori).as_matrix())
    np.testing.assert_array_equal(path.pos, aubo.ee_pos)
    np.testing.assert_array_equal(path.gripper, [-1.0, -1.0, 1.0, 1.0])
    panda = tcp_path(demo({}))
    np.testing.assert_allclose(panda.R, path.R @ PANDA_HAND_TO_TCP)
    np.testing.assert_allclose(tcp_path(demo({}), robot="AUBO-i5H").R, path.R)  # the file's robot, given
    with pytest.raises(ValueError, match="non-finite"):
        TcpPath(np.full((3, 3), np.nan), np.tile(np.eye(3), (3, 1, 1)), np.zeros(3))
    with pytest.raises(ValueError, match=">= 2 steps"):
        tcp_path(demo({"robot": "AUBO-i5H"}, n=1))
