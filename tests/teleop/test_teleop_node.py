"""The teleop node on real rclpy in one process: a NaN trigger, then a NaN robot state, reach its publish path; it
holds, says why on /teleop/status, and never publishes an invalid action (the headset stands in as a fake source)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hostile_json import HOSTILE
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


@pytest.mark.slow
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
    turns: list[int] = []  # each action's turn
    statuses: list[dict] = []

    def on_action(msg: JointState) -> None:
        values, _source, turn = ros_msgs.action_from_msg(msg)
        actions.append(values)
        turns.append(turn)

    feeder.create_subscription(JointState, Topics.ACTION, on_action, qos(Qos.COMMAND))
    arm_pub = feeder.create_publisher(String, Topics.ARM_MODE, qos(Qos.LATCHED))
    arm = lambda mode: arm_pub.publish(String(data=json.dumps({"mode": mode, "fault": ""})))  # noqa: E731
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

    def spin(seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            ex.spin_once(timeout_sec=0.02)

    try:
        node.source = headset
        until("no_state")  # no robot state yet: nothing is sent
        state_pub.publish(ros_msgs.state_msg(STATE, time.time()))
        # issue 35, item 1: the clutch engages only on the enabled arm, from a grip pressed after it was enabled
        arm("disabled")
        until("arm_not_enabled")  # the grip is held, the arm disabled: holding, and saying why
        arm("enabled")
        spin(0.5)
        assert statuses[-1]["status"] == "arm_not_enabled"  # a grip held through the enable does not engage
        headset.grip = 0.0
        until("idle")
        headset.grip = 1.0
        until("following")
        spin(0.2)
        first_turn = turns[-1]
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
        state_pub.publish(ros_msgs.state_msg(STATE, time.time()))
        until("following")
        spin(0.2)
        following_turn = turns[-1]
        assert following_turn > first_turn  # the clutch engaged again after the hold: a new start
        for mode in ("fault", "disabled", "homing"):  # a stop of the arm releases the clutch ...
            arm(mode)
            until("arm_not_enabled")
            arm("enabled")
            spin(0.5)
            assert statuses[-1]["status"] == "arm_not_enabled" and turns[-1] == following_turn, mode
            headset.grip = 0.0  # ... and it follows again only from a fresh grip, under a new turn
            until("idle")
            headset.grip = 1.0
            until("following")
            spin(0.2)
            assert turns[-1] > following_turn, mode
            following_turn = turns[-1]
        # issue 35, item 4: one `[]` on the latched /recorder/status killed teleop_pico (and a restarted one again):
        # every hostile message on the JSON topics it reads is counted and dropped, and it follows on
        rec_pub = feeder.create_publisher(String, Topics.RECORDER_STATUS, qos(Qos.LATCHED))
        for text in HOSTILE:
            for topic, pub in ((Topics.RECORDER_STATUS, rec_pub), (Topics.ARM_MODE, arm_pub)):
                reader, deadline = node._readers[topic], time.monotonic() + WAIT
                before = reader.dropped
                pub.publish(String(data=text))
                while reader.dropped == before and time.monotonic() < deadline:
                    ex.spin_once(timeout_sec=0.01)
                assert reader.dropped == before + 1, (topic, text[:40])
        n, deadline = len(statuses), time.monotonic() + WAIT
        while len(statuses) < n + 2 and time.monotonic() < deadline:  # repeated every second, with the counts then
            ex.spin_once(timeout_sec=0.05)
        assert statuses[-1]["status"] == "following" and turns[-1] == following_turn  # the last good mode stands
        assert statuses[-1]["dropped"] == {Topics.RECORDER_STATUS: len(HOSTILE), Topics.ARM_MODE: len(HOSTILE)}
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
