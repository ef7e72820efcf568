"""The console node follows the arm's fast state only while a page asks for it (idle, it costs the graph only
the topics it must not miss), and never shows a stale TCP after it stopped following."""

from __future__ import annotations

import contextlib
import json
import threading
import urllib.request

import pytest
from conftest import wait_for
from geometry_msgs.msg import PoseStamped

from console import node as console_node
from libero_workcell.contract import Topics

pytestmark = pytest.mark.ros


def _state(url: str) -> dict:
    with urllib.request.urlopen(f"{url}/api/state", timeout=5) as reply:
        return json.loads(reply.read())


def test_the_tcp_is_followed_only_while_a_page_asks_for_the_state(monkeypatch) -> None:
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import ExternalShutdownException, MultiThreadedExecutor
    from rclpy.parameter import Parameter

    monkeypatch.setattr(console_node, "WATCHED_S", 1.0)  # a page's absence noticed after 1 s, not 5
    looks: list[int] = []  # the node's looks at what the pages ask for (its 0.2 s timer)
    follow_pages = console_node.ConsoleNode._follow_pages

    def counted(self: console_node.ConsoleNode) -> None:
        follow_pages(self)
        looks.append(1)

    monkeypatch.setattr(console_node.ConsoleNode, "_follow_pages", counted)
    context = Context()
    rclpy.init(context=context)
    with contextlib.ExitStack() as stack:
        stack.callback(context.try_shutdown)
        console = console_node.ConsoleNode(context=context, parameter_overrides=[Parameter("port", value=0)])
        stack.callback(console.destroy_node)
        stack.callback(console.server.stop)
        arm = rclpy.create_node("fake_arm", context=context)
        stack.callback(arm.destroy_node)
        pose = arm.create_publisher(PoseStamped, Topics.TCP_POSE, 10)
        executor = MultiThreadedExecutor(context=context)
        executor.add_node(console)
        executor.add_node(arm)

        def spin() -> None:
            with contextlib.suppress(ExternalShutdownException):
                executor.spin()

        thread = threading.Thread(target=spin, daemon=True)
        thread.start()
        stack.callback(thread.join, 5.0)
        stack.callback(executor.shutdown, 2.0)
        msg = PoseStamped()
        msg.pose.position.x, msg.pose.orientation.w = 0.4, 1.0

        # no page: nobody subscribes to the 50 Hz pose, after five looks (a subscription of the first would show)
        assert wait_for(lambda: len(looks) >= 5, 30)
        assert pose.get_subscription_count() == 0
        assert _state(console.server.url)["arm"]["tcp"] is None  # a page opens
        assert wait_for(lambda: pose.get_subscription_count() == 1, 5)

        def followed() -> bool:
            pose.publish(msg)
            return (_state(console.server.url)["arm"]["tcp"] or {}).get("position") == [0.4, 0.0, 0.0]

        assert wait_for(followed, 5, interval=0.1)
        # the page closes: after WATCHED_S the subscription ends and the TCP is unknown, not its last value
        assert wait_for(lambda: pose.get_subscription_count() == 0, 5)
        assert console.model.arm["tcp"] is None
