"""The graph definition, its overrides, the launch file and the process launcher.

The launch file runs here against small fake ``launch``/``launch_ros``
modules (the real ones have no wheels) that record what it constructs; it
must yield exactly the nodes :mod:`workcell.bringup` resolves.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import launch_fakes
import pytest
import yaml
from conftest import REPO, wait_for

from libero_workcell import dds
from libero_workcell.processes import NODE_UP
from workcell import bringup, cli, launch_presets, run_registry, workcell_launch
from workcell.bringup import Graph, GraphError, NodeSpec, launch_text, node_parameters
from workcell.launcher import NodeDiedError, NodesUp, launch, ros_params_yaml

SIM_NODES = ["sim_world", "aubo_bridge", "conveyor_driver", "external_camera", "wrist_camera"]
LAUNCH_FILE = REPO / "launch" / "sim_workcell.launch.py"


@pytest.fixture(autouse=True)
def own_domain_claims(tmp_path, monkeypatch):
    """Domains claimed in this process (a launch description, a dry run) are claimed in a folder of the test's own,
    and what a launch holds (its claim, its run record) ends with the test as it ends with a launch process."""
    monkeypatch.setattr(dds, "claims_dir", lambda: tmp_path / "domain_claims")
    yield
    _launch_ends()


def _launch_ends() -> None:
    """What a launch described in this process held ends, as it would when that launch process ends."""
    for claim in workcell_launch._CLAIMS.values():
        claim.release()
    workcell_launch._CLAIMS.clear()
    run_registry.withdraw()


# --------------------------------------------------------------------------
# The graph file
# --------------------------------------------------------------------------
def test_graph_loads_from_repo_config():
    graph = Graph.load()
    assert graph.path == REPO / "config" / "workcell.yaml"
    assert graph.node_names() == [*SIM_NODES, "demo_replay", "scripted_expert", "teleop_pico", "recorder",
                                  "policy_server", "policy_node", "rollout_recorder", "session_log",
                                  "console", "foxglove_bridge"]
    defaults = {name: a.default for name, a in graph.arguments.items()}
    assert defaults["replay"] is False  # the replay node runs only when asked for
    assert defaults["use_sim"] is True
    assert defaults["sim_link"] == "workcell"
    assert defaults["expert"] is False
    assert defaults["loopback_dds"] is True
    assert graph.inject == ("use_sim", "sim_link", "lockstep") and graph.sim_time_from == "use_sim"
    assert defaults["lockstep"] is True and defaults["real_time_factor"] == 1.0 and defaults["policy_latency"] == "0"


def test_the_world_waits_for_the_running_nodes_that_close_the_loop_and_sim_time_follows_use_sim():
    graph = Graph.load()
    teleop = {s.name: s for s in graph.resolve(["teleop:=true", "teleop_source:=scripted"])}
    assert teleop["sim_world"].parameters["participants"] == \
        "aubo_bridge,external_camera,wrist_camera,teleop_pico,recorder"  # not the conveyor: nothing waits on it
    deploy = {s.name: s for s in graph.resolve(["policy:=true", "policy_local_server:=true", "record_rollouts:=true"])}
    assert deploy["sim_world"].parameters["participants"] == \
        "aubo_bridge,external_camera,wrist_camera,policy_node,rollout_recorder"  # not the server: the policy waits
    assert deploy["rollout_recorder"].parameters["follow_episodes"] is True
    logged = {s.name: s for s in graph.resolve(["teleop:=true", "teleop_source:=scripted", "record_mcap:=/tmp/x.mcap"])}
    assert logged["sim_world"].parameters["participants"].endswith(",session_log")  # the first tick waits for the log
    assert logged["session_log"].parameters["participants"] == logged["sim_world"].parameters["participants"]
    assert deploy["policy_node"].parameters["policy.latency"] == "0"
    real = Graph.load().resolve(["use_sim:=false", "policy:=true"])
    assert all(s.parameters["use_sim_time"] is False for s in real)  # the physical cell keeps the wall clock
    assert "policy.latency" not in {s.name: s for s in real}["policy_node"].parameters


def test_default_nodes_and_parameters():
    specs = {s.name: s for s in Graph.load().resolve()}
    assert list(specs) == SIM_NODES
    injected = {"use_sim": True, "sim_link": "workcell", "lockstep": True, "use_sim_time": True}
    for spec in specs.values():
        assert {k: spec.parameters[k] for k in injected} == injected  # the sim profile: sim time, in lockstep
    assert specs["sim_world"].module == "sim_cell.world_node"
    assert specs["sim_world"].parameters == {
        **injected, "real_time_factor": 1.0, "participants": "aubo_bridge,external_camera,wrist_camera",
        "start_timeout": 60.0, "stall_timeout": 30.0,
        "control_hz": 20.0, "servo_hz": 100.0, "camera_hz": 20.0, "render": True,
        "seed": 0, "belt_speed": 0.03, "arrival_interval": 12.0, "first_arrival": 2.0, "t_complete": 15.0,
        "combination": -1,
        "slot_permutation": [-1], "preference": "", "demo_path": "", "demo": "", "pause_at_done": True,
    }
    assert specs["aubo_bridge"].parameters == {
        **injected, "control_hz": 20.0, "servo_hz": 100.0,
        "watchdog_timeout": 0.075, "action_response": "libero", "auto_enable": True, "active_source": "expert",
        "driver_host": "node",
    }
    assert specs["conveyor_driver"].parameters == {**injected, "belt_speed": 0.03, "autostart": True}
    for cam in ("external", "wrist"):
        spec = specs[f"{cam}_camera"]
        assert (spec.executable, spec.module) == ("camera_driver", "camera_driver.node")
        assert spec.parameters == {**injected, "camera_name": cam, "camera_hz": 20.0, "max_frame_age": 0.2}


def test_overrides_are_typed_against_defaults():
    graph = Graph.load()
    specs = {s.name: s for s in graph.resolve(["belt_speed:=1", "sim_link:=123", "aubo_bridge.control_hz:=10",
                                                 "sim_world.slot_permutation:=[2, 0, 1]", "sim_world.seed:=4"])}
    assert specs["sim_world"].parameters["belt_speed"] == 1.0
    assert isinstance(specs["conveyor_driver"].parameters["belt_speed"], float)
    assert all(s.parameters["sim_link"] == "123" for s in specs.values())  # a string default stays a string
    assert specs["aubo_bridge"].parameters["control_hz"] == 10.0
    assert isinstance(specs["aubo_bridge"].parameters["control_hz"], float)
    assert specs["sim_world"].parameters["slot_permutation"] == [2, 0, 1]
    assert specs["sim_world"].parameters["seed"] == 4
    # Python values work as well as command-line text
    assert graph.argument_values({"use_sim": False, "belt_speed": 2})["belt_speed"] == 2.0


def test_use_sim_false_drops_sim_world_and_expert_flag_adds_expert():
    graph = Graph.load()
    specs = graph.resolve(["use_sim:=false"])
    assert [s.name for s in specs] == SIM_NODES[1:]
    assert all(s.parameters["use_sim"] is False for s in specs)
    with_expert = graph.resolve(["expert:=true"])
    assert [s.name for s in with_expert] == [*SIM_NODES, "scripted_expert"]
    assert with_expert[-1].module == "sim_cell.expert_node"


@pytest.mark.parametrize(
    "override",
    ["use_sim:=maybe", "nope:=1", "aubo_bridge.nope:=1", "ghost.seed:=1", "use_sim", "aubo_bridge.control_hz:=fast",
     "sim_world.slot_permutation:=[]", "sim_world.slot_permutation:=[1, a]", "sim_world.seed:=1.5",
     "sim_world.render:=1"],
)
def test_bad_overrides_are_rejected(override):
    with pytest.raises(GraphError):
        Graph.load().resolve([override])


def test_ros_params_file_round_trips():
    spec = NodeSpec("cam", "camera_driver", "camera_driver.node",
                    {"sim_link": "123", "camera_hz": 20.0, "slot_permutation": [-1], "render": True})
    doc = yaml.safe_load(ros_params_yaml(spec))
    assert doc == {"/cam": {"ros__parameters": spec.parameters}}
    assert isinstance(doc["/cam"]["ros__parameters"]["sim_link"], str)


BAD_GRAPHS = {
    "unknown condition": "arguments: {}\nnodes: [{name: a, executable: a, module: m, condition: nope}]",
    "non-bool condition": "arguments: {x: {default: 1}}\nnodes: [{name: a, executable: a, module: m, condition: x}]",
    "duplicate": "nodes: [{name: a, executable: a, module: m}, {name: a, executable: b, module: m}]",
    "empty list": "nodes: [{name: a, executable: a, module: m, parameters: {p: []}}]",
    "unknown key": "nodes: [{name: a, executable: a, module: m, remap: x}]",
    "no module": "nodes: [{name: a, executable: a}]",
    "bad arg ref": "nodes: [{name: a, executable: a, module: m, parameters: {p: $(arg nope)}}]",
    "inject unknown": "inject: [nope]\nnodes: []",
    "mixed list": "nodes: [{name: a, executable: a, module: m, parameters: {p: [1, x]}}]",
}


@pytest.mark.parametrize("case", sorted(BAD_GRAPHS))
def test_malformed_graphs_are_rejected(tmp_path, case):
    path = tmp_path / "graph.yaml"
    path.write_text(BAD_GRAPHS[case])
    with pytest.raises(GraphError):
        Graph.load(path)


def test_find_graph(tmp_path):
    assert bringup.find_graph() == REPO / "config" / "workcell.yaml"
    assert bringup.find_graph("workcell.yaml") == REPO / "config" / "workcell.yaml"
    own = tmp_path / "own.yaml"
    own.write_text("nodes: []")
    assert bringup.find_graph(own) == own
    with pytest.raises(FileNotFoundError):
        bringup.find_graph("no_such_graph.yaml")
    with pytest.raises(FileNotFoundError):
        bringup.find_graph(tmp_path / "missing.yaml")


# --------------------------------------------------------------------------
# The launch file, against fake launch / launch_ros modules
# --------------------------------------------------------------------------
def _run_launch_file(monkeypatch, overrides: dict[str, str], launch_file: Path = LAUNCH_FILE) -> list[Any]:
    """Load the launch file with fake modules, 'launch' it with ``overrides``; return what it made."""
    made: list[Any] = []
    for name, module in launch_fakes.make_modules(made).items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("workcell_launch_under_test", launch_file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    description = module.generate_launch_description()
    declared = {e.name: e.default_value for e in description.entities if type(e).__name__ == "DeclareLaunchArgument"}
    assert all(isinstance(v, str) for v in declared.values()), declared  # launch wants text defaults
    opaque = [e for e in description.entities if type(e).__name__ == "OpaqueFunction"]
    assert len(opaque) == 1
    return opaque[0].call(launch_fakes.context(declared, overrides))


LAUNCH_CASES = [{}, {"use_sim": "false"}, {"expert": "true", "belt_speed": "0.05"}, {"loopback_dds": "false"},
                {"sim_link": "other", "camera_hz": "10"}]


@pytest.mark.parametrize("overrides", LAUNCH_CASES, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items()) or "-")
def test_launch_file_matches_bringup(monkeypatch, overrides):
    actions = _run_launch_file(monkeypatch, overrides)
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    expected = Graph.load().resolve(overrides)
    got = [(n.package, n.name, n.executable, n.parameters, n.output) for n in nodes]
    want = [("libero_workcell", s.name, s.executable, [s.parameters], "screen") for s in expected]
    assert got == want
    for node, spec in zip(nodes, expected, strict=True):  # a node the cell needs exits -> the graph stops;
        assert type(node.on_exit).__name__ == ("LogInfo" if spec.observer else "Shutdown")  # an observer: said

    env_set = {a.name: a.value for a in actions if type(a).__name__ == "SetEnvironmentVariable"}
    env_unset = {a.name for a in actions if type(a).__name__ == "UnsetEnvironmentVariable"}
    if overrides.get("loopback_dds") == "false":
        assert not env_set and not env_unset
    else:  # inherits this run's ROS_DOMAIN_ID (set by conftest)
        assert env_set == dds.loopback_vars(int(os.environ["ROS_DOMAIN_ID"]))
        assert env_unset == set(dds.CONFLICTING_VARS)


@pytest.mark.parametrize(
    "given",
    [
        {"aubo_bridge.active_source": "policy"},
        {"use_sim": "false", "aubo_bridge.arcs.ip": "127.0.0.1", "conveyor_driver.modbus.port": "/dev/ttyBelt"},
        {"sim_world.seed": "3", "expert": "true"},
    ],
    ids=["active_source", "real-devices", "seed"],
)
def test_per_node_overrides_reach_the_nodes_under_ros2_launch(monkeypatch, given):
    """NODE.PARAM:=VALUE is applied as under workcell bringup (it used to be dropped without a word)."""
    nodes = [a for a in _run_launch_file(monkeypatch, given) if type(a).__name__ == "Node"]
    expected = Graph.load().resolve(given)
    assert [(n.name, n.parameters) for n in nodes] == [(s.name, [s.parameters]) for s in expected]
    for key, value in given.items():
        node, dot, param = key.partition(".")
        if dot:
            got = next(n for n in nodes if n.name == node).parameters[0][param]
            assert str(got).lower() == value.lower(), key


@pytest.mark.parametrize(
    "given, match",
    [
        ({"aubo_bridge.no_such_param": "1"}, "aubo_bridge has no parameter 'no_such_param'"),
        ({"aubo_brige.active_source": "policy"}, "no node 'aubo_brige'"),
        ({"aubo_bridge.auto_enable": "maybe"}, "auto_enable"),
    ],
)
def test_per_node_overrides_are_refused_under_ros2_launch_as_under_bringup(monkeypatch, given, match):
    with pytest.raises(GraphError, match=match):
        Graph.load().resolve(given)
    with pytest.raises(GraphError, match=match):
        _run_launch_file(monkeypatch, given)


def test_the_launch_fakes_check_keywords_like_the_real_api():
    """A fake that accepts anything proves nothing: misspelled keywords fail here as in launch_ros."""
    mods = launch_fakes.make_modules([])
    Node, actions = mods["launch_ros.actions"].Node, mods["launch.actions"]
    Node(executable="x", package="p", name="n", parameters=[{}], output="screen", on_exit=None)
    for bad in ({"executable": "x", "paramters": [{}]}, {"executable": "x", "outputs": "screen"},
                {"executable": "x", "parameters": {}}):  # fmt: skip
        with pytest.raises(TypeError):
            Node(**bad)
    with pytest.raises(TypeError):
        Node(package="p")  # executable is required
    with pytest.raises(TypeError):
        actions.LogInfo("positional")
    with pytest.raises(TypeError):
        actions.DeclareLaunchArgument("n", default_value=1)
    with pytest.raises(TypeError):
        actions.Shutdown(reasons="typo")
    config = mods["launch.substitutions"].LaunchConfiguration("missing")
    with pytest.raises(launch_fakes.SubstitutionFailure):
        config.perform(launch_fakes.context({}, {}))


def test_launch_arguments_are_the_graph_arguments(monkeypatch):
    made: list[Any] = []
    for name, module in launch_fakes.make_modules(made).items():
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("sim_workcell_launch_args", LAUNCH_FILE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.generate_launch_description()
    declared = {m.name: m.default_value for m in made if type(m).__name__ == "DeclareLaunchArgument"}
    graph = Graph.load()
    assert declared == {n: bringup.launch_text(a.default) for n, a in graph.arguments.items()}
    assert {"use_sim", "sim_link", "expert", "loopback_dds"} <= set(declared)
    assert declared["use_sim"] == "true" and declared["expert"] == "false"


# --------------------------------------------------------------------------
# Executables and modules
# --------------------------------------------------------------------------
def _console_scripts() -> dict[str, str]:
    """setup.py's console_scripts as {name: "module:function"} (read with ast: no setup() run)."""
    tree = ast.parse((REPO / "setup.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    items = ast.literal_eval(value)
                    return {n.strip(): t.strip() for n, t in (item.split("=", 1) for item in items)}
    raise AssertionError("no console_scripts in setup.py")


def test_every_executable_is_a_console_script_of_its_module():
    scripts = _console_scripts()
    assert "workcell" in scripts
    for node in Graph.load().nodes:
        assert node["executable"] in scripts, f"{node['name']}: {node['executable']} not in setup.py console_scripts"
        assert scripts[node["executable"]] == f"{node['module']}:main", node["name"]


@pytest.mark.parametrize("module", sorted({n["module"] for n in Graph.load().nodes}))
def test_node_module_runs_with_python_m(module):
    """The launcher runs ``python -m <module>``: it must import and have main() plus a __main__ guard."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not written yet (owned by another part of the stack)")
    mod = importlib.import_module(module)
    assert callable(getattr(mod, "main", None)), f"{module} has no main()"
    source = Path(mod.__file__).read_text(encoding="utf-8")
    assert 'if __name__ == "__main__"' in source, f"{module} cannot run as python -m (no __main__ guard)"


# --------------------------------------------------------------------------
# The process launcher, with fake nodes
# --------------------------------------------------------------------------
FAKE_NODE = textwrap.dedent(
    """
    import signal, sys, time, yaml
    argv = sys.argv[1:]
    name = next(a.split(":=", 1)[1] for a in argv if a.startswith("__node:="))
    with open(argv[argv.index("--params-file") + 1]) as f:
        params = yaml.safe_load(f)["/" + name]["ros__parameters"]
    print("argv", " ".join(argv))
    print("params", params)
    mode = params.get("mode", "run")
    # Like rclpy's nodes, take SIGINT even when started with it ignored (a suite run in the background by a
    # non-interactive shell inherits SIG_IGN, and Python then raises no KeyboardInterrupt).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    if mode == "crash":
        print("boom")
        sys.exit(3)
    if mode == "stubborn":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("ready")
    if mode != "unready":  # as run_node says it once the node is built
        print("NODE_UP built, spinning", flush=True)
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        print("clean shutdown")
        sys.exit(0)
    """
)


@pytest.fixture
def fake_env(tmp_path, ros_env) -> dict[str, str]:
    (tmp_path / "fake_node.py").write_text(FAKE_NODE.replace("NODE_UP", NODE_UP))
    env = dict(ros_env)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    return env


def _fake(name: str, mode: str = "run") -> NodeSpec:
    return NodeSpec(name, "fake", "fake_node", {"mode": mode, "rate": 1.0})


def test_launcher_runs_nodes_and_forwards_sigint(tmp_path, fake_env):
    echo = io.StringIO()
    with launch([_fake("alpha"), _fake("beta")], env=fake_env, log_dir=tmp_path / "logs", echo=echo) as running:
        assert wait_for(lambda: all("ready" in running.log_text(n) for n in ("alpha", "beta")), 20)
        assert running.alive()
        log = running.log_text("alpha")
        params_file = tmp_path / "logs" / "alpha.params.yaml"
        assert f"--ros-args -r __node:=alpha --params-file {params_file}" in log
        assert "'mode': 'run', 'rate': 1.0" in log
        codes = running.stop(timeout=10)
    assert codes == {"alpha": 0, "beta": 0}
    assert "clean shutdown" in (tmp_path / "logs" / "beta.log").read_text()
    assert "[alpha] ready" in echo.getvalue() and "[beta] clean shutdown" in echo.getvalue()


def test_launcher_reports_a_node_that_dies(tmp_path, fake_env):
    with launch([_fake("steady"), _fake("fragile", "crash")], env=fake_env, log_dir=tmp_path) as running:
        exits = running.wait(timeout=20)
        assert [(e.name, e.returncode) for e in exits] == [("fragile", 3)]
        assert "boom" in exits[0].tail
        with pytest.raises(NodeDiedError, match=r"node fragile exited with code 3(.|\n)*boom"):
            running.check()
        assert not running.alive()


def test_launcher_escalates_to_sigkill(fake_env):
    with launch([_fake("mule", "stubborn")], env=fake_env) as running:  # no log dir: temp params, tail only
        assert wait_for(lambda: "ready" in running.log_text("mule"), 20)
        started = time.monotonic()
        # the node ignores SIGINT and SIGTERM (installed before "ready"): any wait before each escalation shows it
        codes = running.stop(timeout=0.2, term_timeout=0.2)
        assert codes == {"mule": -signal.SIGKILL}
        assert time.monotonic() - started < 5


def test_nodes_up_counts_the_nodes_built_and_spinning_and_closes_once_all_are(fake_env):
    shown = io.StringIO()
    with launch([_fake("alpha"), _fake("beta", "unready")], env=fake_env) as running:
        up = NodesUp(running, file=shown)
        assert wait_for(lambda: (up.poll(), running.up() == ["alpha"])[1], 20)
        assert wait_for(lambda: "ready" in running.log_text("beta"), 20)
        up.poll()
        assert not up.done  # beta never said it was up
        up.close()
    first, *_, last = shown.getvalue().splitlines()
    assert re.search(r"^nodes up: .* 0/2 ", first) and re.search(r"^nodes up: .* 1/2 ", last), shown.getvalue()
    shown = io.StringIO()
    with launch([_fake("alpha"), _fake("beta")], env=fake_env) as running:
        up = NodesUp(running, file=shown)
        assert wait_for(lambda: (up.poll(), up.done)[1], 20)
    assert re.search(r"^nodes up: 100%.* 2/2 ", shown.getvalue().splitlines()[-1]), shown.getvalue()


def _cli(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "workcell.cli", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_cli_bringup_stops_cleanly_on_ctrl_c(tmp_path, fake_env):
    graph = tmp_path / "graph.yaml"
    graph.write_text("nodes:\n  - {name: alpha, executable: x, module: fake_node, parameters: {mode: run}}\n"
                     "  - {name: beta, executable: x, module: fake_node, parameters: {mode: run}}\n")
    logs = tmp_path / "logs"
    proc = _cli(["bringup", "--graph", str(graph), "--log-dir", str(logs)], fake_env)
    try:
        assert wait_for(lambda: all((logs / f"{n}.log").is_file() and "ready" in (logs / f"{n}.log").read_text()
                                    for n in ("alpha", "beta")), 30)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "[alpha] ready" in out and "[beta] clean shutdown" in out and "workcell: stopping" in out


# `workcell bringup` started with SIGINT ignored (as a background job or a test worker starts it), whose stdout
# signals the process itself the moment a line starting with argv[1] is written: a Ctrl-C at an exact line.
CTRL_C_AT_LINE = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
class Tripwire:
    def __init__(self, inner, prefix):
        self.inner, self.prefix, self.fired = inner, prefix, False
    def write(self, text):
        n = self.inner.write(text)
        if not self.fired and text.startswith(self.prefix):
            self.fired = True
            self.inner.flush()
            os.kill(os.getpid(), signal.SIGINT)
        return n
    def __getattr__(self, name):
        return getattr(self.inner, name)
sys.stdout = Tripwire(sys.stdout, sys.argv[1])
from workcell.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("line", ["workcell: graph", "workcell: node beta"])
def test_a_ctrl_c_at_any_line_of_the_start_stops_it_cleanly(tmp_path, fake_env, line):
    """The signal handlers are in place before the first line: a caller that sends Ctrl-C on seeing a line is
    never ignored (the graph would run on, untouchable) nor met by a traceback. Deterministic: the process
    signals itself as the line is written."""
    graph = tmp_path / "graph.yaml"
    graph.write_text("nodes:\n  - {name: alpha, executable: x, module: fake_node, parameters: {mode: run}}\n"
                     "  - {name: beta, executable: x, module: fake_node, parameters: {mode: run}}\n")
    proc = subprocess.Popen([sys.executable, "-c", CTRL_C_AT_LINE, line, "bringup", "--graph", str(graph),
                             "--log-dir", str(tmp_path / "logs")], env=fake_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "workcell: stopping" in out and "Traceback" not in err, (out, err)
    assert "[alpha]" not in out  # stopped before anything was launched


def test_cli_bringup_shows_the_nodes_coming_up_on_stderr_and_leaves_stdout_as_it_was(tmp_path, fake_env):
    graph = tmp_path / "graph.yaml"
    graph.write_text("nodes:\n  - {name: alpha, executable: x, module: fake_node, parameters: {mode: run}}\n"
                     "  - {name: beta, executable: x, module: fake_node, parameters: {mode: run}}\n")
    proc = _cli(["bringup", "--graph", str(graph)], fake_env)
    err: list[str] = []
    reader = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        assert wait_for(lambda: any(re.search(r"^nodes up: 100%.* 2/2 ", line) for line in err), 30), err
        proc.send_signal(signal.SIGINT)
        out = proc.stdout.read()
        proc.wait(timeout=20)
        reader.join(5)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert re.search(r"^nodes up: .* 0/2 ", err[0]) and sum("nodes up" in line for line in err) == 2, err
    assert "nodes up" not in out and "[alpha] ready" in out and f"[beta] {NODE_UP} built, spinning" in out


def test_cli_bringup_exits_nonzero_when_a_node_dies(tmp_path, fake_env):
    graph = tmp_path / "graph.yaml"
    graph.write_text("nodes:\n  - {name: alpha, executable: x, module: fake_node, parameters: {mode: run}}\n"
                     "  - {name: beta, executable: x, module: fake_node, parameters: {mode: run}}\n")
    proc = _cli(["bringup", "--graph", str(graph), "beta.mode:=crash"], fake_env)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "node beta exited with code 3" in err and "boom" in err


def test_cli_env_and_demo_placeholder(ros_env):
    out = subprocess.run([sys.executable, "-m", "workcell.cli", "env", "--domain-id", "42"], env=ros_env,
                         capture_output=True, text=True, check=True).stdout
    assert "export ROS_DOMAIN_ID=42" in out and "export RMW_IMPLEMENTATION=rmw_fastrtps_cpp" in out
    assert f"export FASTDDS_DEFAULT_PROFILES_FILE={dds.profile_path()}" in out
    assert "unset ROS_LOCALHOST_ONLY" in out
    if importlib.util.find_spec("workcell.demo") is None:
        demo = subprocess.run([sys.executable, "-m", "workcell.cli", "demo", "--help"], env=ros_env,
                              capture_output=True, text=True)
        assert demo.returncode == 2 and "workcell.demo is not there yet" in demo.stderr


# --------------------------------------------------------------------------
# A real rclpy node under the launcher: name remap and parameter types
# --------------------------------------------------------------------------
PROBE_NODE = textwrap.dedent(
    """
    import json, rclpy
    from rclpy.executors import ExternalShutdownException
    from std_msgs.msg import String
    from libero_workcell.contract import Qos
    from libero_workcell.ros_qos import qos

    DECLARED = {"use_sim": False, "sim_link": "", "belt_speed": 0.0, "slot_permutation": [0], "seed": 0}

    def main():
        rclpy.init()
        node = rclpy.create_node("probe_default_name")
        values = {}
        for name, default in DECLARED.items():
            value = node.declare_parameter(name, default).value
            values[name] = value if isinstance(value, (bool, int, float, str)) else list(value)
        pub = node.create_publisher(String, "/test/probe", qos(Qos.LATCHED))
        pub.publish(String(data=json.dumps({"node": node.get_fully_qualified_name(), "params": values})))
        try:
            rclpy.spin(node)
        except (KeyboardInterrupt, ExternalShutdownException):
            pass
        node.destroy_node()
        rclpy.try_shutdown()

    if __name__ == "__main__":
        main()
    """
)


@pytest.mark.ros
def test_launched_rclpy_node_gets_name_and_typed_parameters(tmp_path, ros_env, graph_runner, rclpy_node):
    from std_msgs.msg import String

    from libero_workcell.contract import Qos
    from libero_workcell.ros_qos import qos

    (tmp_path / "probe_node.py").write_text(PROBE_NODE)
    env = dict(ros_env, PYTHONPATH=os.pathsep.join(p for p in (str(tmp_path), ros_env.get("PYTHONPATH")) if p))
    params = {"use_sim": True, "sim_link": "123", "belt_speed": 0.05, "slot_permutation": [2, 0, 1], "seed": 7}
    got: list[dict[str, Any]] = []
    rclpy_node.create_subscription(String, "/test/probe", lambda m: got.append(json.loads(m.data)), qos(Qos.LATCHED))
    running = graph_runner([NodeSpec("probe_a", "x", "probe_node", params)], env=env)
    assert wait_for(lambda: got, 30), running.log_text("probe_a")
    assert got[0] == {"node": "/probe_a", "params": params}
    assert running.stop(timeout=10) == {"probe_a": 0}


# --------------------------------------------------------------------------
# The real simulated workcell graph
# --------------------------------------------------------------------------
@pytest.mark.ros
@pytest.mark.slow
def test_sim_graph_comes_up_and_publishes(graph_runner, rclpy_node):
    """Default graph (own sim_link per run): state, belt and both cameras publish within 60 s."""
    missing = [n["module"] for n in Graph.load().nodes if importlib.util.find_spec(n["module"]) is None]
    if missing:
        pytest.skip(f"node modules not written yet: {', '.join(missing)}")
    from sensor_msgs.msg import Image, JointState

    from libero_workcell.contract import Qos, Topics
    from libero_workcell.ros_qos import qos

    topics = {Topics.ROBOT_STATE: (JointState, Qos.STATE), Topics.CONVEYOR_STATE: (JointState, Qos.STATE),
              Topics.image("external"): (Image, Qos.SENSOR), Topics.image("wrist"): (Image, Qos.SENSOR)}
    seen: dict[str, int] = dict.fromkeys(topics, 0)
    for topic, (msg_type, spec) in topics.items():
        rclpy_node.create_subscription(msg_type, topic, lambda _m, t=topic: seen.__setitem__(t, seen[t] + 1), qos(spec))
    running = graph_runner(Graph.load().resolve([f"sim_link:=test_{os.getpid()}"]), settle=1.0)
    came_up = wait_for(lambda: all(seen.values()) or not running.alive(), 60)
    running.check()
    assert came_up and all(seen.values()), f"silent topics: {[t for t, n in seen.items() if not n]}"
    codes = running.stop(timeout=10)
    assert all(code == 0 for code in codes.values()), codes


CONDITIONAL_GRAPH = """
arguments:
  use_sim: {default: true}
  sim_link: {default: workcell}
inject: [use_sim]
nodes:
  - name: arm
    executable: aubo_bridge
    module: aubo_bridge.node
    parameters: {control_hz: 20.0}
    parameters_if:
      use_sim: {auto_enable: true}
      not use_sim: {arcs.ip: "192.168.1.10", arcs.rpc_port: 30004}
"""


def test_parameters_if_selects_sim_or_real_settings(tmp_path) -> None:
    path = tmp_path / "graph.yaml"
    path.write_text(CONDITIONAL_GRAPH)
    graph = Graph.load(path)
    (sim,) = graph.resolve([])
    assert sim.parameters == {"use_sim": True, "control_hz": 20.0, "auto_enable": True}
    (real,) = graph.resolve(["use_sim:=false"])
    assert real.parameters == {"use_sim": False, "control_hz": 20.0, "arcs.ip": "192.168.1.10", "arcs.rpc_port": 30004}
    (real,) = graph.resolve(["use_sim:=false", "arm.arcs.ip:=10.0.0.7", "arm.arcs.rpc_port:=30005"])
    assert real.parameters["arcs.ip"] == "10.0.0.7" and real.parameters["arcs.rpc_port"] == 30005


def test_only_the_watching_nodes_are_observers_and_the_flag_is_a_boolean(tmp_path) -> None:
    """Observers' deaths stop nothing else (docs/data.md): only nodes the cell runs without may be marked."""
    nodes = Graph.load().resolve(["record_mcap:=/tmp/x.mcap", "console:=true", "foxglove:=true", "expert:=true"])
    assert {n.name for n in nodes if n.observer} == {"session_log", "console", "foxglove_bridge"}
    path = tmp_path / "graph.yaml"
    path.write_text(CONDITIONAL_GRAPH.replace("    module: ", "    observer: yes please\n    module: ", 1))
    with pytest.raises(GraphError, match="observer is true or false"):
        Graph.load(path)


def test_parameters_if_rejects_unknown_conditions(tmp_path) -> None:
    path = tmp_path / "graph.yaml"
    path.write_text(CONDITIONAL_GRAPH.replace("not use_sim:", "not use_real:"))
    with pytest.raises(GraphError, match="condition"):
        Graph.load(path)


def test_real_launch_file_is_the_same_graph_with_use_sim_false(monkeypatch):
    actions = _run_launch_file(monkeypatch, {}, launch_file=REPO / "launch" / "real_workcell.launch.py")
    nodes = [a for a in actions if type(a).__name__ == "Node"]
    expected = Graph.load().resolve(["use_sim:=false"])
    assert [(n.name, n.executable, n.parameters) for n in nodes] == [
        (s.name, s.executable, [s.parameters]) for s in expected
    ]
    assert "sim_world" not in {n.name for n in nodes}
    assert all(n.parameters[0]["use_sim"] is False for n in nodes)


def test_real_profile_never_starts_motion_by_itself():
    """On hardware neither the arm nor the belt may start on their own."""
    specs = {s.name: s for s in Graph.load().resolve(["use_sim:=false"])}
    assert specs["aubo_bridge"].parameters["auto_enable"] is False
    assert specs["conveyor_driver"].parameters["autostart"] is False


def test_bringup_only_starts_the_named_nodes(capsys):
    assert cli.main(["bringup", "--dry-run", "--only", "conveyor_driver,wrist_camera"]) == 0
    out = capsys.readouterr().out
    assert "node conveyor_driver" in out and "node wrist_camera" in out and "node aubo_bridge" not in out
    assert cli.main(["bringup", "--dry-run", "--only", "nope"]) == 2


def test_the_action_response_argument_reaches_the_arm_bridge_and_the_expert_together():
    specs = {s.name: s for s in Graph.load().resolve({"expert": "true", "action_response": "goal_delta"})}
    assert specs["aubo_bridge"].parameters["action_response"] == "goal_delta"
    assert specs["scripted_expert"].parameters["action_response"] == "goal_delta"
    default = {s.name: s for s in Graph.load().resolve({"expert": "true"})}
    assert default["aubo_bridge"].parameters["action_response"] == "libero"
    assert default["scripted_expert"].parameters["action_response"] == "libero"


def test_replay_launch_file_is_the_graph_with_replay_on(monkeypatch, tmp_path):
    """sim_replay.launch.py demo_path:=... runs the sim graph plus demo_replay, the bridge listening to it."""
    demo = str(tmp_path / "d.hdf5")
    launch_file = REPO / "launch" / "sim_replay.launch.py"
    actions = _run_launch_file(monkeypatch, {"demo_path": demo, "replay_mode": "closed_loop"}, launch_file)
    nodes = {a.name: a for a in actions if type(a).__name__ == "Node"}
    expected = Graph.load().resolve(["replay:=true", f"demo_path:={demo}", "replay_mode:=closed_loop"])
    assert [(n.name, n.parameters) for n in nodes.values()] == [(s.name, [s.parameters]) for s in expected]
    assert nodes["demo_replay"].executable == "demo_replay"
    assert nodes["demo_replay"].parameters[0]["mode"] == "closed_loop"
    assert nodes["sim_world"].parameters[0]["demo_path"] == demo == nodes["demo_replay"].parameters[0]["demo_path"]
    assert nodes["aubo_bridge"].parameters[0]["active_source"] == "policy"
    assert "scripted_expert" not in nodes
    plain = {s.name: s for s in Graph.load().resolve([])}  # without replay: no replay node, the expert drives
    assert "demo_replay" not in plain and plain["aubo_bridge"].parameters["active_source"] == "expert"


def test_teleop_collection_launch_files_are_the_graph_with_teleop_on(monkeypatch, tmp_path):
    """teleop_collect_sim.launch.py: the sim graph, the scripted source, the recorder, the bridge listening to
    teleop, the world in the session's task; teleop_collect.launch.py: the same on the physical workcell."""
    out = str(tmp_path / "d2s.hdf5")
    sim = _run_launch_file(monkeypatch, {"record_path": out}, REPO / "launch" / "teleop_collect_sim.launch.py")
    nodes = {a.name: a.parameters[0] for a in sim if type(a).__name__ == "Node"}
    preset = {k: str(v) for k, v in launch_presets.TELEOP_COLLECT_SIM.items()}
    expected = Graph.load().resolve({**preset, "record_path": out})
    assert list(nodes.items()) == [(s.name, s.parameters) for s in expected]
    assert nodes["teleop_pico"]["source"] == "scripted" and nodes["teleop_pico"]["reset_sim"] is True
    assert nodes["recorder"]["out_path"] == out and nodes["aubo_bridge"]["active_source"] == "teleop"
    assert nodes["sim_world"]["arrival_interval"] == 18.0 and "scripted_expert" not in nodes
    real = _run_launch_file(monkeypatch, {}, REPO / "launch" / "teleop_collect.launch.py")
    real_nodes = {a.name: a.parameters[0] for a in real if type(a).__name__ == "Node"}
    assert "sim_world" not in real_nodes and real_nodes["teleop_pico"]["source"] == "headset"
    assert real_nodes["teleop_pico"]["reset_sim"] is False and real_nodes["aubo_bridge"]["active_source"] == "teleop"
    assert not {n for n in Graph.load().resolve([]) if n.name in ("teleop_pico", "recorder")}  # off by default


def test_deploy_launch_files_are_the_graph_with_the_policy_on(monkeypatch):
    """deploy_sim.launch.py: the sim graph, the local openpi server and policy_node, the bridge listening to
    policy; deploy_real.launch.py: the physical workcell and policy_node against policy_url, no local server."""
    sim = _run_launch_file(monkeypatch, {"task": "pick up the parts"}, REPO / "launch" / "deploy_sim.launch.py")
    nodes = {a.name: a.parameters[0] for a in sim if type(a).__name__ == "Node"}
    preset = {k: str(v) for k, v in launch_presets.DEPLOY_SIM.items()}
    expected = Graph.load().resolve({**preset, "task": "pick up the parts"})
    assert list(nodes.items()) == [(s.name, s.parameters) for s in expected]
    assert nodes["aubo_bridge"]["active_source"] == "policy" and nodes["policy_server"]["host"] == "127.0.0.1"
    assert nodes["policy_node"]["policy.url"] == f"ws://127.0.0.1:{nodes['policy_server']['port']}"
    assert nodes["policy_node"]["policy.task"] == "pick up the parts" and "sim_world" in nodes
    url = "ws://10.0.0.7:8000"
    real = _run_launch_file(monkeypatch, {"policy_url": url, "preference": "speed_up"},
                            REPO / "launch" / "deploy_real.launch.py")  # fmt: skip
    real_nodes = {a.name: a.parameters[0] for a in real if type(a).__name__ == "Node"}
    assert "sim_world" not in real_nodes and "policy_server" not in real_nodes
    policy, bridge = real_nodes["policy_node"], real_nodes["aubo_bridge"]
    assert policy["policy.url"] == url and policy["policy.preference"] == "speed_up"
    assert bridge["active_source"] == "policy" and bridge["auto_enable"] is False
    assert not {n.name for n in Graph.load().resolve([])} & {"policy_node", "policy_server"}  # off by default


def test_the_demo_can_run_the_deploy_loop_instead_of_the_expert():
    """``./run.sh --source policy``: policy_node and the local policy server instead of the scripted expert."""
    from workcell.demo import source_overrides

    expert = {n.name: n for n in Graph.load().resolve(source_overrides("expert", 0))}
    policy = {n.name: n for n in Graph.load().resolve(source_overrides("policy", 8123))}
    assert "scripted_expert" in expert and "policy_node" not in expert
    assert {"policy_node", "policy_server"} <= set(policy) and "scripted_expert" not in policy
    assert policy["policy_server"].parameters["port"] == 8123
    assert policy["policy_node"].parameters["policy.url"] == "ws://127.0.0.1:8123"
    assert policy["aubo_bridge"].parameters["active_source"] == "policy"
    with pytest.raises(ValueError, match="source must be one of"):
        source_overrides("teleop", 0)


def test_the_real_arms_driver_runs_in_a_process_of_its_own_and_the_simulated_one_in_the_node() -> None:
    graph = Graph.load()
    (real,) = [s for s in graph.resolve(["use_sim:=false"]) if s.name == "aubo_bridge"]
    (sim,) = [s for s in graph.resolve([]) if s.name == "aubo_bridge"]
    assert "driver_host" not in real.parameters  # the node's default: process
    assert sim.parameters["driver_host"] == "node"


@pytest.mark.parametrize("job", sorted(launch_presets.JOBS))
def test_every_job_is_one_graph_under_ros2_launch_and_workcell_bringup(monkeypatch, job, capsys, tmp_path):
    """``ros2 launch libero_workcell JOB.launch.py ARGS`` and ``workcell bringup --job JOB ARGS`` resolve to the
    same nodes with the same parameters, world settings included (docs/bringup_sim.md)."""
    from workcell import cli

    given = {"sim_world.seed": "4", "record_path": str(tmp_path / "d.hdf5")}
    if job == "sim_replay":
        given["demo_path"] = str(tmp_path / "demo.hdf5")
    if launch_presets.JOBS[job].get("use_sim") is False:
        given.pop("sim_world.seed")
    actions = _run_launch_file(monkeypatch, given, REPO / "launch" / f"{job}.launch.py")
    _launch_ends()  # (running beside it, the bringup would be refused its domain)
    launched = [(a.name, a.executable, a.parameters[0]) for a in actions if type(a).__name__ == "Node"]
    overrides = [f"{k}:={v}" for k, v in given.items()]
    assert cli.main(["bringup", "--job", job, "--dry-run", *overrides]) == 0
    printed = capsys.readouterr().out
    resolved = Graph.load().resolve(cli.job_overrides(job, overrides))
    assert launched == [(s.name, s.executable, s.parameters) for s in resolved]
    for s in resolved:  # what the dry run printed is this graph
        assert f"workcell: node {s.name} ({s.module}) {s.parameters}" in printed


# ----------------------------------------------------------------- every setting a lab sets is settable
NODE_MODULES_BY_NAME = {n["name"]: n["module"] for n in Graph.load().nodes}

# The settings a newcomer found refused (issue 20), each with a value a lab would give
LAB_SETTINGS = {
    "aubo_bridge.arcs.user": "aubo", "aubo_bridge.arcs.password": "123456", "aubo_bridge.tool_offset": "[0, 0, 0.21]",
    "aubo_bridge.workspace_min": "[0.2, -0.5, 0.05]", "aubo_bridge.workspace_max": "[0.7, 0.5, 0.6]",
    "aubo_bridge.gripper.baudrate": "115200", "aubo_bridge.gripper.speed": "50", "aubo_bridge.gripper.force": "40",
    "aubo_bridge.arcs.state_source": "rtde", "aubo_bridge.max_tcp_speed": "0.1",
    "aubo_bridge.joint_speed_fraction": "0.5", "wrist_camera.uvc.fovy": "60",
    "recorder.image_convention": "upright", "teleop_pico.teleop.headset_to_base": "[0, 0, 1, 0, 1, 0, 1, 0, 0]",
}  # fmt: skip


def test_every_parameter_a_node_declares_can_be_overridden_by_name():
    """Each parameter of each node, given as command-line text, is accepted and typed back to its default."""
    graph = Graph.load()
    for node in graph.nodes:
        declared = node_parameters(node["module"])
        assert declared, node["name"]
        for param, default in declared.items():
            if param in graph.inject:
                continue
            if isinstance(default, str) and not default:
                default = "x"  # an empty string is no test of the typing
            key = f"{node['name']}.{param}"
            got = graph.argument_values({key: launch_text(default)}) and graph._split({key: launch_text(default)})
            typed = got[1][(node["name"], param)]
            assert type(typed) is type(default) and launch_text(typed) == launch_text(default), key


def test_the_settings_a_lab_sets_reach_their_nodes_typed():
    specs = {s.name: s for s in Graph.load().resolve(["teleop:=true", *(f"{k}:={v}" for k, v in LAB_SETTINGS.items())])}
    for key, text in LAB_SETTINGS.items():
        node, _, param = key.partition(".")
        got = specs[node].parameters[param]
        default = node_parameters(NODE_MODULES_BY_NAME[node])[param]
        assert type(got) is type(default), (key, got, default)
        want = text if isinstance(default, str) else yaml.safe_load(text)
        if isinstance(default, list):
            assert all(type(g) is type(default[0]) for g in got) and got == [type(default[0])(w) for w in want], key
        else:
            assert got == type(default)(want), key


def test_an_unknown_parameter_is_refused_with_the_nodes_own_names_and_shared_ones_point_to_their_argument():
    with pytest.raises(GraphError, match=r"aubo_bridge has no parameter 'arcs\.ipp'; its parameters: .*arcs\.ip,"):
        Graph.load().resolve(["aubo_bridge.arcs.ipp:=1.2.3.4"])
    with pytest.raises(GraphError, match="set it with the argument use_sim:="):
        Graph.load().resolve(["aubo_bridge.use_sim:=false"])
    with pytest.raises(GraphError, match="tool_offset"):
        Graph.load().resolve(["aubo_bridge.tool_offset:=[0, 0, x]"])


def _cell(tmp_path, text: str):
    path = tmp_path / "lab_cell.yaml"
    path.write_text(text)
    return path


def test_a_cell_file_is_merged_over_the_defaults_and_under_the_command_line(tmp_path):
    cell = _cell(tmp_path, """
use_sim: false
aubo_bridge:
  arcs: {ip: 192.168.10.20, user: aubo, password: "123456"}
  tool_offset: [0.0, 0.0, 0.21]
  gripper: {port: /dev/ttyUSB-gripper}
wrist_camera:
  realsense: {serial: "123456789012"}
""")
    graph = Graph.load()
    specs = {s.name: s.parameters for s in graph.resolve([f"cell:={cell}", "aubo_bridge.arcs.user:=operator"])}
    assert "sim_world" not in specs and specs["aubo_bridge"]["use_sim"] is False  # an argument from the cell
    arm = specs["aubo_bridge"]
    assert (arm["arcs.ip"], arm["arcs.password"], arm["tool_offset"]) == ("192.168.10.20", "123456", [0.0, 0.0, 0.21])
    assert arm["gripper.port"] == "/dev/ttyUSB-gripper"
    assert arm["arcs.user"] == "operator"  # the command line wins over the cell file
    assert specs["wrist_camera"]["realsense.serial"] == "123456789012"  # a string stays a string
    # the path the recorders get is absolute (nodes run in their own working directories)
    os.chdir(tmp_path)
    assert graph.argument_values([f"cell:={cell.name}"])["cell"] == str(cell.resolve())


@pytest.mark.parametrize(
    "text, match",
    [
        ("aubo_bridge: {arcs: {ipp: 1.2.3.4}}", r"aubo_bridge has no parameter 'arcs\.ipp'"),
        ("aubo_brige: {auto_enable: true}", "neither an argument nor a node"),
        ("use_sim: {x: 1}", "takes a value, not a mapping"),
        ("aubo_bridge: 3", "takes a mapping"),
        ("- a\n- b", "top level must be a mapping"),
        ("aubo_bridge: {arcs: {ip: [unclosed", "not valid YAML"),
        ("cell: other.yaml", "cannot name another cell file"),
        ("aubo_bridge: {auto_enable: maybe}", "auto_enable"),
    ],
)
def test_a_bad_cell_file_is_refused_with_the_reason(tmp_path, text, match):
    with pytest.raises(GraphError, match=match):
        Graph.load().resolve([f"cell:={_cell(tmp_path, text)}"])


def test_a_missing_cell_file_is_named():
    with pytest.raises(GraphError, match=r"cell file /no/such/cell\.yaml does not exist"):
        Graph.load().resolve(["cell:=/no/such/cell.yaml"])


def test_the_recorded_cell_has_its_secrets_redacted(tmp_path):
    from libero_workcell.cell_file import REDACTED, load_cell

    graph = Graph.load()
    cell = load_cell(_cell(tmp_path, "aubo_bridge: {arcs: {ip: 10.0.0.2, password: hunter2}}\n"
                                     "policy_node: {policy: {api_token: abc}}"), graph.arguments, graph.node_names())
    recorded = cell.recorded()
    assert recorded["settings"] == {"aubo_bridge.arcs.ip": "10.0.0.2", "aubo_bridge.arcs.password": REDACTED,
                                    "policy_node.policy.api_token": REDACTED}  # fmt: skip
    assert "hunter2" not in json.dumps(recorded) and recorded["path"] == str((tmp_path / "lab_cell.yaml").resolve())
    # the recorder stores the file bring-up already checked, without loading the graph: the same settings
    text = ("use_sim: false\naubo_bridge: {arcs: {ip: 10.0.0.2, password: hunter2}}\n"
            "policy_node: {policy: {api_token: abc}}")
    unchecked = load_cell(_cell(tmp_path, text)).recorded()["settings"]
    assert unchecked == {"use_sim": False, **recorded["settings"]}


def test_every_node_declares_its_parameters_from_its_one_list():
    """No node declares a parameter outside its module's PARAMETERS (the list overrides are checked against)."""
    import ast
    import importlib

    for module in sorted(set(NODE_MODULES_BY_NAME.values())):
        source = Path(importlib.import_module(module).__file__).read_text()
        calls = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Call)
                 and getattr(n.func, "attr", "") == "declare_parameter"]  # fmt: skip
        assert not calls, f"{module} declares parameters outside PARAMETERS (line {calls[0].lineno})"


