"""node_main's first spin: what already waits on a subscription is delivered before the node counts as served (a
lockstep step takes part in the world only then: tests/transports/test_node_steps.py).

rclpy's EventsExecutor installs a subscription's callback at its first spin; rmw_fastrtps counts the waiting
messages before it stores the callback, so one arriving in between is announced only with the next message on
its topic. A lockstep graph sends no next one until the step is done: both failures of the main job's reference run
in CI (a source waiting at sim time 0 for the state of its first tick) were this.
"""

from __future__ import annotations

import os
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


# --------------------------------------------------------------------------
# An orphaned node's shutdown is bounded: its launcher died, so nobody escalates if the shutdown hangs
# --------------------------------------------------------------------------
def test_an_orphans_stop_ends_the_process_after_its_bound_and_a_launched_nodes_never(capsys) -> None:
    from libero_workcell.node_main import EXIT_ORPHAN_HUNG, bound_orphan_shutdown

    exits: list[int] = []
    assert bound_orphan_shutdown("n", os.getppid(), 0.01, exits.append) is None  # its launcher is there
    assert bound_orphan_shutdown("n", -1, None, exits.append) is None  # a node whose shutdown is unbounded
    timer = bound_orphan_shutdown("lost", -1, 0.05, exits.append)  # the launcher it had is gone
    assert timer is not None
    timer.join(5.0)
    assert exits == [EXIT_ORPHAN_HUNG]
    assert "lost: its launcher is gone and its shutdown did not end within 0.05 s" in capsys.readouterr().err


HANGING_NODE = """
import sys, time
from rclpy.node import Node
from libero_workcell.node_main import run_node

class Hangs(Node):
    def __init__(self):
        super().__init__("hangs")

    def shutdown(self):
        print("shutting down", flush=True)
        time.sleep(600)

run_node(Hangs, "hangs", orphan_bound=None if sys.argv[1] == "none" else float(sys.argv[1]))
"""

LAUNCHER = """
import subprocess, sys, time
from libero_workcell.processes import die_with_parent
out = open(sys.argv[2], "w")
node = subprocess.Popen([sys.executable, sys.argv[1], sys.argv[3]], stdout=out, stderr=subprocess.STDOUT,
                        preexec_fn=die_with_parent)
print(node.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("bound", ["0.5", "none"])
def test_a_node_whose_launcher_is_killed_ends_within_its_bound_unless_unbounded(tmp_path, ros_env, bound) -> None:
    """The kernel's death signal reaches the node (SIGTERM); its shutdown hangs. With a bound the process ends by
    itself after it; unbounded (the recorder: its saves complete) it is still there after that time."""
    import signal
    import subprocess
    import sys
    import time

    from libero_workcell.processes import NODE_UP, pid_alive

    (tmp_path / "node.py").write_text(HANGING_NODE)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    out = tmp_path / "node.out"
    launcher = subprocess.Popen([sys.executable, str(tmp_path / "launcher.py"), str(tmp_path / "node.py"), str(out),
                                 bound], stdout=subprocess.PIPE, text=True, env=ros_env)  # fmt: skip
    pid = int(launcher.stdout.readline())
    try:
        assert wait_for(lambda: NODE_UP in out.read_text(), 60), out.read_text()
        launcher.kill()
        launcher.wait(10)
        assert wait_for(lambda: "shutting down" in out.read_text(), 20), out.read_text()  # its stop began
        if bound == "none":
            time.sleep(1.5)  # three times the bound the other case has
            assert pid_alive(pid), out.read_text()
        else:
            assert wait_for(lambda: not pid_alive(pid), 30), out.read_text()
            assert "hangs: its launcher is gone and its shutdown did not end within 0.5 s" in out.read_text()
    finally:
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
