"""The session log's default topics, and how often a camera's frames are kept: one home, read by the node and
checked against docs/session_log.md.

Why this set: what a session's review needs (what the arm was asked, what it did, who drove, what went wrong,
what the cameras saw) at a size a day of sessions can keep. Everything here but the images is small (a few
hundred bytes at 20-100 Hz); the two cameras' 256 x 256 rgb8 frames are 192 KiB each, 7.5 MiB/s at 20 Hz, so
by default a camera's frame is kept at most ``IMAGE_HZ`` times a second of log time (``image_hz:=0`` keeps every
frame). Not in the set by default: ``/clock`` (100 Hz on the simulated graph; every log time is on the graph's
clock already) and the sim's ground truth.
"""

from __future__ import annotations

from typing import Final

from libero_workcell.contract import CAMERA_NAMES, Topics

DEFAULT_TOPICS: Final[tuple[str, ...]] = (
    Topics.ROBOT_STATE,
    Topics.JOINT_STATES,
    Topics.TCP_POSE,
    Topics.GRIPPER_STATE,
    Topics.ACTION,
    Topics.ACTION_RESULT,
    Topics.ACTIVE_SOURCE,
    Topics.ARM_MODE,
    Topics.CONVEYOR_STATE,
    Topics.DIAGNOSTICS,
    Topics.SIM_EPISODE,
    Topics.RECORDER_STATUS,
    Topics.TELEOP_STATUS,
    Topics.POLICY_STATUS,
    Topics.REPLAY_STATUS,
    *(Topics.image(c) for c in CAMERA_NAMES),
)
IMAGE_TYPE: Final = "sensor_msgs/msg/Image"
IMAGE_HZ: Final = 2.0  # frames per second of log time kept per camera topic (0: every frame)


class RateGate:
    """Keeps a message when at least ``1/hz`` s of log time have passed since the last one kept (every message
    when ``hz`` is 0). Log time going backwards (a clock reset) keeps the message and starts again from it."""

    def __init__(self, hz: float) -> None:
        if hz < 0:
            raise ValueError(f"a rate is >= 0 (0: every message), got {hz}")
        self.period_ns = round(1e9 / hz) if hz > 0 else 0
        self._last: int | None = None

    def admit(self, t_ns: int) -> bool:
        if self._last is not None and 0 <= t_ns - self._last < self.period_ns:
            return False
        self._last = t_ns
        return True
