"""What an accepted action means for the servo stream (``ArmConfig.action_response``): one interface, one module
per meaning, chosen once when the driver is built.

- ``libero`` (:mod:`.libero`): robosuite OSC_POSE's response. The action moves the goal relative to a streamed
  reference, and the reference follows the goal at the servo rate by robosuite's law on the Panda's dynamics.
- ``goal_delta`` (:mod:`.goal_delta`): the action moves the goal (clipped to the TCP speed limits), reached on a
  straight line within the control period.

The driver (:class:`aubo_bridge.driver.ArmDriver`) keeps everything else, identical for both: validation, the
workspace box, IK of the goal, the per-tick limiter, holds, the watchdog and faults.
"""

from __future__ import annotations

from collections import Counter

from aubo_bridge.config import RESPONSE_GOAL_DELTA, RESPONSE_LIBERO, ArmConfig
from aubo_bridge.response.base import Motion
from aubo_bridge.response.goal_delta import GoalDeltaMotion
from aubo_bridge.response.libero import LiberoMotion

MOTIONS: dict[str, type[Motion]] = {RESPONSE_LIBERO: LiberoMotion, RESPONSE_GOAL_DELTA: GoalDeltaMotion}


def motion_for(config: ArmConfig, counters: Counter[str]) -> Motion:
    """The motion ``config.action_response`` names (ArmConfig has validated it), counting its events in
    ``counters``."""
    return MOTIONS[config.action_response](config, counters)
