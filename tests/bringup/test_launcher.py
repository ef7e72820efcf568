"""The process launcher's errors."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys

from conftest import FIXTURES, wait_for

from libero_workcell.processes import pid_alive
from workcell.launcher import NodeDiedError, NodeExit


def test_a_node_died_error_survives_pickling_with_its_exits() -> None:
    """An evaluation worker's trial raises it in another process: it must arrive whole, not as a second error."""
    err = NodeDiedError([NodeExit("policy_node", 2, ("ModuleNotFoundError: x",), None)])
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, NodeDiedError) and back.exits == err.exits and str(back) == str(err)


def test_nodes_end_with_their_launcher_even_when_it_is_killed(tmp_path) -> None:
    """``kill -9`` of a bring-up or an evaluation worker: its nodes get SIGTERM (their clean shutdown) instead of
    running on with nobody to stop them."""
    script = ("import sys, time; from types import SimpleNamespace as Spec; from workcell.launcher import launch; "
              "launch([Spec(name='n', module='lingering_node', parameters={})], log_dir=sys.argv[1]); "
              "time.sleep(600)")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), *sys.path]), "LINGERING_NODE_DIR": str(tmp_path)}
    launcher = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "logs")], env=env)
    try:
        assert wait_for(lambda: list(tmp_path.glob("*.started")), timeout=60)
    finally:
        launcher.kill()
        launcher.wait()
    (started,) = tmp_path.glob("*.started")
    pid = int(started.name.split(".")[0])
    assert wait_for(lambda: (tmp_path / f"{pid}.terminated").exists(), timeout=20)
    assert wait_for(lambda: not pid_alive(pid), timeout=20)


def test_an_observer_that_dies_stops_nothing_and_a_needed_node_stops_the_graph(tmp_path, capsys) -> None:
    """Issue 35, item 5: the session log (on a full disk), the console or the Foxglove bridge ending must not stop
    the cell; any other node's end still does (the graph file's ``observer``)."""
    import signal
    import threading

    from workcell.bringup import NodeSpec
    from workcell.cli import _wait_for_a_needed_node
    from workcell.launcher import launch

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), *sys.path]), "LINGERING_NODE_DIR": str(tmp_path)}
    nodes = [NodeSpec("arm", "x", "lingering_node"), NodeSpec("session_log", "x", "lingering_node", observer=True)]
    running = launch(nodes, env=env, log_dir=tmp_path / "logs")
    try:
        assert wait_for(lambda: len(list(tmp_path.glob("*.started"))) == 2, timeout=60)
        pids = running.pids
        got: list = []
        waiter = threading.Thread(target=lambda: got.append(_wait_for_a_needed_node(running, nodes, None)))
        waiter.start()
        os.kill(pids["session_log"], signal.SIGKILL)
        assert wait_for(lambda: "session_log only watches the cell" in capsys.readouterr().err, timeout=30)
        waiter.join(1.0)
        assert waiter.is_alive() and pid_alive(pids["arm"])  # the graph runs on without it
        os.kill(pids["arm"], signal.SIGKILL)
        waiter.join(30)
        assert [e.name for e in got[0]] == ["arm"]  # a node the cell needs: the graph stops (its caller stops it)
    finally:
        running.stop(timeout=5)


def test_a_node_that_had_to_be_killed_says_so_in_its_log_and_a_clean_one_does_not(tmp_path) -> None:
    """A node killed at the stop (or crashed) leaves no words of its own: the launcher's last line in its log says
    how it ended and what it was sent."""
    import signal

    from workcell.bringup import NodeSpec
    from workcell.launcher import launch

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURES), *sys.path]), "LINGERING_NODE_DIR": str(tmp_path),
           "LINGERING_NODE_STUBBORN": "stubborn"}  # fmt: skip
    nodes = [NodeSpec("stubborn", "x", "lingering_node"), NodeSpec("clean", "x", "lingering_node")]
    running = launch(nodes, env=env, log_dir=tmp_path / "logs")
    assert wait_for(lambda: len(list(tmp_path.glob("*.started"))) == 2, timeout=60)
    codes = running.stop(timeout=0.5, term_timeout=0.5)
    assert codes == {"stubborn": -signal.SIGKILL, "clean": 0}, codes
    said = (tmp_path / "logs" / "stubborn.log").read_text().splitlines()
    assert said[-1] == "launcher: stubborn exited with signal SIGKILL after SIGINT, SIGTERM, SIGKILL", said
    assert "launcher:" not in (tmp_path / "logs" / "clean.log").read_text()  # its SIGINT: exit 0


def test_an_exit_reads_as_the_signal_that_ended_it_or_its_code() -> None:
    assert "node n was killed by SIGKILL" in NodeExit("n", -9, ()).describe()
    assert "node n exited with code 2" in NodeExit("n", 2, ()).describe()
    assert "node n exited with code -999" in NodeExit("n", -999, ()).describe()  # no signal's number: the code
