"""Conversions between contract data and standard ROS messages, in one place.

Nodes call these instead of filling messages by hand, so the message layout
of the action, the 7-D state, poses and diagnostics is defined once.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NamedTuple

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from sensor_msgs.msg import CameraInfo, Image, JointState
from std_msgs.msg import String

from libero_workcell import json_topics
from libero_workcell.contract import (
    ACTION_NAMES,
    BASE_FRAME,
    IMAGE_ENCODING,
    STATE_NAMES,
    ContractError,
)


def stamp_from_wall(wall_time: float) -> Time:
    """builtin_interfaces/Time from a time.time() value."""
    sec = math.floor(wall_time)
    return Time(sec=int(sec), nanosec=int((wall_time - sec) * 1e9))


def as_stamp(t: float | Time) -> Time:
    """A message stamp from seconds (``time.time()``, or sim seconds) or an exact stamp as it is."""
    return t if isinstance(t, Time) else stamp_from_wall(t)


def stamp_from_ns(time_ns: int) -> Time:
    """builtin_interfaces/Time from integer nanoseconds (the sim clock: exact, no float rounding)."""
    sec, nanosec = divmod(int(time_ns), 1_000_000_000)
    return Time(sec=sec, nanosec=nanosec)


def ns_from_stamp(stamp: Time) -> int:
    """Integer nanoseconds of a stamp (sim-time stamps compare exactly)."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def seconds_from_ns(time_ns: int) -> float:
    """Seconds as :func:`wall_from_stamp` reads a stamp of ``time_ns``: the same float, bit for bit."""
    return wall_from_stamp(stamp_from_ns(time_ns))


def wall_from_stamp(stamp: Time) -> float:
    return stamp.sec + stamp.nanosec * 1e-9


def wall_from_monotonic(t_mono: float) -> float:
    """Convert a time.monotonic() reading to wall time (for message stamps)."""
    return time.time() - (time.monotonic() - t_mono)


TURN_SEPARATOR: Final = "#"
_last_turn = 0
_turn_lock = threading.Lock()


def new_turn() -> int:
    """A new turn for a source's stream of actions: the wall clock in ns, strictly increasing in this process.

    A source takes one each time it is started (``/policy/start``, a clutch engaged, a jog, a world episode);
    the arm bridge follows a stream only within a turn that began on the enabled arm, after its last stop,
    fault, homing or source switch (aubo_bridge.arbiter). Turns from different processes compare by the wall
    clock: a later start has the larger turn."""
    global _last_turn
    with _turn_lock:
        _last_turn = max(time.time_ns(), _last_turn + 1)
        return _last_turn


def action_msg(
    action: Sequence[float], source: str, wall_time: float | Time | None = None, turn: int = 0
) -> JointState:
    """The 7-D action as the contract's JointState: frame_id = ``SOURCE#TURN`` (``SOURCE`` alone for turn 0, a
    source that knows no turns: the arm follows it until its first stop), name = ACTION_NAMES; stamped now (wall)
    or with the stamp given (in sim lockstep: the observation's, which names the control step it answers)."""
    msg = JointState()
    msg.header.stamp = as_stamp(time.time() if wall_time is None else wall_time)
    msg.header.frame_id = f"{source}{TURN_SEPARATOR}{int(turn)}" if turn else source
    msg.name = list(ACTION_NAMES)
    msg.position = [float(v) for v in action]
    return msg


class ActionMessage(NamedTuple):
    values: np.ndarray
    source: str
    turn: int  # 0: a source that sends no turn


def source_of(frame_id: str) -> str:
    """The source an action's ``header.frame_id`` names, whatever its turn says (a malformed one included)."""
    return frame_id.partition(TURN_SEPARATOR)[0]


def source_and_turn(frame_id: str) -> tuple[str, int]:
    """An action's ``header.frame_id`` read as (source, turn); ContractError for a turn that is not a
    non-negative integer of at most 63 bits."""
    source, sep, turn = frame_id.partition(TURN_SEPARATOR)
    if not sep:
        return source, 0
    if not (turn.isascii() and turn.isdigit()) or len(turn) > 19 or int(turn) >= 2**63:
        raise ContractError(f"action frame_id {frame_id[:80]!r}: the turn after {TURN_SEPARATOR!r} must be an "
                            "integer in [0, 2**63)")  # fmt: skip
    return source, int(turn)


