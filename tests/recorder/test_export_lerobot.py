"""The LeRobot export: demos in, a LeRobot dataset out, read back with LeRobot's own loader.

The images carry an asymmetric glyph, so a missing or doubled flip cannot pass: in the LIBERO policy
convention the upright image is mirrored left to right (HARDWARE.md, "Image conventions").
"""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from libero_workcell.image_convention import ENV_ARGS_TEXT, ROBOSUITE_RAW, UPRIGHT, stored
from libero_workcell.libero_format import Demo, write_demo_file
from recorder.export_lerobot import ExportError, demo_files, export, lerobot_dataset_class, main

pytest.importorskip("lerobot")
TASK = "pick up the red gear blank and place it in the tray"


def upright_glyph(t: int, camera: int) -> np.ndarray:
    """Upright: a bright block top-left, a thin bar along the top edge, a per-step stripe further down."""
    img = np.full((256, 256, 3), 30 + 80 * camera, np.uint8)
    img[10:60, 10:60] = 250  # top-left block
    img[0:4, :] = 120  # top edge
    img[100 + t, :, 1] = 200  # which step this is
    return img


def action_of(demo: int) -> np.ndarray:
    """Each step's action in demo ``demo``: one per demo, within the contract's [-1, 1]."""
    return np.linspace(-0.5, 0.5, 7) * (demo + 1) / 4


def write_demos(path, convention: str, n_demos: int = 2, steps: int = 6, preference: str | None = None,
                outcomes: tuple[dict, ...] = ()):  # fmt: skip
    """``outcomes``: each demo's outcome attributes (SR, placed), in order; the rest record none."""
    demos = []
    extra = {"preference": preference} if preference else {}
    outcomes = (*outcomes, *({},) * (n_demos - len(outcomes)))
    for d in range(n_demos):
        ups = {k: np.stack([upright_glyph(t, c) for t in range(steps)]) for c, k in
               enumerate(("agentview_rgb", "eye_in_hand_rgb"))}  # fmt: skip
        demos.append(Demo(
            f"demo_{d}", np.tile(action_of(d), (steps, 1)),
            np.tile([0.3, 0.0, 0.3 + 0.01 * d], (steps, 1)), np.tile([np.pi, 0, 0], (steps, 1)),
            np.full((steps, 1), 0.25), np.zeros((steps, 6)), np.zeros((steps, 7)),
            images={k: np.stack([stored(im, convention) for im in v]) for k, v in ups.items()},
            attrs={"language_instruction": TASK, "control_hz": 20.0, **extra, **outcomes[d]},
        ))  # fmt: skip
    env_args = {"env_name": "libero_industry_workcell_d2s", "images": ENV_ARGS_TEXT[convention]}
    write_demo_file(path, demos, {"language_instruction": TASK}, env_args)
    return demos


def load(root):
    return lerobot_dataset_class()("local/d2s", root=root)


def as_uint8(chw) -> np.ndarray:
    return np.round(chw.numpy().transpose(1, 2, 0) * 255).astype(np.uint8)


@pytest.mark.parametrize("convention", [ROBOSUITE_RAW, UPRIGHT])
def test_demos_export_in_openpis_layout_and_read_back_with_lerobots_loader(tmp_path, convention) -> None:
    write_demos(tmp_path / "demos.hdf5", convention)
    summary = export([tmp_path], tmp_path / "lerobot")
    assert summary.episodes == 2 and summary.frames == 12
    ds = load(tmp_path / "lerobot")
    assert ds.fps == 20 and ds.meta.total_episodes == 2 and len(ds) == 12
    assert set(ds.features) >= {"image", "wrist_image", "state", "actions"}
    item = ds[7]  # demo_1, step 1
    assert item["task"] == TASK and int(item["episode_index"]) == 1 and int(item["frame_index"]) == 1
    np.testing.assert_allclose(item["state"].numpy(), [0.3, 0.0, 0.31, np.pi, 0, 0, 0.25], atol=1e-6)
    np.testing.assert_allclose(item["actions"].numpy(), action_of(1), atol=1e-6)
    image = as_uint8(item["image"])
    expected = upright_glyph(1, 0)[:, ::-1]  # LIBERO's convention: the upright image mirrored left to right
    np.testing.assert_array_equal(image, expected)
    assert image[30, 230, 0] == 250 and image[30, 30, 0] != 250  # the block now top-right, the edge still on top
    assert image[1, 128, 0] == 120 and image[101, 5, 1] == 200
    np.testing.assert_array_equal(as_uint8(item["wrist_image"]), upright_glyph(1, 1)[:, ::-1])


