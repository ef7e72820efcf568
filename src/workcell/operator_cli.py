"""``workcell call`` and ``workcell status``: the operator's commands, on any install (no ``ros2`` needed).

Why: the wheel install has no ``ros2`` command, and every graph runs on loopback DDS on a domain of its own,
so calling ``/aubo/enable`` by hand meant knowing the domain and the profile. These commands find the running
graph (:mod:`workcell.run_registry`, ``--name`` or ``--domain-id``; a command that could reach more than one
graph refuses, but ``stop-all`` stops them all), join its domain on the loopback profile in their own process,
and speak to its nodes through their services and parameters: the same services a lab would call with
``ros2 service call``, listed in ``docs/operator.md``.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from libero_workcell import dds, faults, json_topics, ros_msgs
from libero_workcell.contract import (
    ACTION_HIGH,
    ACTION_LOW,
    ACTION_NAMES,
    ACTION_SOURCES,
    CONTROL_HZ_DEFAULT,
    GRIPPER_CLOSE,
    GRIPPER_OPEN,
    SOURCE_NONE,
    ContractError,
    Params,
    Services,
    Topics,
)
from workcell import run_registry

JOG_STEPS = 10
JOG_MAX_STEPS = 100  # 5 s at 20 Hz: a jog is a check, not a way to drive
SPIN_STEP_S = 0.02  # how often a command looks at what it waits for (a service offered, a topic heard)
SERVICE_WAIT_S = 5.0  # for a service to be discovered on the graph's domain
CALL_TIMEOUT_S = 30.0  # for its answer (homing answers at once; a save answers when the file is closed)
STATUS_TIMEOUT_S = 10.0  # the longest `workcell status` waits to hear from every node of the graph
POLICY_NODE = "policy_node"  # the node name policy_node.node registers
ARM_NODE, BELT_NODE = "aubo_bridge", "conveyor_driver"  # their names in the graph file (config/workcell.yaml)
SIM_WORLD_NODE, ARM_FAULT_PARAM = "sim_world", "arm_fault"  # the simulated controller's fault (sim_cell.world_node)


class OperatorError(RuntimeError):
    """A command that could not be carried out (no graph, no such service, refused): the message says why."""


@dataclass(frozen=True)
class Step:
    """One thing a command does: a Trigger service, a parameter of a node set to a value, or a stream of one
    action (``jog``: ``steps`` control steps of ``action`` as the arm's active source)."""

    service: str = ""
    node: str = ""
    param: str = ""
    value: Any = None
    required: bool = True  # False: a node that is not in this graph is skipped (stop-all on a graph without it)
    owner: str = ""  # the node offering ``service``: skipped at once where the graph's run record lacks it
    action: tuple[float, ...] = ()
    steps: int = 0
    keep_gripper: bool = False  # jog: the action's gripper value is the one that keeps the gripper where it is

    def describe(self) -> str:
        if self.action:
            shown = [*self.action[:-1], "kept"] if self.keep_gripper else list(self.action)
            return f"jog {shown} x {self.steps} steps"
        return self.service or f"{self.node}.{self.param} := {self.value!r}"


def _triggers(*names: str, required: bool = True, owner: str = "") -> list[Step]:
    return [Step(service=n, required=required, owner=owner) for n in names]


# What each command does, in order. stop-all holds the arm first: it is what moves.
COMMANDS: dict[str, tuple[str, Callable[[list[str]], list[Step]]]] = {
    "enable": ("enable the arm (it then follows its active source)", lambda a: _triggers(Services.ARM_ENABLE)),
    "stop": ("hold the arm where it is and refuse actions until enabled again", lambda a: _triggers(Services.ARM_STOP)),
    # what `stop` does is both: the arm holds where it is, and it is disabled until `enable`
    "hold": ("the same as stop", lambda a: _triggers(Services.ARM_STOP)),
    "disable": ("the same as stop", lambda a: _triggers(Services.ARM_STOP)),
    "home": ("move the arm to its home pose (enabled arms only)", lambda a: _triggers(Services.ARM_HOME)),
    "reset": ("acknowledge an arm fault (the arm stays disabled: enable it after)",
              lambda a: _triggers(Services.ARM_RESET_FAULT)),
    "stop-all": ("hold the arm, stop the belt, stop the policy; with no graph named, on every graph of the machine",
                 lambda a: [*_triggers(Services.ARM_STOP, owner=ARM_NODE),
                            *_triggers(Services.CONVEYOR_STOP, owner=BELT_NODE),
                            *_triggers(Services.POLICY_STOP, required=False, owner=POLICY_NODE)]),
    "belt": ("belt start | stop | reset | emergency-stop | speed M_PER_S", lambda a: _belt(a)),
    "source": (f"the arm's active source: one of {', '.join((*ACTION_SOURCES, SOURCE_NONE))}", lambda a: _source(a)),
    "episode": ("episode start | save | discard (the recorder)", lambda a: _episode(a)),
    "policy": ("policy start | stop | task TEXT (the instruction, before start on the physical cell)",
               lambda a: _policy(a)),
    "sim": ('sim fault "REASON" | sim clear | sim reset: put the simulated controller in a protective stop with '
            "REASON (the arm faults), or end it (then reset and enable); or start a new episode of the simulated "
            "world; sim graphs only", lambda a: _sim(a)),
    "jog": (f"jog AXIS VALUE [STEPS] [gripper G]: send one action STEPS times (default {JOG_STEPS}) at the control "
            f"rate as the arm's active source; AXIS one of {', '.join(ACTION_NAMES)}, VALUE in [-1, 1]; the gripper "
            "stays where it is unless AXIS is gripper or G (a gripper command in [-1 open, 1 closed]) is given "
            "(the first motion check, docs/bringup.md)", lambda a: _jog(a)),
}  # fmt: skip
GRIPPER_WORD = "gripper"  # jog's optional last two words: `gripper G`


def _unit(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise OperatorError(f"jog: {what} {text!r} is not a number") from None
    if not ACTION_LOW <= value <= ACTION_HIGH:  # NaN fails too
        raise OperatorError(f"jog {what} {value} is outside [{ACTION_LOW:g}, {ACTION_HIGH:g}]")
    return value


def _jog(args: list[str]) -> list[Step]:
    grip: float | None = None
    if len(args) >= 4 and args[-2] == GRIPPER_WORD:
        grip, args = _unit(args[-1], "gripper"), args[:-2]
    if len(args) not in (2, 3) or args[0] not in ACTION_NAMES or (grip is not None and args[0] == GRIPPER_WORD):
        raise OperatorError(f"jog takes AXIS VALUE [STEPS] [gripper G], AXIS one of {', '.join(ACTION_NAMES)} "
                            "(gripper G with another AXIS only)")  # fmt: skip
    value = _unit(args[1], "value")
    try:
        steps = int(args[2]) if len(args) == 3 else JOG_STEPS
    except ValueError:
        raise OperatorError(f"jog: {args[2]!r} is not a number of STEPS") from None
    if not 1 <= steps <= JOG_MAX_STEPS:
        raise OperatorError(f"jog steps {steps}: from 1 to {JOG_MAX_STEPS}")
    action = [0.0] * len(ACTION_NAMES)
    action[ACTION_NAMES.index(args[0])] = value
    keep = args[0] != GRIPPER_WORD and grip is None
    if grip is not None:
        action[-1] = grip
    return [Step(action=tuple(action), steps=steps, keep_gripper=keep)]


def gripper_command_for(coord: float) -> float:
    """The gripper action that keeps the gripper at ``coord``: the inverse of contract.gripper_command_to_coord
    (coordinate 0 open, 1 closed; command -1 open, +1 closed). Why: a jog's zero would half-close the gripper."""
    return min(ACTION_HIGH, max(ACTION_LOW, GRIPPER_OPEN + float(coord) * (GRIPPER_CLOSE - GRIPPER_OPEN)))


def _one(args: list[str], choices: Sequence[str], what: str) -> str:
    if len(args) != 1 or args[0] not in choices:
        raise OperatorError(f"{what} takes one of: {', '.join(choices)}")
    return args[0]


def _belt(args: list[str]) -> list[Step]:
    if args[:1] == ["speed"]:
        if len(args) != 2:
            raise OperatorError("belt speed takes one value in m/s")
        try:
            speed = float(args[1])
        except ValueError:
            raise OperatorError(f"belt speed: {args[1]!r} is not a number (m/s)") from None
        if not 0.0 <= speed < 1.0 or speed != speed:
            raise OperatorError(f"belt speed {speed} m/s: give a speed from 0 (the drive refuses beyond its limit)")
        return [Step(node="conveyor_driver", param=Params.BELT_SPEED, value=speed)]
    verb = _one(args, ("start", "stop", "reset", "emergency-stop", "speed"), "belt")
    return _triggers({"start": Services.CONVEYOR_START, "stop": Services.CONVEYOR_STOP,
                      "reset": Services.CONVEYOR_RESET_FAULT,
                      "emergency-stop": Services.CONVEYOR_EMERGENCY_STOP}[verb])  # fmt: skip


def _source(args: list[str]) -> list[Step]:
    source = _one(args, (*ACTION_SOURCES, SOURCE_NONE), "source")
    return [Step(node="aubo_bridge", param=Params.ACTIVE_SOURCE, value=source)]


def _episode(args: list[str]) -> list[Step]:
    verb = _one(args, ("start", "save", "discard"), "episode")
    return _triggers({"start": Services.RECORDER_START, "save": Services.RECORDER_SAVE,
                      "discard": Services.RECORDER_DISCARD}[verb])  # fmt: skip


def _policy(args: list[str]) -> list[Step]:
    if args[:1] == ["task"]:
        from policy_node.config import TASK_PARAM

        text = " ".join(args[1:]).strip()
        if not text:
            raise OperatorError('policy task takes the instruction: workcell call policy task "pick up the ..."')
        return [Step(node=POLICY_NODE, param=TASK_PARAM, value=text)]
    verb = _one(args, ("start", "stop", "task"), "policy")
    return _triggers(Services.POLICY_START if verb == "start" else Services.POLICY_STOP)


def _sim(args: list[str]) -> list[Step]:
    if args[:1] == ["fault"]:
        text = " ".join(args[1:]).strip()
        if not text:
            raise OperatorError('sim fault takes the reason: workcell call sim fault "protective stop: collision"')
        return [Step(node=SIM_WORLD_NODE, param=ARM_FAULT_PARAM, value=text)]
    if _one(args, ("fault", "clear", "reset"), "sim") == "reset":
        return _triggers(Services.SIM_RESET)
    return [Step(node=SIM_WORLD_NODE, param=ARM_FAULT_PARAM, value="")]


def steps_of(command: str, args: Sequence[str]) -> list[Step]:
    """What ``command args`` does, or :class:`OperatorError` naming the valid commands."""
    if command not in COMMANDS:
        raise OperatorError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")
    return COMMANDS[command][1](list(args))


@dataclass(frozen=True)
class Target:
    """A graph a command goes to: its domain, and its run record where it has one."""

    domain_id: int
    record: run_registry.GraphRecord | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes it started (empty: not known)."""
        return self.record.nodes if self.record is not None else ()

    def describe(self) -> str:
        return f"graph {self.record.describe()}" if self.record is not None else f"ROS_DOMAIN_ID {self.domain_id}"


def find_targets(name: str | None = None, domain_id: int | None = None, every: bool = False) -> list[Target]:
    """The graphs a command goes to: the one named (``name``, or ``domain_id``), else the one running graph, else
    (no graph recorded) an inherited ``ROS_DOMAIN_ID``. Several running graphs and none named: every one if
    ``every`` (stop-all), else :class:`OperatorError` listing them (a command must never reach a graph the operator
    did not mean)."""
    runs = run_registry.running()
    if name is not None:
        named = [r for r in runs if r.name == name and domain_id in (None, r.domain_id)]
        if len(named) == 1:
            return [Target(named[0].domain_id, named[0])]
        if len(named) > 1:
            raise OperatorError(f"{len(named)} running graphs are named {name!r}: give --domain-id too; "
                                f"{_listing(named)}")  # fmt: skip
        if other := next((r for r in runs if r.name == name), None):
            raise OperatorError(f"graph {name} runs on ROS_DOMAIN_ID {other.domain_id}, not {domain_id}")
        raise OperatorError(f"no running graph named {name!r} on this machine; {_listing(runs)}")
    if domain_id is not None:
        return [Target(domain_id, next((r for r in runs if r.domain_id == domain_id), None))]
    if len(runs) == 1 or (runs and every):
        return [Target(r.domain_id, r) for r in runs]
    if runs:
        raise OperatorError(f"{len(runs)} graphs run on this machine: name one with --name NAME (or --domain-id N); "
                            f"{_listing(runs)}")  # fmt: skip
    inherited = dds.inherited_domain_id()
    if inherited is not None:
        return [Target(inherited)]
    raise OperatorError("no running graph found (start one with `workcell bringup` or `ros2 launch libero_workcell "
                        "...`), and no --domain-id or ROS_DOMAIN_ID given")  # fmt: skip


def _listing(runs: Sequence[run_registry.GraphRecord]) -> str:
    return f"the running graphs:\n{run_registry.table(runs)}" if runs else "no graph runs"


class GraphClient:
    """An rclpy node of its own on the graph's domain, for one command."""

    def __init__(self, node: Any, executor: Any) -> None:
        self.node, self.executor = node, executor

    def spin(self, seconds: float, until: Callable[[], Any] = lambda: False) -> None:
        """Serve callbacks for ``seconds``, or until ``until()`` holds."""
        deadline = time.monotonic() + seconds
        while not until() and (left := deadline - time.monotonic()) > 0:
            self.executor.spin_once(timeout_sec=min(SPIN_STEP_S, left))

    def wait_for_service(self, client: Any, timeout: float = SERVICE_WAIT_S) -> bool:
        """Whether ``client``'s service is offered, asked every SPIN_STEP_S for up to ``timeout`` s (rclpy's own
        ``wait_for_service`` sleeps a quarter of a second between looks: a command waited that much more)."""
        self.spin(timeout, until=client.service_is_ready)
        return bool(client.service_is_ready())

    def _wait(self, future: Any, timeout: float) -> Any:
        self.executor.spin_until_future_complete(future, timeout_sec=timeout)
        if not future.done():
            raise OperatorError(f"no answer within {timeout:g} s")
        return future.result()

    def trigger(self, service: str, timeout: float = CALL_TIMEOUT_S) -> tuple[bool, str]:
        from std_srvs.srv import Trigger

        client = self.node.create_client(Trigger, service)
        try:
            if not self.wait_for_service(client):
                raise OperatorError(f"{service} is not offered in this graph (is its node running?)")
            reply = self._wait(client.call_async(Trigger.Request()), timeout)
            return bool(reply.success), str(reply.message)
        finally:
            self.node.destroy_client(client)

    def set_parameter(self, node: str, name: str, value: Any) -> tuple[bool, str]:
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter

        client = self.node.create_client(SetParameters, f"/{node}/set_parameters")
        try:
            if not self.wait_for_service(client):
                raise OperatorError(f"node {node} is not running in this graph")
            request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
            result = self._wait(client.call_async(request), CALL_TIMEOUT_S).results[0]
            return bool(result.successful), str(result.reason) or f"{name} = {value!r}"
        finally:
            self.node.destroy_client(client)

    def active_source(self) -> str:
        """The arm's active source, from its latched topic."""
        from std_msgs.msg import String

        from libero_workcell.contract import Qos
        from libero_workcell.ros_qos import qos

        got: list[str] = []
        sub = self.node.create_subscription(String, Topics.ACTIVE_SOURCE, lambda m: got.append(m.data),
                                            qos(Qos.LATCHED))  # fmt: skip
        try:
            self.spin(SERVICE_WAIT_S, until=lambda: got)
        finally:
            self.node.destroy_subscription(sub)
        if not got:
            raise OperatorError("the arm bridge's active source was not heard (is aubo_bridge running?)")
        return got[-1]

    def gripper_coord(self) -> float:
        """The gripper's measured coordinate (0 open, 1 closed): the last element of the arm's 7-D state."""
        from sensor_msgs.msg import JointState

        from libero_workcell.contract import Qos
        from libero_workcell.ros_qos import qos

        got: list[float] = []
        sub = self.node.create_subscription(JointState, Topics.ROBOT_STATE,
                                            lambda m: got.extend(m.position[-1:]), qos(Qos.STATE))  # fmt: skip
        try:
            self.spin(SERVICE_WAIT_S, until=lambda: got)
        finally:
            self.node.destroy_subscription(sub)
        if not got or not math.isfinite(got[-1]):
            raise OperatorError(f"the arm's state ({Topics.ROBOT_STATE}) was not heard: the gripper's opening is not "
                                "known (is aubo_bridge running?)")  # fmt: skip
        return float(got[-1])

    def jog(self, action: Sequence[float], steps: int, keep_gripper: bool = False) -> tuple[bool, str]:
        """Publish ``action`` ``steps`` times at the control rate as the active source; the arm's results. With
        ``keep_gripper`` the action's gripper value is the command that keeps the gripper at its measured opening."""
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from libero_workcell.contract import Qos
        from libero_workcell.ros_qos import qos

        source = self.active_source()
        if source not in ACTION_SOURCES:
            return False, f"the arm's active source is {source!r}: `workcell call source teleop` first"
        kept = ""
        if keep_gripper:
            coord = self.gripper_coord()
            action = (*action[:-1], gripper_command_for(coord))
            kept = f"; gripper kept at {coord:.3f} (command {action[-1]:+.3f})"
        results: list[ros_msgs.ActionOutcome] = []

        def on_result(msg: String) -> None:
            with suppress(ContractError):  # not an action result: not this jog's
                results.append(ros_msgs.action_result_from_msg(msg))

        sub = self.node.create_subscription(String, Topics.ACTION_RESULT, on_result, qos(Qos.COMMAND))
        pub = self.node.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND))
        try:
            self.spin(SERVICE_WAIT_S, until=lambda: pub.get_subscription_count() > 0)
            period = 1.0 / CONTROL_HZ_DEFAULT
            start = time.monotonic()
            turn = ros_msgs.new_turn()  # a jog is a source started by the operator (docs/operator.md)
            for k in range(steps):
                pub.publish(ros_msgs.action_msg(action, source, turn=turn))
                self.spin(start + (k + 1) * period - time.monotonic())
            # every action's answer, however late a loaded machine delivers it (a fixed half second printed
            # "REFUSED: 6 of 10 accepted", exit 1, for a jog the arm took whole)
            self.spin(SERVICE_WAIT_S, until=lambda: sum(r.source == source for r in results) >= steps)
        finally:
            self.node.destroy_publisher(pub)
            self.node.destroy_subscription(sub)
        mine = [r for r in results if r.source == source]
        accepted = sum(1 for r in mine if r.accepted)
        reasons = sorted({r.reason for r in mine if not r.accepted})
        ok = accepted == steps
        return ok, f"{accepted} of {steps} accepted as {source!r}{kept}" + (f"; refused: {'; '.join(reasons)}"
                                                                             if reasons else "")  # fmt: skip

    def offers(self, service: str) -> bool:
        """Whether ``service`` is on the graph: waits for discovery (a process that just joined has not heard of
        every node yet)."""
        def found() -> bool:
            return any(name == service for name, _ in self.node.get_service_names_and_types())

        self.spin(SERVICE_WAIT_S, until=found)
        return found()

    def node_names(self) -> set[str]:
        return {name for name, _ in self.node.get_node_names_and_namespaces()}