def action_from_msg(msg: JointState) -> ActionMessage:
    """(values, source, turn). Field names must be the contract's, in order: a mislabelled action is rejected."""
    if list(msg.name) != list(ACTION_NAMES):
        raise ContractError(f"action names {list(msg.name)} != contract {list(ACTION_NAMES)}")
    source, turn = source_and_turn(msg.header.frame_id)
    return ActionMessage(np.asarray(msg.position, dtype=float), source, turn)


class ActionOutcome(NamedTuple):
    """What the arm driver did with one action (Topics.ACTION_RESULT): the action is named by its stamp
    (wall seconds, as wall_from_stamp reads it) and source."""

    stamp: float
    source: str
    accepted: bool
    reason: str
    servo_tick: int | None  # accepted: servo ticks computed before it took effect (aubo_bridge.driver)
    # accepted: the 7-D action the driver applied (after its clipping: what the arm did); None when refused
    applied: tuple[float, ...] | None = None
    # accepted: when the first servo target carrying it went out (wall s; sim time in lockstep); None if refused
    # or not said (an older arm bridge)
    servo_time: float | None = None


def action_result_msg(
    stamp: Time, source: str, accepted: bool, reason: str, servo_tick: int | None, applied: Sequence[float] | None,
    servo_time: Time | None = None,
) -> String:
    """``applied``: the 7-D action the driver applied (ActionResult.applied), None when it refused it;
    ``servo_time``: when its first servo target went out (aubo_bridge), None when refused."""
    body = {"stamp": [int(stamp.sec), int(stamp.nanosec)], "source": source, "accepted": bool(accepted),
            "reason": reason, "servo_tick": servo_tick,
            "applied": None if applied is None else [float(v) for v in applied],
            "servo_time": None if servo_time is None else [int(servo_time.sec), int(servo_time.nanosec)]}  # fmt: skip
    return String(data=json.dumps(body))


def action_result_from_msg(msg: String) -> ActionOutcome:
    """The outcome in an ACTION_RESULT message; ContractError when it is not one."""
    try:
        body = json_topics.parse(msg.data, "an action result")
        sec, nanosec = body["stamp"]
        tick = body["servo_tick"]
        stamp = wall_from_stamp(Time(sec=int(sec), nanosec=int(nanosec)))
        tick = None if tick is None else int(tick)
        applied = body.get("applied")  # (absent from an older arm bridge's results: not known)
        if applied is not None:
            applied = tuple(float(v) for v in applied)
            if len(applied) != len(ACTION_NAMES) or not all(math.isfinite(v) for v in applied):
                raise ValueError(f"applied must be {len(ACTION_NAMES)} finite numbers")
        servo = body.get("servo_time")  # (absent from an older arm bridge's results: not known)
        if servo is not None:
            servo = ns_from_stamp(Time(sec=int(servo[0]), nanosec=int(servo[1]))) * 1e-9  # as Step.time reads ns
        return ActionOutcome(stamp, str(body["source"]), bool(body["accepted"]), str(body["reason"]), tick, applied,
                             servo)  # fmt: skip
    except (ValueError, KeyError, TypeError, OverflowError) as exc:  # (ContractError is a ValueError)
        raise ContractError(f"not an action result: {msg.data[:80]!r} ({exc})") from None


def state_msg(state7: np.ndarray, wall_time: float | Time) -> JointState:
    msg = JointState()
    msg.header.stamp = as_stamp(wall_time)
    msg.header.frame_id = BASE_FRAME
    msg.name = list(STATE_NAMES)
    msg.position = [float(v) for v in state7]
    return msg


def decoded_or_logged(decode: Callable[[Any], Any], msg: Any, logger: Any) -> Any | None:
    """``decode(msg)``, or None after logging (throttled) why a message broke the contract: a subscriber
    keeps its last good value instead of dying on one bad message."""
    try:
        return decode(msg)
    except ContractError as exc:
        logger.error(str(exc), throttle_duration_sec=2.0)
        return None


def state_from_msg(msg: JointState) -> np.ndarray:
    if list(msg.name) != list(STATE_NAMES):
        raise ContractError(f"state names {list(msg.name)} != contract {list(STATE_NAMES)}")
    return np.asarray(msg.position, dtype=float)


