"""node_main's first spin: what already waits on a subscription is delivered before the node counts as served (a
lockstep step takes part in the world only then: tests/transports/test_node_steps.py).

rclpy's EventsExecutor installs a subscription's callback at its first spin; rmw_fastrtps counts the waiting
messages before it stores the callback, so one arriving in between is announced only with the next message on
its topic. A lockstep graph sends no next one until the step is done: both failures of the main job's reference run
in CI (a source waiting at sim time 0 for the state of its first tick) were this.
"""

from __future__ import annotations

import uuid

import pytest
from conftest import wait_for

from libero_workcell.contract import Qos
from libero_workcell.ros_qos import qos

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy")


def _message_waits_on(sub, context, timeout_s: float) -> bool:
    """Whether a message waits on ``sub`` (rclpy's wait_for_message looks this way), without taking it."""
    from rclpy.impl.implementation_singleton import rclpy_implementation as _rclpy

    wait_set = _rclpy.WaitSet(1, 0, 0, 0, 0, 0, context.handle)
    wait_set.clear_entities()
    with sub.handle:
        wait_set.add_subscription(sub.handle)
        wait_set.wait(round(timeout_s * 1e9))
        return sub.handle.pointer in wait_set.get_ready_entities("subscription")


def test_a_message_waiting_at_the_first_spin_is_delivered_before_the_node_counts_as_served(rclpy_context) -> None:
    from rclpy.experimental import EventsExecutor
    from std_msgs.msg import String

    from libero_workcell.node_main import attach, served

    topic = f"/first_spin_{uuid.uuid4().hex[:8]}"
    listener = rclpy.create_node(f"listener_{uuid.uuid4().hex[:6]}", context=rclpy_context)
    talker = rclpy.create_node(f"talker_{uuid.uuid4().hex[:6]}", context=rclpy_context)
    got: list[str] = []
    sub = listener.create_subscription(String, topic, lambda m: got.append(m.data), qos(Qos.STATE, lockstep=True))
    pub = talker.create_publisher(String, topic, qos(Qos.STATE, lockstep=True))
    assert wait_for(lambda: pub.get_subscription_count() > 0, timeout=20.0)
    pub.publish(String(data="tick 0"))
    assert _message_waits_on(sub, rclpy_context, 20.0), "the message never reached the listener's reader"
    assert not served(listener).is_set()

    executor = EventsExecutor(context=rclpy_context)
    attach(executor, listener)
    for _ in range(50):  # one handler per spin: the callbacks' installation, then attach's delivery
        executor.spin_once(timeout_sec=0.1)
        if served(listener).is_set():
            break
    assert served(listener).is_set()
    # At the moment the node counts as served its message is in: without the delivery it would come only from
    # the executor's own announcement, queued after it (or never, had it arrived while the callback went in).
    assert got == ["tick 0"]
    for _ in range(5):
        executor.spin_once(timeout_sec=0.05)
    assert got == ["tick 0"], "a message was delivered twice"
    executor.shutdown(timeout_sec=2.0)
    listener.destroy_node()
    talker.destroy_node()
