"""The action-result message (Topics.ACTION_RESULT): what the bridge says of each action, read back exactly."""

from __future__ import annotations

import pytest
from std_msgs.msg import String

from libero_workcell import ros_msgs
from libero_workcell.contract import ContractError


def test_an_action_result_names_its_action_by_the_same_stamp_a_subscriber_reads() -> None:
    action = ros_msgs.action_msg([0.1, 0, 0, 0, 0, 0, -1], "teleop", 1_764_000_000.123456789)
    applied = [0.05, 0, 0, 0, 0, 0, -1]  # what the driver did with it (clipped)
    msg = ros_msgs.action_result_msg(action.header.stamp, "teleop", True, "ok", 42, applied)
    out = ros_msgs.action_result_from_msg(msg)
    assert out == ros_msgs.ActionOutcome(ros_msgs.wall_from_stamp(action.header.stamp), "teleop", True, "ok", 42,
                                         tuple(applied))  # fmt: skip
    refused = ros_msgs.action_result_msg(action.header.stamp, "policy", False, "arm in fault: estop", None, None)
    assert ros_msgs.action_result_from_msg(refused).servo_tick is None
    assert ros_msgs.action_result_from_msg(refused).applied is None
    older = String(data=msg.data.replace(', "applied": [0.05, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0]', ""))
    assert ros_msgs.action_result_from_msg(older).applied is None  # an arm bridge that does not say: not known
    # when its first servo target went out, read on the same clock as the stamp
    servo = ros_msgs.stamp_from_ns(1_764_000_000_125_000_000)
    timed = ros_msgs.action_result_msg(action.header.stamp, "teleop", True, "ok", 42, applied, servo)
    assert ros_msgs.action_result_from_msg(timed).servo_time == ros_msgs.ns_from_stamp(servo) * 1e-9
    assert ros_msgs.action_result_from_msg(msg).servo_time is None  # refused, or an older bridge: not known
    assert ros_msgs.action_result_from_msg(older).servo_time is None


@pytest.mark.parametrize(
    "data",
    ["not json", "{}", '{"stamp": [1], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": 3}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok"}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": "many"}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": 3, "applied": [1, 2]}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": 3, "applied": 7}',
     '{"stamp": [1, 2], "source": "t", "accepted": true, "reason": "", "servo_tick": 3, "applied": [NaN,0,0,0,0,0,0]}'],
)  # fmt: skip
def test_anything_else_on_the_topic_is_a_contract_error(data: str) -> None:
    with pytest.raises(ContractError, match="not an action result"):
        ros_msgs.action_result_from_msg(String(data=data))


def test_an_image_whose_data_does_not_match_its_size_is_a_contract_error() -> None:
    """(It was a ValueError from numpy's reshape, which no subscriber caught: the node died on one frame.)"""
    import numpy as np

    msg = ros_msgs.image_msg(np.zeros((4, 6, 3), np.uint8), 1.0, "wrist")
    assert ros_msgs.image_from_msg(msg).shape == (4, 6, 3)
    for data in (bytes(4 * 6 * 3 - 1), bytes(4 * 6 * 3 + 3), b""):
        msg.data = data
        with pytest.raises(ContractError, match=f"image data is {len(data)} bytes, 4 x 6 x 3 needs 72"):
            ros_msgs.image_from_msg(msg)