def joint_state_msg(
    names: Sequence[str], position: Sequence[float], wall_time: float | Time, velocity: Sequence[float] = ()
) -> JointState:
    msg = JointState()
    msg.header.stamp = as_stamp(wall_time)
    msg.name = list(names)
    msg.position = [float(v) for v in position]
    msg.velocity = [float(v) for v in velocity]
    return msg


def pose_msg(pos: np.ndarray, quat_xyzw: np.ndarray, wall_time: float | Time, frame: str = BASE_FRAME) -> PoseStamped:
    msg = PoseStamped()
    msg.header.stamp = as_stamp(wall_time)
    msg.header.frame_id = frame
    p, q = msg.pose.position, msg.pose.orientation
    p.x, p.y, p.z = (float(v) for v in pos)
    q.x, q.y, q.z, q.w = (float(v) for v in quat_xyzw)
    return msg


def image_msg(rgb: np.ndarray, wall_time: float | Time, frame: str) -> Image:
    h, w, _ = rgb.shape
    msg = Image()
    msg.header.stamp = as_stamp(wall_time)
    msg.header.frame_id = frame
    msg.height, msg.width = h, w
    msg.encoding = IMAGE_ENCODING
    msg.is_bigendian = 0
    msg.step = w * 3
    msg.data = np.ascontiguousarray(rgb, dtype=np.uint8).tobytes()
    return msg


def image_from_msg(msg: Image) -> np.ndarray:
    """(height, width, 3) uint8; ContractError for another encoding or data of the wrong size."""
    if msg.encoding != IMAGE_ENCODING:
        raise ContractError(f"image encoding {msg.encoding!r} != {IMAGE_ENCODING!r}")
    data = bytes(msg.data)
    if len(data) != msg.height * msg.width * 3:
        raise ContractError(f"image data is {len(data)} bytes, {msg.height} x {msg.width} x 3 needs "
                            f"{msg.height * msg.width * 3}")  # fmt: skip
    return np.frombuffer(data, dtype=np.uint8).reshape(msg.height, msg.width, 3)


def camera_info_msg(width: int, height: int, fovy_deg: float, wall_time: float | Time, frame: str) -> CameraInfo:
    """Pinhole intrinsics from a vertical field of view; K = 0 (uncalibrated) when it is unknown."""
    msg = CameraInfo()
    msg.header.stamp = as_stamp(wall_time)
    msg.header.frame_id = frame
    msg.width, msg.height = width, height
    msg.distortion_model = "plumb_bob"
    msg.d = [0.0] * 5
    if math.isfinite(fovy_deg) and fovy_deg > 0:
        f = (height / 2) / math.tan(math.radians(fovy_deg) / 2)
        cx, cy = (width - 1) / 2, (height - 1) / 2
        msg.k = [f, 0.0, cx, 0.0, f, cy, 0.0, 0.0, 1.0]
        msg.p = [f, 0.0, cx, 0.0, 0.0, f, cy, 0.0, 0.0, 0.0, 1.0, 0.0]
        msg.r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    return msg


def diagnostics_msg(
    name: str, hardware_id: str, level: int, message: str, values: Mapping[str, object], stamp: Time | None = None
) -> DiagnosticArray:
    """One status; stamped ``stamp`` (the node's clock, sim time in sim) or the wall clock."""
    msg = DiagnosticArray()
    msg.header.stamp = stamp_from_wall(time.time()) if stamp is None else stamp
    status = DiagnosticStatus()
    status.level = bytes([level])
    status.name = name
    status.hardware_id = hardware_id
    status.message = message
    status.values = [KeyValue(key=str(k), value=str(v)) for k, v in values.items()]
    msg.status = [status]
    return msg


DIAG_OK = 0
DIAG_WARN = 1
DIAG_ERROR = 2
DIAG_STALE = 3
DIAG_LEVEL_NAMES = {DIAG_OK: "ok", DIAG_WARN: "WARN", DIAG_ERROR: "ERROR", DIAG_STALE: "STALE"}


def diag_level(status: Any) -> int:
    """A DiagnosticStatus's level as an int (rclpy gives the byte field as ``bytes``)."""
    level = status.level
    return level[0] if isinstance(level, bytes | bytearray) else int(level)
