"""`workcell replay` and `workcell demo` start graphs too: each claims its domain machine-wide for as long as it runs,
like `workcell bringup` (issue 35, item 2), and refuses a domain another graph holds, naming it."""

from __future__ import annotations

import contextlib
import io

import pytest

from libero_workcell import dds
from workcell import demo, replay_run


@pytest.mark.parametrize("run", [replay_run.run_replay, demo.run_demo], ids=["replay", "demo"])
def test_a_domain_another_graph_holds_is_refused_and_nothing_starts(run, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    started: list[object] = []
    monkeypatch.setattr(replay_run, "replay_graph", lambda *a, **k: started.append(a))
    monkeypatch.setattr(demo, "run_episode_graph", lambda *a, **k: started.append(a))
    with dds.claim_domain() as held:  # a running graph's domain
        out = io.StringIO()
        args = ["demo.hdf5", "--timeout", "1"] if run is replay_run.run_replay else ["--out", str(tmp_path)]
        with contextlib.redirect_stdout(out):
            code = run([*args, "--domain-id", str(held.domain_id)])
    assert code == 2 and f"ROS_DOMAIN_ID {held.domain_id} (--domain-id) is held by" in out.getvalue(), out.getvalue()
    assert not started


@pytest.mark.parametrize("module", [replay_run, demo], ids=["replay", "demo"])
def test_the_run_holds_its_domain_until_it_ends(module, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    seen: list[bool] = []

    def graph(*args, **kwargs):
        env = next(a for a in (*args, *kwargs.values()) if isinstance(a, dict) and "ROS_DOMAIN_ID" in a)
        domain = int(env["ROS_DOMAIN_ID"])
        with pytest.raises(dds.DomainHeldError):  # held while the graph runs
            dds.claim_exact(domain).release()
        seen.append(True)
        raise TimeoutError("stop here")

    if module is replay_run:
        monkeypatch.setattr(replay_run, "replay_graph", graph)
        code = replay_run.run_replay(["demo.hdf5", "--timeout", "1"])
    else:
        monkeypatch.setattr(demo, "run_episode_graph", graph)
        code = demo.run_demo(["--out", str(tmp_path), "--speeds", "0.03", "--seeds", "0", "--no-console"])
    assert code == 1 and seen == [True]