def test_upright_export_and_the_preference_prompt(tmp_path) -> None:
    write_demos(tmp_path / "demos.hdf5", ROBOSUITE_RAW, n_demos=1, preference="place the gear first")
    export([tmp_path / "demos.hdf5"], tmp_path / "lerobot", images="upright")
    item = load(tmp_path / "lerobot")[0]
    np.testing.assert_array_equal(as_uint8(item["image"]), upright_glyph(0, 0))
    assert item["task"] == f"Task: {TASK}. Preference: place the gear first."


def test_bad_input_is_a_clear_error_and_writes_nothing(tmp_path) -> None:
    with pytest.raises(ExportError, match="no such file"):
        demo_files([tmp_path / "missing"])
    with pytest.raises(ExportError, match=r"no \.hdf5"):
        demo_files([tmp_path])
    write_demos(tmp_path / "demos.hdf5", ROBOSUITE_RAW, n_demos=1)
    (tmp_path / "taken").mkdir()
    with pytest.raises(ExportError, match="exists"):
        export([tmp_path], tmp_path / "taken")
    with pytest.raises(ExportError, match="images must be"):
        export([tmp_path], tmp_path / "new", images="sideways")
    assert not (tmp_path / "new").exists()


def test_only_successful_demos_are_exported_and_steps_the_arm_refused_are_dropped(tmp_path, capsys) -> None:
    """A demo with SR 0 (or not every workpiece placed) is skipped unless --all; one that records no outcome
    (teleop on the cell: the operator saved it) is exported; a step whose action the arm refused (the recorder's
    action_accepted 0) is never exported as an action the arm executed. The command says what it left out."""
    outcomes = ({"SR": 1.0}, {"SR": 0.0}, {"placed": [True, False, True]})
    write_demos(tmp_path / "demos.hdf5", UPRIGHT, n_demos=4, outcomes=outcomes)
    with h5py.File(tmp_path / "demos.hdf5", "r+") as f:  # demo_3 as the recorder stores the arm's reports
        f["data/demo_3"].create_dataset("action_accepted", data=np.array([1, 0, 1, -1, 0, 1], np.int8))
    assert main([str(tmp_path / "demos.hdf5"), "--out", str(tmp_path / "ok"), "--images", "upright"]) == 0
    out, err = capsys.readouterr()
    assert re.search(r"^exporting: 100%.* 4/4 ", err, re.M), err  # every demo done, exported or skipped: stderr
    assert "exporting" not in out
    assert "skipped demos.hdf5:demo_1: not successful (SR 0); --all exports it" in out
    assert "skipped demos.hdf5:demo_2: not successful (placed 2 of 3)" in out
    assert "dropped demos.hdf5:demo_3: 2 of 6 steps dropped: the arm refused their actions" in out
    assert "1 demos record no outcome" in out and "2 episodes, 10 frames" in out
    ds = load(tmp_path / "ok")
    assert ds.meta.total_episodes == 2 and len(ds) == 10
    kept = [t for t in range(6) if t not in (1, 4)]  # demo_3's executed (or unreported) steps, in order
    for k, t in enumerate(kept):
        item = ds[6 + k]
        assert int(item["episode_index"]) == 1 and int(item["frame_index"]) == k
        np.testing.assert_array_equal(as_uint8(item["image"]), upright_glyph(t, 0))  # its own step's frame
        np.testing.assert_allclose(item["actions"].numpy(), action_of(3), atol=1e-6)
    assert main([str(tmp_path), "--out", str(tmp_path / "all"), "--all"]) == 0
    out = capsys.readouterr().out
    assert "skipped" not in out and "4 episodes, 22 frames" in out


def test_an_export_with_nothing_to_export_says_so(tmp_path, capsys) -> None:
    write_demos(tmp_path / "demos.hdf5", UPRIGHT, n_demos=1, outcomes=({"SR": 0.0},))
    assert main([str(tmp_path), "--out", str(tmp_path / "none")]) == 1
    assert "nothing to export" in capsys.readouterr().err and not (tmp_path / "none").exists()


def test_a_file_of_an_unknown_image_convention_is_a_clear_error_not_a_traceback(tmp_path, capsys) -> None:
    """Issue 35, item 13: ``env_args["images"]`` naming no convention the export knows ended it in a ValueError."""
    write_demos(tmp_path / "demos.hdf5", UPRIGHT, n_demos=1)
    with h5py.File(tmp_path / "demos.hdf5", "r+") as f:
        f["data"].attrs["env_args"] = '{"images": "fisheye"}'
    assert main([str(tmp_path / "demos.hdf5"), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(r"^export: .*demos\.hdf5: unknown image convention 'fisheye' in env_args; known: \['upright', "
                     r"'robosuite raw: upright view flipped vertically'\]$", err, re.M), err  # fmt: skip
    assert not (tmp_path / "out").exists()
