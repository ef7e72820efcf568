"""A node's steps (transports.node_steps): in lockstep the node takes part in the world's steps only once its
executor serves it and every topic its step reads or publishes is connected; on the wall clock its QoS is the
contract's own. What each node's hand-written readiness check did, in one place."""

from __future__ import annotations

import threading
import uuid

import pytest
from conftest import wait_for

from libero_workcell.contract import Params, Qos

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy")

# How long a node that must not register is watched: ten of its looks at its readiness (stepping.READY_POLL, 0.05
# s), each window opened once what it may see (its executor's service, a connected topic) is in place.
NOT_REGISTERED = 0.5


def _node(context, link: str, lockstep: bool = True):
    node = rclpy.create_node(f"steps_{uuid.uuid4().hex[:6]}", context=context)
    for name, value in ((Params.USE_SIM, True), (Params.LOCKSTEP, lockstep), (Params.SIM_LINK, link)):
        node.declare_parameter(name, value)
    return node


class Spinning:
    """``node`` attached to an EventsExecutor (node_main.attach) and spun on a thread."""

    def __init__(self, context, node) -> None:
        from rclpy.experimental import EventsExecutor

        from libero_workcell.node_main import attach

        self.executor = EventsExecutor(context=context)
        self._stop = threading.Event()
        attach(self.executor, node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5.0)
        self.executor.shutdown(timeout_sec=2.0)


class Cell:
    """A lockstep world, a node with steps reading one topic and publishing another, and a peer node."""

    def __init__(self, context) -> None:
        from std_msgs.msg import String

        from transports.node_steps import NodeSteps
        from transports.sim_lockstep import LockstepWorld

        self.context, self.link = context, f"t{uuid.uuid4().hex[:10]}"
        self.topic_in, self.topic_out = f"/steps_in_{self.link}", f"/steps_out_{self.link}"
        self.world = LockstepWorld(self.link, 10_000_000, 50_000_000)
        self.node, self.peer = _node(context, self.link), rclpy.create_node(f"peer_{self.link}", context=context)
        self.steps = NodeSteps(self.node, 20.0, lambda step: True, inputs=("in",))
        self.steps.read(String, self.topic_in, Qos.STATE, lambda m: None)
        self.out = self.steps.publisher(String, self.topic_out, Qos.COMMAND)
        self.spinning: Spinning | None = None

    def connect_input(self) -> None:
        from std_msgs.msg import String

        self.peer.create_publisher(String, self.topic_in, self.steps.qos(Qos.STATE))
        assert wait_for(lambda: self.node.count_publishers(self.topic_in) > 0, timeout=20.0)

    def connect_output(self) -> None:
        from std_msgs.msg import String

        self.peer.create_subscription(String, self.topic_out, lambda m: None, self.steps.qos(Qos.COMMAND))
        assert wait_for(lambda: self.out.get_subscription_count() > 0, timeout=20.0)

    def registered(self) -> bool:
        from transports.sim_lockstep import registered

        return self.node.get_name() in registered(self.link)

    def spin(self) -> None:
        from libero_workcell.node_main import served

        self.spinning = Spinning(self.context, self.node)
        assert served(self.node).wait(20.0)

    def close(self) -> None:
        self.steps.stop()
        if self.spinning is not None:
            self.spinning.close()
        self.world.close()
        self.node.destroy_node()
        self.peer.destroy_node()


@pytest.fixture
def cell(rclpy_context):
    c = Cell(rclpy_context)
    yield c
    c.close()


def test_a_lockstep_step_joins_the_world_only_once_its_executor_serves_it(cell) -> None:
    cell.connect_input()
    cell.connect_output()
    assert wait_for(lambda: cell.node.count_publishers(cell.topic_in) > 0 and cell.out.get_subscription_count() > 0,
                    timeout=20.0)  # fmt: skip
    cell.steps.start()
    assert not wait_for(cell.registered, timeout=NOT_REGISTERED), "registered before its executor served it"
    cell.spin()
    assert wait_for(cell.registered, timeout=20.0)


@pytest.mark.parametrize("first", ["input", "output"])
def test_a_lockstep_step_joins_the_world_only_once_what_it_reads_and_sends_is_connected(cell, first) -> None:
    connect = {"input": cell.connect_input, "output": cell.connect_output}
    cell.spin()
    cell.steps.start()
    assert not wait_for(cell.registered, timeout=NOT_REGISTERED), "registered with nothing connected"
    connect.pop(first)()
    assert not wait_for(cell.registered, timeout=NOT_REGISTERED), f"registered with only its {first} connected"
    connect.popitem()[1]()
    assert wait_for(cell.registered, timeout=20.0)


def test_a_lockstep_steps_topics_are_reliable_and_transient_local_and_a_wall_clock_ones_the_contracts(
        rclpy_context) -> None:  # fmt: skip
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy

    from transports.node_steps import NodeSteps

    lock = NodeSteps(_node(rclpy_context, "unused"), 20.0, lambda step: True)
    wall = NodeSteps(_node(rclpy_context, "unused", lockstep=False), 20.0, lambda step: True)
    assert lock.lockstep and not wall.lockstep
    sensor = lock.qos(Qos.SENSOR)
    assert sensor.reliability is ReliabilityPolicy.RELIABLE and sensor.durability is DurabilityPolicy.TRANSIENT_LOCAL
    sensor = wall.qos(Qos.SENSOR)
    assert sensor.reliability is ReliabilityPolicy.BEST_EFFORT and sensor.durability is DurabilityPolicy.VOLATILE
    assert wall.loop is None  # nothing runs before start()
