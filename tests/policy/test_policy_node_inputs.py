"""policy_node's subscription callbacks drop a bad message (counted, reported, logged) and the node lives.

rclpy re-raises an exception from a callback and the node ends: an Image whose data is not height x width x 3
raised ValueError out of ``_on_image``, and a state with a NaN went on into the observation sent to the server.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from sensor_msgs.msg import Image
from std_msgs.msg import String

from libero_workcell import ros_msgs
from libero_workcell.contract import ContractError
from libero_workcell.loopback import free_port
from policy_node.inputs import LOG_THROTTLE_S, InputDrops, image_from_msg, state_from_msg

STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
RGB = np.zeros((4, 5, 3), np.uint8)


def image(data: bytes | None = None, height: int = 4, width: int = 5, encoding: str = "rgb8") -> Image:
    msg = ros_msgs.image_msg(RGB, time.time(), "external")
    msg.height, msg.width, msg.encoding = height, width, encoding
    if data is not None:
        msg.data = data
    return msg


class FakeLogger:
    def __init__(self) -> None:
        self.errors: list[str] = []

    def error(self, text: str) -> None:
        self.errors.append(text)


def test_a_good_state_and_image_decode() -> None:
    np.testing.assert_array_equal(state_from_msg(ros_msgs.state_msg(STATE, time.time())), STATE)
    assert image_from_msg(image()).shape == (4, 5, 3)


@pytest.mark.parametrize(
    "values, reason",
    [([np.nan, 0, 0, 0, 0, 0, 0], "non-finite values in \\['tcp_x'\\]"), ([0] * 6 + [np.inf], "in \\['gripper'\\]")],
)  # fmt: skip
def test_a_non_finite_state_is_refused(values, reason) -> None:
    with pytest.raises(ContractError, match=reason):
        state_from_msg(ros_msgs.state_msg(np.array(values, float), time.time()))


def test_a_state_of_another_length_or_names_is_refused() -> None:
    msg = ros_msgs.state_msg(STATE, time.time())
    msg.position = [0.0] * 6
    with pytest.raises(ContractError, match="state has 6 positions, not 7"):
        state_from_msg(msg)
    msg.name = ["a"] * 7
    with pytest.raises(ContractError, match="state names"):
        state_from_msg(msg)


@pytest.mark.parametrize(
    "msg, reason",
    [(image(bytes(59)), "4 x 5 x 3 has 59 bytes of data \\(needs 60"), (image(bytes(61)), "has 61 bytes"),
     (image(b"", 0, 0), "0 x 0 x 3 has 0 bytes"), (image(bytes(60), 0, 5), "needs 0, none empty"),
     (image(bytes(60), 4, 5, "bgr8"), "encoding 'bgr8'")],
)  # fmt: skip
def test_an_image_whose_data_is_not_its_size_is_refused(msg, reason) -> None:
    with pytest.raises(ContractError, match=reason):
        image_from_msg(msg)


def test_drops_are_counted_per_input_with_the_last_reason_and_logged_rate_limited_per_input() -> None:
    log, now = FakeLogger(), [100.0]
    drops = InputDrops(log, clock=lambda: now[0])
    assert drops.decode("external", image_from_msg, image()) is not None and not drops.counts
    assert drops.decode("external", image_from_msg, image(bytes(3))) is None
    now[0] += LOG_THROTTLE_S - 0.01
    assert drops.decode("external", image_from_msg, image(bytes(3))) is None  # counted, not logged

    def buggy(_msg):
        raise KeyError("not a ContractError")  # whatever a decoder raises, the callback does not

    assert drops.decode("state", buggy, None) is None  # another input: logged at once
    now[0] += 0.01
    assert drops.decode("external", image_from_msg, image(bytes(4))) is None  # the interval passed: logged
    assert drops.counts == {"external": 3, "state": 1}
    assert drops.diagnostics() == {"dropped_external": 3, "dropped_state": 1,
                                   "last_input_error": "external: image of 4 x 5 x 3 has 4 bytes of data (needs "
                                                       "60, none empty)"}  # fmt: skip
    assert log.errors == [
        "dropped a bad external message (1 so far): image of 4 x 5 x 3 has 3 bytes of data (needs 60, none empty)",
        "dropped a bad state message (1 so far): 'not a ContractError'",
        "dropped a bad external message (3 so far): image of 4 x 5 x 3 has 4 bytes of data (needs 60, none empty)",
    ]


def test_the_node_drops_bad_messages_reports_them_and_keeps_the_good_ones() -> None:
    """One short node (no spinning): its callbacks, called as rclpy would, never raise."""
    import rclpy

    from policy_node.node import PolicyNode

    rclpy.init(args=["--ros-args", "-p", f"policy.url:=ws://127.0.0.1:{free_port()}", "-p", "autostart:=false"])
    node = PolicyNode()
    try:
        t = time.time()
        node._on_state(ros_msgs.state_msg(STATE, t))
        node._on_image("external", ros_msgs.image_msg(np.zeros((8, 8, 3), np.uint8), t, "external"))
        node._on_image("wrist", ros_msgs.image_msg(np.zeros((8, 8, 3), np.uint8), t, "wrist"))
        good = node.snapshot()
        assert good is not None
        bad_image = ros_msgs.image_msg(np.zeros((8, 8, 3), np.uint8), t, "wrist")
        bad_image.data = bytes(8 * 8 * 3 - 1)
        node._on_image("wrist", bad_image)  # raised ValueError (reshape) before
        node._on_state(ros_msgs.state_msg(np.array([np.nan, *STATE[1:]]), t + 1))
        node._on_episode(String(data="{not json"))
        assert dict(node.drops.counts) == {"wrist": 1, "state": 1, "episode": 1}
        after = node.snapshot()  # the last good inputs, unchanged
        np.testing.assert_array_equal(after.state7, STATE)
        assert after.wrist.shape == (8, 8, 3) and after.state_stamp == good.state_stamp
        published = []
        node._diag.publish = published.append
        node._publish_diagnostics()
        values = {kv.key: kv.value for kv in published[0].status[0].values}
        assert values["dropped_wrist"] == "1" and values["dropped_state"] == "1" and values["dropped_episode"] == "1"
        assert values["last_input_error"].startswith("episode: ")
    finally:
        node.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
