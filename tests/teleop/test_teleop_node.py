"""The teleop node on real rclpy in one process: a NaN trigger, then a NaN robot state, reach its publish path; it
holds, says why on /teleop/status, and never publishes an invalid action (the headset stands in as a fake source)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from teleop_states import STATE

from libero_workcell import ros_msgs
from libero_workcell.contract import GRIPPER_CLOSE, Qos, Topics, validate_action
from libero_workcell.ros_qos import qos
from teleop_pico.mapping import ControllerSample

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy")
WAIT = 30.0  # s: generous, for a loaded machine


class FakeHeadset:
    """A controller held still, clutch squeezed; the test sets the trigger and grip it reports."""

    def __init__(self) -> None:
        self.stamp, self.trigger, self.grip = 0, 1.0, 1.0

    def read(self) -> ControllerSample:
        self.stamp += 1
        return ControllerSample(self.stamp, (0.0, 1.0, -0.3, 0.0, 0.0, 0.0, 1.0), self.trigger, self.grip, False, False)

    def close(self) -> None:
        pass


def test_a_bad_headset_sample_or_robot_state_holds_and_is_reported_never_published() -> None:
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import JointState
    from std_msgs.msg import String

    from teleop_pico.node import TeleopNode

    rclpy.init(args=["--ros-args", "-p", "source:=scripted", "-p", "session_file:=teleop/d2s_scripted_session.json",
                     "-p", "max_state_age:=60.0"])  # fmt: skip  (no recorder: the script never starts)
    node = TeleopNode()
    feeder = rclpy.create_node("teleop_feeder")
    actions: list[np.ndarray] = []
    statuses: list[dict] = []
    feeder.create_subscription(JointState, Topics.ACTION, lambda m: actions.append(np.array(m.position)),
                               qos(Qos.COMMAND))  # fmt: skip
    feeder.create_subscription(String, Topics.TELEOP_STATUS, lambda m: statuses.append(json.loads(m.data)),
                               qos(Qos.STATE))  # fmt: skip
    state_pub = feeder.create_publisher(JointState, Topics.ROBOT_STATE, qos(Qos.STATE))
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    ex.add_node(feeder)
    headset = FakeHeadset()

    def until(status: str) -> dict:
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.02)
            if statuses and statuses[-1]["status"] == status:
                return statuses[-1]
        raise AssertionError(f"no {status!r} on /teleop/status within {WAIT} s; got {statuses}")

    try:
        node.source = headset
        until("no_state")  # no robot state yet: nothing is sent
        state_pub.publish(ros_msgs.state_msg(STATE, time.time()))
        until("following")
        headset.trigger = float("nan")
        held = until("bad_input")
        assert "trigger" in held["fault"] and held["holds"]["bad_input"] >= 1
        headset.trigger = 1.0
        until("following")
        state_pub.publish(ros_msgs.state_msg(np.r_[np.nan, STATE[1:]], time.time()))
        held = until("bad_state")
        assert "tcp_x" in held["fault"] and held["holds"]["bad_state"] >= 1 and held["holds"]["bad_input"] >= 1
        n, deadline = len(actions), time.monotonic() + WAIT
        while len(actions) < n + 3 and time.monotonic() < deadline:  # the hold is published while the state is bad
            ex.spin_once(timeout_sec=0.02)
        # a reader that joins after the last change (a console, a session log) still gets the status: repeated
        late: list[dict] = []
        feeder.create_subscription(String, Topics.TELEOP_STATUS, lambda m: late.append(json.loads(m.data)),
                                   qos(Qos.STATE))  # fmt: skip
        deadline = time.monotonic() + WAIT
        while not late and time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.05)
        assert late and late[-1]["status"] == "bad_state", late
    finally:
        node.shutdown()
        ex.shutdown()
        node.destroy_node()
        feeder.destroy_node()
        rclpy.try_shutdown()
    assert actions
    for a in actions:
        validate_action(a)  # never an invalid action
    first_close = next(i for i, a in enumerate(actions) if a[6] == GRIPPER_CLOSE)
    assert all(a[6] == GRIPPER_CLOSE for a in actions[first_close:])  # the NaN trigger never opened the gripper
    np.testing.assert_array_equal(actions[-1], [0, 0, 0, 0, 0, 0, GRIPPER_CLOSE])
