"""Put your own demos under test: sim-in-the-loop replay of every demo in your files.

    .venv/bin/python -m pytest tests/sim/test_lab_demos.py --replay-demos /data/demos [--replay-demos more.hdf5]
        [--replay-mode open_loop|closed_loop] [--replay-graph] [--replay-max-pos-rms 0.01] [--replay-max-rot-rms 2]

(or ``WORKCELL_REPLAY_DEMOS=/data/demos``). Each demo of each LIBERO-layout file (a folder: every
``*.hdf5`` in it) is replayed on the simulated workcell, in one process on sim time by default or
through the whole ROS graph with ``--replay-graph``, in each mode; a test passes when the replayed
TCP tracks the recorded one within the limits and the replay places the same workpieces as the
recording did (when the demo records its outcome). Demos need the ``task_spec`` attribute (this
project's recorders and conversion write it). Reports of graph replays: ``test-output/<test>/``.
Without demos given, the tests are skipped.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from conftest import output_dir_for

from libero_workcell.libero_format import read_demos
from sim_cell.replay import REPLAY_MODES, load_plan, replay_in_process


def _demo_files(config: pytest.Config) -> list[Path]:
    given = list(config.getoption("--replay-demos")) or [
        p for p in os.environ.get("WORKCELL_REPLAY_DEMOS", "").split(":") if p
    ]
    files: list[Path] = []
    for item in map(Path, given):
        if item.is_dir():
            files += sorted(item.glob("*.hdf5"))
        else:
            files.append(item)  # a missing file fails its test with the reason, it is not skipped
    return files


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "lab_demo" not in metafunc.fixturenames:
        return
    cases, ids = [], []
    modes = metafunc.config.getoption("--replay-mode") or list(REPLAY_MODES)
    for path in _demo_files(metafunc.config):
        try:
            names = [d.name for d in read_demos(path).demos]
        except ValueError as exc:  # unreadable: one failing case that says why
            names, path = [f"unreadable: {exc}"], path
        for name in names:
            for mode in modes:
                cases.append((path, name, mode))
                ids.append(f"{path.name}:{name}:{mode}")
    if not cases:
        metafunc.parametrize("lab_demo", [pytest.param(None, marks=pytest.mark.skip(
            reason="no demos given: --replay-demos PATH or WORKCELL_REPLAY_DEMOS"))])  # fmt: skip
    else:
        metafunc.parametrize("lab_demo", cases, ids=ids)


def test_lab_demo_replays(lab_demo, request, ros_env) -> None:
    path, name, mode = lab_demo
    if name.startswith("unreadable: "):
        pytest.fail(f"{path}: {name}")
    config = request.config
    max_pos, max_rot = config.getoption("--replay-max-pos-rms"), config.getoption("--replay-max-rot-rms")
    if config.getoption("--replay-graph"):
        from workcell.replay_run import describe, replay_graph

        steps = next(d.num_samples for d in read_demos(path).demos if d.name == name)
        report = replay_graph(path, name, mode, output_dir_for(request), ros_env, timeout=steps / 20 + 120)
        assert "error" not in report, report["error"]
        print(describe(report))
        tracking, recorded, replayed = (report["tracking"], report["outcome"]["recorded_placed"],
                                        report["outcome"]["replayed_placed"])  # fmt: skip
    else:
        plan = load_plan(path, name)
        result = replay_in_process(plan, mode)
        tracking, recorded, replayed = result.tracking, plan.placed, result.placed
    print(f"{path}:{name} {mode}: {tracking}, placed recorded {recorded} replayed {replayed}")
    assert tracking["pos_rms_m"] <= max_pos, f"TCP position RMS {tracking['pos_rms_m']:.4f} m > {max_pos} m"
    assert tracking["rot_rms_deg"] <= max_rot, f"TCP rotation RMS {tracking['rot_rms_deg']:.2f} deg > {max_rot} deg"
    if recorded is not None:
        assert replayed == recorded, f"the replay placed {replayed}, the recording {recorded}"