@contextmanager
def joined(domain_id: int) -> Iterator[GraphClient]:
    """A :class:`GraphClient` on ``domain_id`` over the loopback profile (this process joins it)."""
    dds.apply_loopback_env(domain_id)
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor

    context = Context()
    rclpy.init(context=context, domain_id=domain_id)  # this context's own: several graphs may be joined at once
    node = rclpy.create_node(f"workcell_operator_{os.getpid()}_{domain_id}", context=context)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        yield GraphClient(node, executor)
    finally:
        executor.shutdown(timeout_sec=1.0)
        node.destroy_node()
        context.try_shutdown()


def run_steps(client: GraphClient, steps: Sequence[Step], out: Any = sys.stdout, nodes: Sequence[str] = ()) -> bool:
    """Carry out ``steps`` in order, each reported on a line; every step is tried (stop-all must reach the belt
    even when the arm refused). True if all that ran succeeded. ``nodes``: the nodes the graph started, if known
    (its run record)."""
    all_ok = True
    for step in steps:
        try:
            absent = bool(nodes) and bool(step.owner) and step.owner not in nodes  # the run record says so
            if absent or (not step.required and not client.offers(step.service)):
                print(f"  {step.describe()}: skipped (not in this graph)", file=out, flush=True)
                continue
            if step.action:
                ok, message = client.jog(step.action, step.steps, step.keep_gripper)
            elif step.service:
                ok, message = client.trigger(step.service)
            else:
                ok, message = client.set_parameter(step.node, step.param, step.value)
        except OperatorError as exc:
            ok, message = False, str(exc)
        all_ok &= ok
        print(f"  {step.describe()}: {'ok' if ok else 'REFUSED'}: {message}", file=out, flush=True)
    return all_ok


