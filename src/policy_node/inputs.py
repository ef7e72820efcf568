"""policy_node's inputs (robot state, camera frames) checked in its subscription callbacks, a bad one dropped.

rclpy re-raises an exception from a subscription callback and the node ends: one Image whose data does not
match height x width x 3 (a ``reshape`` ValueError) or one state with a NaN would stop the policy. Each message
is decoded here; one that breaks the contract is dropped, counted per input, kept as the last reason for
``/diagnostics`` and logged (throttled), and the policy goes on with the last good input (which then ages:
``policy.max_obs_age`` holds the arm if no good one follows).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, Final, TypeVar

import numpy as np
from sensor_msgs.msg import Image, JointState

from libero_workcell import ros_msgs
from libero_workcell.contract import STATE_DIM, STATE_NAMES, ContractError

IMAGE_CHANNELS: Final = 3  # rgb8
LOG_THROTTLE_S: Final = 2.0
_T = TypeVar("_T")


def state_from_msg(msg: JointState) -> np.ndarray:
    """The contract's 7-D state; ContractError for other names, another length or a non-finite value."""
    state = ros_msgs.state_from_msg(msg)
    if state.shape != (STATE_DIM,):
        raise ContractError(f"state has {state.size} positions, not {STATE_DIM}")
    bad = [n for n, v in zip(STATE_NAMES, state, strict=True) if not np.isfinite(v)]
    if bad:
        raise ContractError(f"state has non-finite values in {bad}")
    return state


def image_from_msg(msg: Image) -> np.ndarray:
    """An rgb8 frame as (height, width, 3) uint8; ContractError when its data does not hold that."""
    expected = msg.height * msg.width * IMAGE_CHANNELS
    if msg.height == 0 or msg.width == 0 or len(msg.data) != expected:
        raise ContractError(f"image of {msg.height} x {msg.width} x {IMAGE_CHANNELS} has {len(msg.data)} bytes of "
                            f"data (needs {expected}, none empty)")  # fmt: skip
    return ros_msgs.image_from_msg(msg)


class InputDrops:
    """Bad input messages, dropped: counted per input, the last reason kept, logged at most once every
    ``LOG_THROTTLE_S`` per input (one input's flood never hides another's first error)."""

    def __init__(self, logger: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._clock = clock
        self._logged: dict[str, float] = {}  # input -> when its last drop was logged
        self.counts: Counter[str] = Counter()
        self.last_reason = ""

    def decode(self, name: str, decode: Callable[[Any], _T], msg: Any) -> _T | None:
        """``decode(msg)``, or None for a message it refuses, whatever it raises: a callback never raises."""
        try:
            return decode(msg)
        except Exception as exc:  # an exception out of a callback would end the node
            self.counts[name] += 1
            self.last_reason = f"{name}: {exc}"
            now = self._clock()
            if now - self._logged.get(name, -math.inf) >= LOG_THROTTLE_S:
                self._logged[name] = now
                self._logger.error(f"dropped a bad {name} message ({self.counts[name]} so far): {exc}")
            return None

    def diagnostics(self) -> dict[str, Any]:
        """``dropped_<input>`` counts and the last reason, for /diagnostics."""
        return {**{f"dropped_{k}": v for k, v in sorted(self.counts.items())}, "last_input_error": self.last_reason}
