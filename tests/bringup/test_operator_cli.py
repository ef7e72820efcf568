"""The operator's commands (`workcell call`, `workcell status`): parsing, finding the running graph, and what a
command does with a node that joins late. The commands against a running graph, from a shell that knows nothing of
its domain: tests/graph/test_operator_graph.py (the emulated physical cell, where an operator types them)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from io import StringIO

import pytest
from conftest import ros_probe
from hypothesis import given
from hypothesis import strategies as st

from libero_workcell.contract import Services, Topics, gripper_command_to_coord
from workcell import operator_cli as op
from workcell import run_registry


@pytest.fixture
def registry(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    "command, args, match",
    [
        ("dance", [], "unknown command 'dance'; commands: enable, stop"),
        ("belt", ["fast"], "belt takes one of: start, stop, reset, emergency-stop, speed"),
        ("belt", ["speed"], "belt speed takes one value"),
        ("belt", ["speed", "quick"], "'quick' is not a number"),
        ("belt", ["speed", "nan"], "give a speed from 0"),
        ("belt", ["speed", "-0.1"], "give a speed from 0"),
        ("source", ["robot"], "source takes one of: teleop, policy, expert, none"),
        ("episode", [], "episode takes one of: start, save, discard"),
        ("policy", ["go"], "policy takes one of: start, stop"),
        ("sim", [], "sim takes one of: fault, clear, reset"),
        ("sim", ["fault", " "], "sim fault takes the reason"),
        ("jog", ["dz"], "jog takes AXIS VALUE"),
        ("jog", ["dq", "0.1"], "jog takes AXIS VALUE"),
        ("jog", ["dz", "nan"], "jog value nan is outside"),
        ("jog", ["dz", "0.1", "0"], "jog steps 0: from 1 to 100"),
        ("jog", ["dz", "0.1", "ten"], "'ten' is not a number of STEPS"),
        ("jog", ["dz", "0.1", "gripper", "2"], "jog gripper 2.0 is outside"),
        ("jog", ["dz", "0.1", "5", "gripper", "shut"], "jog: gripper 'shut' is not a number"),
        ("jog", ["gripper", "1", "gripper", "1"], "gripper G with another AXIS only"),
    ],
)
def test_a_bad_command_is_refused_before_anything_is_called(command, args, match):
    with pytest.raises(op.OperatorError, match=match):
        op.steps_of(command, args)


def test_a_bad_command_exits_2_with_the_reason_before_any_graph_is_looked_for(monkeypatch, capsys):
    """`workcell call jog dz nan`, as typed: refused here, nothing is sent (no graph is looked for, none joined)."""
    from workcell import cli

    monkeypatch.setattr(op, "find_targets", lambda *a, **k: pytest.fail("a graph was looked for"))
    monkeypatch.setattr(op, "joined", lambda *a, **k: pytest.fail("a graph was joined"))
    assert cli.main(["call", "jog", "dz", "nan"]) == 2
    out = capsys.readouterr()
    assert "workcell: jog value nan is outside [-1, 1]" in out.err and out.out == ""


def test_stop_all_holds_the_arm_first_and_stops_the_belt_and_any_policy():
    steps = op.steps_of("stop-all", [])
    assert [s.service for s in steps] == [Services.ARM_STOP, Services.CONVEYOR_STOP, Services.POLICY_STOP]
    assert [s.required for s in steps] == [True, True, False]
    # each skipped at once on a graph whose run record lacks its node (a belt checked alone: --only conveyor_driver)
    assert [s.owner for s in steps] == ["aubo_bridge", "conveyor_driver", "policy_node"]
    assert op.steps_of("belt", ["speed", "0.05"])[0].value == 0.05


def test_the_belts_emergency_stop_and_the_simulated_worlds_reset_are_commands():
    """Every service the docs ask an operator to call is a command (test_docs_commands checks each one named)."""
    assert [s.service for s in op.steps_of("belt", ["emergency-stop"])] == [Services.CONVEYOR_EMERGENCY_STOP]
    assert [s.service for s in op.steps_of("sim", ["reset"])] == [Services.SIM_RESET]


def test_a_jog_keeps_the_gripper_unless_it_is_the_axis_or_given():
    """A jog's gripper value was 0: half-closed (LIBERO's command, -1 open, +1 closed)."""
    (step,) = op.steps_of("jog", ["dz", "0.1"])
    assert step.keep_gripper and step.steps == 10 and step.action[:6] == (0, 0, 0.1, 0, 0, 0)
    assert step.describe() == "jog [0.0, 0.0, 0.1, 0.0, 0.0, 0.0, 'kept'] x 10 steps"
    (step,) = op.steps_of("jog", ["gripper", "-1", "3"])
    assert not step.keep_gripper and step.action == (0, 0, 0, 0, 0, 0, -1.0) and step.steps == 3
    (step,) = op.steps_of("jog", ["dx", "-0.2", "gripper", "0.5"])
    assert not step.keep_gripper and step.action == (-0.2, 0, 0, 0, 0, 0, 0.5) and step.steps == 10
    (step,) = op.steps_of("jog", ["dx", "0.2", "4", "gripper", "1"])
    assert step.action[-1] == 1.0 and step.steps == 4


@given(st.floats(0.0, 1.0))
def test_the_kept_gripper_command_is_the_one_that_reaches_the_measured_opening(coord):
    command = op.gripper_command_for(coord)
    assert -1.0 <= command <= 1.0
    assert gripper_command_to_coord(command) == pytest.approx(coord, abs=1e-12)


@given(st.floats(allow_nan=False))
def test_a_kept_gripper_command_is_always_a_valid_action(coord):
    assert -1.0 <= op.gripper_command_for(coord) <= 1.0  # a measurement beyond the stroke gives an end, not a refusal


def test_hold_and_disable_are_stop_and_policy_task_sets_the_instruction():
    assert op.steps_of("hold", []) == op.steps_of("disable", []) == op.steps_of("stop", [])  # held, then disabled
    (step,) = op.steps_of("policy", ["task", "pick up the", "parts"])
    assert (step.node, step.param, step.value) == ("policy_node", "policy.task", "pick up the parts")
    with pytest.raises(op.OperatorError, match="policy task takes the instruction"):
        op.steps_of("policy", ["task", " "])


def test_sim_fault_sets_and_sim_clear_clears_the_simulated_controllers_fault():
    (step,) = op.steps_of("sim", ["fault", "protective stop:", "collision at the tray"])
    assert (step.node, step.param, step.value) == ("sim_world", "arm_fault", "protective stop: collision at the tray")
    (step,) = op.steps_of("sim", ["clear"])
    assert (step.node, step.param, step.value) == ("sim_world", "arm_fault", "")


def test_stop_all_waits_to_discover_a_policy_that_joined_late_and_skips_one_its_graph_never_started(ros_env,
                                                                                                  monkeypatch):
    """The policy's stop is optional (a graph may have no policy), but a shell that just joined the domain has not
    heard of every node yet: it waits for discovery, unless the graph's run record says no policy node runs."""
    from std_srvs.srv import Trigger

    (policy_stop,) = [s for s in op.steps_of("stop-all", []) if not s.required]
    calls: list[str] = []
    started, waiting, answered = threading.Event(), threading.Event(), threading.Event()
    offers = op.GraphClient.offers

    def offers_seen(client: op.GraphClient, service: str) -> bool:  # the operator's process looks for the service
        waiting.set()
        return offers(client, service)

    monkeypatch.setattr(op.GraphClient, "offers", offers_seen)

    def late_policy() -> None:  # offers /policy/stop only once the operator's process is waiting to discover it
        assert waiting.wait(timeout=60.0)
        with ros_probe("late_policy") as node:
            node.create_service(Trigger, Services.POLICY_STOP,
                                lambda req, resp: (calls.append("stop"), setattr(resp, "success", True), resp)[-1])
            started.set()
            answered.wait(timeout=60.0)  # until the answer came back

    with op.joined(int(ros_env["ROS_DOMAIN_ID"])) as client:
        out = StringIO()
        monkeypatch.setattr(op, "SERVICE_WAIT_S", 60.0)
        assert op.run_steps(client, [policy_stop], out, nodes=("aubo_bridge", "conveyor_driver"))
        assert out.getvalue() == "  /policy/stop: skipped (not in this graph)\n"
        assert not waiting.is_set()  # no discovery wait: the run record says the graph has no policy
        thread = threading.Thread(target=late_policy)
        thread.start()
        try:
            out = StringIO()
            assert op.run_steps(client, [policy_stop], out, nodes=("aubo_bridge", "policy_node"))
            assert out.getvalue().startswith("  /policy/stop: ok"), out.getvalue()
            assert calls == ["stop"] and started.is_set()
        finally:
            answered.set()
            thread.join(timeout=60.0)