def test_the_dry_run_prints_the_cells_settings_without_its_secrets(tmp_path, capsys):
    cell = _cell(tmp_path, "use_sim: false\naubo_bridge: {arcs: {ip: 10.0.0.7, password: hunter2}}\n")
    assert cli.main(["bringup", f"cell:={cell}", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "'arcs.ip': '10.0.0.7'" in out and "hunter2" not in out and "'arcs.password': '<redacted>'" in out


def test_a_graph_started_by_ros2_launch_is_found_by_the_operator_commands(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("ROS_DOMAIN_ID", "23")
    _run_launch_file(monkeypatch, {"use_sim": "false"})
    (record,) = run_registry.running()
    assert (record.domain_id, record.pid, record.use_sim) == (23, os.getpid(), False)


# --------------------------------------------------------------------------
# Every graph claims its domain machine-wide (issue 35 item 2); the graphs themselves: tests/graph/test_operator_graph
# --------------------------------------------------------------------------
@contextlib.contextmanager
def _held_by_a_graph(domain: int, name: str) -> Iterator[None]:
    """``domain`` claimed and recorded as a running graph named ``name`` holds it (a sleeping process stands in for
    the graph's, this one holds the claim)."""
    graph = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with dds.claim_exact(domain):
            run_registry.announce(run_registry.GraphRecord(domain, graph.pid, time.time(), True, "deploy_sim", "", (),
                                                           name))  # fmt: skip
            yield
    finally:
        graph.kill()
        graph.wait()


def test_bringup_claims_its_domain_and_refuses_one_another_graph_holds(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    with _held_by_a_graph(37, "workcell"):
        for how, argv in (("--domain-id", ["--domain-id", "37"]), ("--domain-id", ["--domain-id", "37",
                          "loopback_dds:=false"]), ("the inherited ROS_DOMAIN_ID", [])):  # fmt: skip
            monkeypatch.setenv("ROS_DOMAIN_ID", "37")
            assert cli.main(["bringup", "--dry-run", *argv]) == 2
            err = capsys.readouterr().err
            assert f"ROS_DOMAIN_ID 37 ({how}) is held by graph workcell (job deploy_sim, ROS_DOMAIN_ID 37" in err, err
        # two bring-ups whose pids agree modulo 100: the second takes the next free domain, under a name of its own
        monkeypatch.delenv("ROS_DOMAIN_ID")
        monkeypatch.setattr(dds, "per_run_domain_id", lambda pid=None: 37)
        assert cli.main(["bringup", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "ROS_DOMAIN_ID=38 " in out and "named workcell-38" in out, out
    with dds.claim_exact(38):  # the dry run held it only while it ran
        pass


def test_the_launch_claims_its_domain_for_as_long_as_it_runs(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("ROS_DOMAIN_ID", "23")
    _run_launch_file(monkeypatch, {})
    with pytest.raises(dds.DomainHeldError):
        dds.claim_exact(23)  # no other graph, evaluation worker or Ray actor on this machine gets it
    with dds.claim_domain(23) as other:
        assert other.domain_id == 24
    actions = _run_launch_file(monkeypatch, {})  # described again by the same launch: still its own domain
    env_set = {a.name: a.value for a in actions if type(a).__name__ == "SetEnvironmentVariable"}
    assert env_set["ROS_DOMAIN_ID"] == "23"
    (record,) = run_registry.running()
    assert (record.name, record.job, record.domain_id) == ("sim_workcell", "sim_workcell", 23)


def test_the_launch_refuses_a_held_domain_and_without_one_inherited_takes_a_free_one(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    monkeypatch.setenv("ROS_DOMAIN_ID", "23")
    with _held_by_a_graph(23, "cell-a"):
        with pytest.raises(GraphError, match=r"ROS_DOMAIN_ID 23 \(the inherited ROS_DOMAIN_ID\) is held by graph "
                                             r"cell-a \(job deploy_sim"):  # fmt: skip
            _run_launch_file(monkeypatch, {})
        monkeypatch.delenv("ROS_DOMAIN_ID")
        monkeypatch.setattr(dds, "per_run_domain_id", lambda pid=None: 23)  # what launch used to take, unclaimed
        for _ in range(2):  # (described again in the same launch process: the domain it holds)
            actions = _run_launch_file(monkeypatch, {})
            env_set = {a.name: a.value for a in actions if type(a).__name__ == "SetEnvironmentVariable"}
            assert env_set["ROS_DOMAIN_ID"] == "24"
    with pytest.raises(dds.DomainHeldError):
        dds.claim_exact(24)