def run_on_each(targets: Sequence[Target], steps: Sequence[Step], out: Any = sys.stdout) -> list[Target]:
    """Carry out ``steps`` on every graph of ``targets`` at once (stop-all with no graph named: no graph waits for
    another's answers), each graph's lines together under its name; the graphs where a step was refused."""
    refused: list[Target] = []
    with ExitStack() as stack:
        clients = [stack.enter_context(joined(t.domain_id)) for t in targets]

        def one(target: Target, client: GraphClient) -> tuple[Target, bool, str]:
            lines = io.StringIO()
            ok = run_steps(client, steps, lines, nodes=target.nodes)
            return target, ok, lines.getvalue()

        with ThreadPoolExecutor(len(targets)) as pool:
            for target, ok, lines in pool.map(one, targets, clients):
                print(f"workcell: on {target.describe()}:\n{lines}", file=out, end="", flush=True)
                if not ok:
                    refused.append(target)
    return refused


# ------------------------------------------------------------------------------------------------ status
# What `workcell status` must hear from a node of the graph before it shows the screen, by what the node publishes:
# a recorder (its status is latched; its diagnostics come only with a change) its status; any other node its
# diagnostics if it publishes them (each device and the policy repeat them every second); and every topic it
# publishes of these, each latched or streamed (the arm's mode, source and TCP, the belt's state). A node that
# publishes none of them is heard once discovered.
HEARD_BY_STATUS: tuple[str, ...] = (Topics.RECORDER_STATUS,)
ALWAYS_HEARD = frozenset({Topics.ARM_MODE, Topics.ACTIVE_SOURCE, Topics.TCP_POSE, Topics.CONVEYOR_STATE})


