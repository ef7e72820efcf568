"""The action-result message (Topics.ACTION_RESULT): what the bridge says of each action, read back exactly."""

from __future__ import annotations

import pytest
from std_msgs.msg import String

from libero_workcell import ros_msgs
from libero_workcell.contract import ContractError


def test_an_action_result_names_its_action_by_the_same_stamp_a_subscriber_reads() -> None:
    action = ros_msgs.action_msg([0.1, 0, 0, 0, 0, 0, -1], "teleop", 1_764_000_000.123456789)
    out = ros_msgs.action_result_from_msg(ros_msgs.action_result_msg(action.header.stamp, "teleop", True, "ok", 42))
    assert out == ros_msgs.ActionOutcome(ros_msgs.wall_from_stamp(action.header.stamp), "teleop", True, "ok", 42)
    refused = ros_msgs.action_result_msg(action.header.stamp, "policy", False, "arm in fault: estop", None)
    assert ros_msgs.action_result_from_msg(refused).servo_tick is None


@pytest.mark.parametrize(
    "data",
    ["not json", "{}", '{"stamp": [1], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": 3}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok"}',
     '{"stamp": [1, 2], "source": "teleop", "accepted": true, "reason": "ok", "servo_tick": "many"}'],
)  # fmt: skip
def test_anything_else_on_the_topic_is_a_contract_error(data: str) -> None:
    with pytest.raises(ContractError, match="not an action result"):
        ros_msgs.action_result_from_msg(String(data=data))
