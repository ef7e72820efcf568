"""An episode the graph stopped while it was recorded (issue 35, item 5): kept whole beside its session, marked
interrupted with the reason, never listed, counted or exported as a demo unless asked."""

from __future__ import annotations

import pytest
from recorded_steps import ENV, PROBLEM, record

from libero_workcell.libero_format import read_demos
from recorder.collection_plan import plan_report
from recorder.session_file import SessionFile, interrupted_episodes, saved_demo_attrs

REASON = "the recorder was stopped (SIGINT) before the episode was saved or discarded"


def test_an_interrupted_episode_is_kept_whole_beside_the_session_and_never_listed_in_it(tmp_path) -> None:
    """Completed as the saves are, its reason in ``interrupted``, kept as demo_N.hdf5.interrupted, outside the
    index (no count, plan or training tool takes it for a demo); its number is never reused, and a resumed session
    lists it apart."""
    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, ENV)
    record(session, 5).save()
    saved = record(session, 9, {"belt_speed": 0.05}).save(interrupted=REASON)
    kept = session.episode_path("demo_1", interrupted=True)
    assert saved.interrupted == REASON and kept.name == "demo_1.hdf5.interrupted"
    assert interrupted_episodes(path) == [kept]
    assert session.names == ["demo_0"] and session.num_demos == 1 and len(saved_demo_attrs(path)) == 1
    assert [d.name for d in read_demos(path).demos] == ["demo_0"]  # the index does not link it
    d = read_demos(kept, images=True).demos[0]  # whole: LIBERO's layout, every step
    assert d.name == "demo_1" and d.num_samples == 9 and d.images["agentview_rgb"].shape == (9, 256, 256, 3)
    assert d.attrs["interrupted"] == REASON and d.attrs["belt_speed"] == 0.05
    assert session.next_name() == "demo_2"
    resumed = SessionFile(path, PROBLEM, ENV)
    assert resumed.interrupted == ["demo_1.hdf5.interrupted"] and resumed.names == ["demo_0"]
    assert record(resumed, 3).save().name == "demo_2"
    assert [d.name for d in read_demos(path).demos] == ["demo_0", "demo_2"]
    assert "(2 demos in the file; 1 interrupted episode beside it, not counted: demo_1)" in \
        plan_report(str(path), 1, "status")  # fmt: skip


def test_the_export_leaves_interrupted_episodes_out_unless_asked(tmp_path, capsys) -> None:
    pytest.importorskip("lerobot")
    from libero_workcell.image_convention import ENV_ARGS_TEXT, ROBOSUITE_RAW
    from recorder.export_lerobot import main

    path = tmp_path / "d2s.hdf5"
    session = SessionFile(path, PROBLEM, {**ENV, "images": ENV_ARGS_TEXT[ROBOSUITE_RAW]})
    record(session, 4).save()
    record(session, 6).save(interrupted=REASON)
    assert main([str(path), "--out", str(tmp_path / "default")]) == 0
    assert "1 episodes, 4 frames" in capsys.readouterr().out  # the session's demos only
    kept = str(session.episode_path("demo_1", interrupted=True))
    assert main([str(path), kept, "--out", str(tmp_path / "named")]) == 0  # named, it is still not a demo
    out = capsys.readouterr().out
    assert f"skipped demo_1.hdf5.interrupted:demo_1: interrupted ({REASON}); --interrupted exports it" in out, out
    assert "1 episodes, 4 frames" in out
    assert main([str(path), "--out", str(tmp_path / "asked"), "--interrupted"]) == 0  # the session brings it
    assert "2 episodes, 10 frames" in capsys.readouterr().out