def topics_to_hear(published: set[str]) -> set[str]:
    """Of the topics a node publishes (those status follows), the ones a message must have come on from it."""
    if status := published.intersection(HEARD_BY_STATUS):
        return status
    return (published & {Topics.DIAGNOSTICS}) | (published & ALWAYS_HEARD)


def snapshot(client: GraphClient, seconds: float, expected: Sequence[str] = (),
             timeout: float = STATUS_TIMEOUT_S) -> dict[str, Any]:
    """What the graph publishes over ``seconds``, and longer (up to ``timeout``) until every ``expected`` node was
    heard from (:func:`topics_to_hear`; with none expected, until a diagnostics message came): the newest of each
    status topic, diagnostics per name; ``missing`` names the expected nodes not heard from."""
    from diagnostic_msgs.msg import DiagnosticArray
    from geometry_msgs.msg import PoseStamped
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from libero_workcell.contract import Qos
    from libero_workcell.ros_qos import qos

    seen: dict[str, Any] = {"diagnostics": {}}
    heard: set[tuple[str, bytes]] = set()  # (topic, the publisher's gid): which node said something where

    def on_diag(msg: DiagnosticArray) -> None:
        for st in msg.status:
            seen["diagnostics"][st.name] = (ros_msgs.diag_level(st), st.message, {kv.key: kv.value for kv in st.values})

    def on_json(key: str) -> Callable[[String], None]:
        def cb(msg: String) -> None:
            try:  # bounded, any depth refused (libero_workcell.json_topics); shown as it came when not JSON
                seen[key] = json_topics.parse(msg.data, key)
            except ContractError:
                seen[key] = msg.data[:200]

        return cb

    n = client.node
    followed: list[str] = []

    def follow(msg_type: Any, topic: str, callback: Callable[[Any], None], profile: Any) -> None:
        def on(msg: Any, info: Any) -> None:  # rclpy hands a two-argument callback the message's info
            gid = (info.get("publisher_gid") or {}).get("data")
            if gid is not None:
                heard.add((topic, bytes(gid)))
            callback(msg)

        n.create_subscription(msg_type, topic, on, profile)
        followed.append(topic)

    follow(DiagnosticArray, Topics.DIAGNOSTICS, on_diag, qos(Qos.DIAGNOSTICS))
    follow(PoseStamped, Topics.TCP_POSE, lambda m: seen.__setitem__("tcp", (
        m.pose.position.x, m.pose.position.y, m.pose.position.z)), qos(Qos.STATE))  # fmt: skip
    follow(String, Topics.ACTIVE_SOURCE, lambda m: seen.__setitem__("source", m.data), qos(Qos.LATCHED))
    follow(JointState, Topics.CONVEYOR_STATE, lambda m: seen.__setitem__(
        "belt", (list(m.position), list(m.velocity))), qos(Qos.STATE))  # fmt: skip
    for key, topic in (("recorder", Topics.RECORDER_STATUS), ("episode", Topics.SIM_EPISODE), ("arm", Topics.ARM_MODE)):
        follow(String, topic, on_json(key), qos(Qos.LATCHED))
    for key, topic in (("policy", Topics.POLICY_STATUS), ("teleop", Topics.TELEOP_STATUS)):
        follow(String, topic, on_json(key), qos(Qos.STATE))

    def unheard() -> list[str]:
        names = client.node_names()
        publishers: dict[str, dict[str, set[bytes]]] = {}  # node -> topic -> its publishers' gids
        for topic in followed:
            for info in n.get_publishers_info_by_topic(topic):
                publishers.setdefault(info.node_name, {}).setdefault(topic, set()).add(bytes(info.endpoint_gid))

        def is_heard(node: str) -> bool:
            mine = publishers.get(node, {})
            return node in names and all(any((t, g) in heard for g in mine[t]) for t in topics_to_hear(set(mine)))

        return [node for node in expected if not is_heard(node)]

    def complete() -> bool:
        return not unheard() if expected else bool(seen["diagnostics"])

    client.spin(seconds)  # at least `seconds`; longer, up to `timeout`, until every node the graph runs was heard
    client.spin(max(0.0, timeout - seconds), until=complete)
    seen["nodes"] = sorted(client.node_names() - {n.get_name()})
    seen["expected"], seen["missing"] = list(expected), unheard()
    return seen