def test_a_jog_counts_every_answer_of_the_arm_however_late_it_comes(ros_env):
    """On a loaded machine the arm's answers come late: a jog waits for each (it waited a fixed half second after its
    last action and printed "REFUSED: 6 of 10 accepted", exit 1, for a jog the arm took whole)."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from libero_workcell import ros_msgs
    from libero_workcell.contract import Qos
    from libero_workcell.ros_qos import qos

    steps, late = 3, 1.5  # the arm answers the jog's actions this many seconds after the last one
    with ros_probe("late_arm") as arm:
        arm.create_publisher(String, Topics.ACTIVE_SOURCE, qos(Qos.LATCHED)).publish(String(data="policy"))
        results = arm.create_publisher(String, Topics.ACTION_RESULT, qos(Qos.COMMAND))
        taken: list[JointState] = []

        def answer() -> None:
            for m in taken:
                results.publish(ros_msgs.action_result_msg(m.header.stamp, "policy", True, "ok", 0, list(m.position)))

        def on_action(msg: JointState) -> None:
            taken.append(msg)
            if len(taken) == steps:
                threading.Timer(late, answer).start()

        arm.create_subscription(JointState, Topics.ACTION, on_action, qos(Qos.COMMAND))
        with op.joined(int(ros_env["ROS_DOMAIN_ID"])) as client:
            ok, said = client.jog((0.0, 0.0, 0.1, 0.0, 0.0, 0.0, -1.0), steps)
    assert ok and said == "3 of 3 accepted as 'policy'", said


def test_the_one_running_graph_is_found_several_are_refused_unless_named_and_a_stale_record_is_dropped(
        registry, monkeypatch):
    """A command that could reach more than one graph refuses and lists them (name, job, domain, started) unless one
    is named; stop-all goes to every one. (It went to the newest: a stop for another graph on the machine.)"""
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    with pytest.raises(op.OperatorError, match="no running graph found"):
        op.find_targets()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        run_registry.announce(run_registry.GraphRecord(41, dead.pid, time.time(), True, name="gone"))
        run_registry.announce(run_registry.GraphRecord(42, os.getpid(), time.time() - 10, True, "deploy_sim",
                                                       nodes=["aubo_bridge"], name="cell-a"))  # fmt: skip
        (only,) = op.find_targets()  # the dead one's record is ignored, and removed
        assert (only.domain_id, only.nodes, only.record.name) == (42, ("aubo_bridge",), "cell-a")
        assert not (run_registry.runs_dir() / f"{dead.pid}.json").exists()
        monkeypatch.setenv("ROS_DOMAIN_ID", "7")
        assert [t.domain_id for t in op.find_targets()] == [42]  # a running graph before the shell's domain
        assert op.find_targets(domain_id=9) == [op.Target(9)]  # an explicit id always; its nodes are not known
        assert op.find_targets(domain_id=42)[0].nodes == ("aubo_bridge",)

        run_registry.announce(run_registry.GraphRecord(43, other.pid, time.time(), False, "teleop_collect",
                                                       name="cell-b"))  # fmt: skip
        with pytest.raises(op.OperatorError) as refused:
            op.find_targets()
        text = str(refused.value)
        assert text.startswith("2 graphs run on this machine: name one with --name NAME (or --domain-id N)")
        rows = [ln.split() for ln in text.splitlines()[1:]]
        assert [r[:3] for r in rows] == [["name", "job", "domain"], ["cell-b", "teleop_collect", "43"],
                                         ["cell-a", "deploy_sim", "42"]]  # newest first, each with when it started
        assert [t.record.name for t in op.find_targets(every=True)] == ["cell-b", "cell-a"]  # stop-all: both
        assert [t.domain_id for t in op.find_targets("cell-b")] == [43]
        assert [t.record.name for t in op.find_targets(domain_id=42)] == ["cell-a"]
        assert [t.domain_id for t in op.find_targets("cell-a", 42)] == [42]
        with pytest.raises(op.OperatorError, match="no running graph named 'cell-c' on this machine; the running"):
            op.find_targets("cell-c")
        with pytest.raises(op.OperatorError, match="graph cell-b runs on ROS_DOMAIN_ID 43, not 42"):
            op.find_targets("cell-b", 42)
        run_registry.announce(run_registry.GraphRecord(44, other.pid, time.time(), False, name="cell-a"))
        with pytest.raises(op.OperatorError, match="2 running graphs are named 'cell-a': give --domain-id"):
            op.find_targets("cell-a")
    finally:
        other.kill()
        other.wait()
    run_registry.withdraw()
    assert op.find_targets() == [op.Target(7)]  # no graph recorded: the shell's domain


def test_status_hears_a_node_by_what_it_publishes():
    """Each device node and the policy repeat their diagnostics every second; a recorder's come only with a change,
    beside its latched status; the arm's mode and source are latched, its TCP and the belt's state streamed."""
    arm = {Topics.DIAGNOSTICS, Topics.ARM_MODE, Topics.ACTIVE_SOURCE, Topics.TCP_POSE}
    assert op.topics_to_hear(arm) == arm
    assert op.topics_to_hear({Topics.DIAGNOSTICS, Topics.CONVEYOR_STATE}) == {Topics.DIAGNOSTICS, Topics.CONVEYOR_STATE}
    assert op.topics_to_hear({Topics.DIAGNOSTICS, Topics.RECORDER_STATUS}) == {Topics.RECORDER_STATUS}
    assert op.topics_to_hear({Topics.DIAGNOSTICS, Topics.POLICY_STATUS}) == {Topics.DIAGNOSTICS}
    assert op.topics_to_hear({Topics.TELEOP_STATUS}) == set()  # discovered is enough


def test_status_succeeds_only_when_it_heard_every_node_of_the_graph():
    heard = {"nodes": ["aubo_bridge", "conveyor_driver"], "expected": ["aubo_bridge", "conveyor_driver"],
             "missing": [], "diagnostics": {"aubo_bridge": (1, "disabled", {"mode": "disabled"})}}  # fmt: skip
    assert op.heard_all(heard)
    assert not op.heard_all({**heard, "missing": ["conveyor_driver"]})
    assert not op.heard_all({**heard, "expected": [], "diagnostics": {}})  # a graph not recorded, nothing heard
    assert op.heard_all({**heard, "expected": []})
    text = op.format_status({**heard, "missing": ["conveyor_driver"]}, 12, "cell-a")
    assert text.splitlines()[:2] == [
        "graph cell-a on ROS_DOMAIN_ID 12: nodes aubo_bridge, conveyor_driver",
        "  NOT HEARD FROM: conveyor_driver (started with the graph: stopped or hung?)"]