def heard_all(seen: dict[str, Any]) -> bool:
    """Whether the snapshot heard every node it expected (none expected: whether any diagnostics came at all)."""
    return not seen.get("missing") and bool(seen.get("expected") or seen.get("diagnostics"))


# Which devices' faults each diagnostics name reports (libero_workcell.faults): a gripper's come through the arm.
def format_status(seen: dict[str, Any], domain_id: int, name: str = "") -> str:
    """One screen: the nodes, each device's state (faults first, each with its code), the source, belt, recording,
    policy, and what to do about each fault (libero_workcell.faults)."""
    found: dict[str, faults.Fault] = {}  # code -> fault, in the order shown

    def coded(text: str, devices: Sequence[str]) -> str:
        fault = faults.classify(text, devices) if text and devices else None
        if fault is None:
            return ""
        found.setdefault(fault.code, fault)
        return f" [{fault.code}]"

    graph = f"graph {name}" if name else "graph"
    lines = [f"{graph} on ROS_DOMAIN_ID {domain_id}: nodes {', '.join(seen.get('nodes') or ['none'])}"]
    if seen.get("missing"):
        lines.append(f"  NOT HEARD FROM: {', '.join(seen['missing'])} (started with the graph: stopped or hung?)")
    diags = seen.get("diagnostics", {})
    for name, (level, message, values) in sorted(diags.items(), key=lambda kv: -kv[1][0]):
        detail = ", ".join(f"{k} {values[k]}" for k in ("mode", "fault", "active_source") if values.get(k))
        shown = ros_msgs.DIAG_LEVEL_NAMES.get(level, level)
        code = ""
        if level >= ros_msgs.DIAG_WARN:  # a camera's cause is in its backend's last error
            text = f"{message} {values.get('last_error') or ''}".strip()
            code = coded(text, faults.diagnostic_devices(name))
        lines.append(f"  {shown:5s} {name}: {message}{code}" + (f" ({detail})" if detail else ""))
    if not diags:
        lines.append("  no diagnostics received (is the graph running on this domain?)")
    arm = seen.get("arm") if isinstance(seen.get("arm"), dict) else {}
    if arm or "source" in seen:
        fault = arm.get("fault") or "none"
        code = coded(arm.get("fault") or "", (faults.ARM, faults.GRIPPER))
        source = seen.get("source", "unknown")
        lines.append(f"  arm: {arm.get('mode', 'unknown')}, fault {fault}{code}, source {source}")
    if "tcp" in seen:
        lines.append("  tcp: x {:.4f} y {:.4f} z {:.4f} m".format(*seen["tcp"]))
    if "belt" in seen:
        pos, vel = (v[0] if v else float("nan") for v in seen["belt"])
        lines.append(f"  belt: {vel:.3f} m/s (position {pos:.3f} m)")
    for key in ("recorder", "policy", "teleop", "episode"):  # (the arm's mode is on its own line)
        if key in seen:
            value = seen[key]
            if key == "episode" and isinstance(value, dict):
                value = {"episode": value.get("episode"), "sim_time": round(float(value.get("sim_time") or 0), 2),
                         "done": value.get("done"), "placed": (value.get("metrics") or {}).get("placed")}
            lines.append(f"  {key}: {json.dumps(value) if not isinstance(value, str) else value}"[:400])
    recorder, teleop = seen.get("recorder"), seen.get("teleop")
    if isinstance(recorder, dict) and recorder.get("error"):
        lines.append(f"  recorder error: {recorder['error']}{coded(str(recorder['error']), (faults.RECORDER,))}")
    if isinstance(teleop, dict) and (code := coded(str(teleop.get("status", "")), (faults.TELEOP,))):
        lines.append(f"  teleop holds the arm: {teleop.get('status')}{code}")
    if found:
        lines.append("  what to do:")
        lines += [f"    {f.code}: {f.recovery}" for f in found.values()]
    return "\n".join(lines)
