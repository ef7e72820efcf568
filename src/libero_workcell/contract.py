"""The workcell interface contract: the one home of every shared name and number.

Frames, units, the 7-D state and 7-D action (LIBERO / robosuite OSC_POSE
convention, LIBERO-Industry Appendix D), topic, service and parameter names,
and QoS profiles. Every node, driver, test and document takes its names from
here; nobody re-types a topic string or a 0.05. ``docs/interfaces.md``
documents this module and ``tests/contract/test_contract_docs.py`` fails if they
disagree.

This module imports no ``rclpy``: QoS is described as plain data and turned
into ``rclpy.qos.QoSProfile`` objects by :mod:`libero_workcell.ros_qos`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

# --------------------------------------------------------------------------
# Frames (REP-103 / REP-105). SI units throughout: m, rad, s, m/s.
# --------------------------------------------------------------------------
BASE_FRAME: Final = "base_link"  # arm base; z up, x forward
TCP_FRAME: Final = "tcp"  # gripper grip_site; z along the approach axis
EXTERNAL_CAMERA_FRAME: Final = "external_camera_optical"
WRIST_CAMERA_FRAME: Final = "wrist_camera_optical"

# --------------------------------------------------------------------------
# Control timing
# --------------------------------------------------------------------------
CONTROL_HZ_DEFAULT: Final = 20.0  # LIBERO's control frequency
SIM_SERVO_HZ_DEFAULT: Final = 100.0  # servo-target rate of the sim backend
# Hold after this many control periods without an action. 1.5 leaves half a period
# for action jitter and the servo tick, so the hold lands within 2 periods.
WATCHDOG_PERIODS_DEFAULT: Final = 1.5

# --------------------------------------------------------------------------
# 7-D action: six relative operational-space commands + one gripper command.
# +-1 sets the TCP goal ACTION_POS_SCALE m / ACTION_ROT_SCALE rad (axis-angle,
# base frame) from the current pose for one control step (robosuite OSC_POSE's
# output limits); how the arm answers is LIBERO's response (docs/interfaces.md,
# "Action response"; libero_workcell.action_response).
# --------------------------------------------------------------------------
ACTION_DIM: Final = 7
ACTION_NAMES: Final = ("dx", "dy", "dz", "drx", "dry", "drz", "gripper")
ACTION_POS_SCALE: Final = 0.05  # m per control step at |a| = 1
ACTION_ROT_SCALE: Final = 0.5  # rad per control step at |a| = 1
ACTION_LOW: Final = -1.0
ACTION_HIGH: Final = 1.0
GRIPPER_OPEN: Final = -1.0  # action value that opens the gripper
GRIPPER_CLOSE: Final = 1.0  # action value that closes the gripper

# --------------------------------------------------------------------------
# 7-D state: TCP position (m, base frame), TCP orientation as axis-angle
# (rad, base frame), one gripper driver coordinate.
# The gripper coordinate is the gripper's opening normalised to [0, 1]: 0 = fully
# open, 1 = fully closed (each gripper model maps its own position onto it: gripper/).
# --------------------------------------------------------------------------
STATE_DIM: Final = 7
STATE_NAMES: Final = ("tcp_x", "tcp_y", "tcp_z", "tcp_ax", "tcp_ay", "tcp_az", "gripper")
GRIPPER_COORD_OPEN: Final = 0.0
GRIPPER_COORD_CLOSED: Final = 1.0

# --------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------
IMAGE_SIZE: Final = 256  # cameras publish IMAGE_SIZE x IMAGE_SIZE rgb8
IMAGE_ENCODING: Final = "rgb8"
POLICY_IMAGE_SIZE: Final = 224  # resize-with-pad target on the policy side
CAMERA_NAMES: Final = ("external", "wrist")
CAMERA_HZ_DEFAULT: Final = 20.0

# --------------------------------------------------------------------------
# Action sources and the arbiter
# --------------------------------------------------------------------------
SOURCE_TELEOP: Final = "teleop"
SOURCE_POLICY: Final = "policy"
SOURCE_EXPERT: Final = "expert"
ACTION_SOURCES: Final = (SOURCE_TELEOP, SOURCE_POLICY, SOURCE_EXPERT)
SOURCE_NONE: Final = "none"  # no source may drive

# The arm's modes as /aubo/mode reports them (aubo_bridge.driver.ArmMode). Sources drive only in the first two;
# entering any other (a stop, homing, a fault) ends every source's turn: it drives again only once started again.
ARM_ENABLED: Final = "enabled"  # tracking actions
ARM_HOLDING: Final = "holding"  # enabled, the action stream stalled: holding position
ARM_DISABLED: Final = "disabled"  # not accepting actions (start-up, a stop)
ARM_HOMING: Final = "homing"  # moving to its home pose
ARM_FAULT: Final = "fault"  # refusing motion until the operator's reset
ARM_MODES: Final = (ARM_ENABLED, ARM_HOLDING, ARM_DISABLED, ARM_HOMING, ARM_FAULT)
ARM_DRIVEN_MODES: Final = (ARM_ENABLED, ARM_HOLDING)


# --------------------------------------------------------------------------
# Topics. Action and state travel as sensor_msgs/JointState: the standard
# message that is stamped and carries named values. For actions,
# header.frame_id names the source (one of ACTION_SOURCES) and its turn
# (SOURCE#TURN, ros_msgs.action_msg: the arm follows a stream only within the
# turn it started in) and name == ACTION_NAMES, position == the 7 values. For the state,
# header.frame_id == BASE_FRAME and name == STATE_NAMES.
# --------------------------------------------------------------------------
class Topics:
    """Topic names (absolute)."""

    ACTION: Final = "/workcell/action"  # sensor_msgs/JointState, 7-D action
    # std_msgs/String (JSON), one per action received: its stamp and source, accepted or why not, and the servo
    # tick it took effect on (ros_msgs.action_result_msg)
    ACTION_RESULT: Final = "/workcell/action_result"
    ROBOT_STATE: Final = "/workcell/robot_state"  # sensor_msgs/JointState, 7-D state
    ACTIVE_SOURCE: Final = "/workcell/active_source"  # std_msgs/String, latched
    # std_msgs/String (JSON {"mode", "fault"}), latched, on every change: what the cell interlock follows
    ARM_MODE: Final = "/aubo/mode"
    JOINT_STATES: Final = "/aubo/joint_states"  # sensor_msgs/JointState, 6 arm joints
    TCP_POSE: Final = "/aubo/tcp_pose"  # geometry_msgs/PoseStamped in BASE_FRAME
    GRIPPER_STATE: Final = "/aubo/gripper/state"  # sensor_msgs/JointState, one "gripper" joint
    CONVEYOR_STATE: Final = "/conveyor/state"  # sensor_msgs/JointState, one prismatic "belt"
    CONVEYOR_SPEED_CMD: Final = "/conveyor/speed_cmd"  # std_msgs/Float64, m/s
    DIAGNOSTICS: Final = "/diagnostics"  # diagnostic_msgs/DiagnosticArray
    SIM_GROUND_TRUTH: Final = "/sim/ground_truth"  # std_msgs/String (JSON), sim only
    SIM_EPISODE: Final = "/sim/episode"  # std_msgs/String (JSON), sim only: metrics
    TELEOP_STATUS: Final = "/teleop/status"  # std_msgs/String (JSON): following / holding and why
    RECORDER_STATUS: Final = "/recorder/status"  # std_msgs/String (JSON), latched: the episode being recorded
    POLICY_STATUS: Final = "/policy/status"  # std_msgs/String (JSON): running, connected, the last step's record
    # std_msgs/String (JSON), latched, sim only: the demo replay's progress at each step, tracking error, outcome
    REPLAY_STATUS: Final = "/replay/status"
    CLOCK: Final = "/clock"  # rosgraph_msgs/Clock, sim only: the simulated world is the clock

    @staticmethod
    def image(camera: str) -> str:
        """sensor_msgs/Image, IMAGE_SIZE x IMAGE_SIZE rgb8."""
        return f"/cameras/{camera}/image_raw"

    @staticmethod
    def camera_info(camera: str) -> str:
        """sensor_msgs/CameraInfo matching :meth:`image`."""
        return f"/cameras/{camera}/camera_info"


class Services:
    """Service names (absolute). All std_srvs/Trigger unless noted."""

    ARM_ENABLE: Final = "/aubo/enable"
    ARM_STOP: Final = "/aubo/stop"
    ARM_HOME: Final = "/aubo/home"
    ARM_RESET_FAULT: Final = "/aubo/reset_fault"
    CONVEYOR_START: Final = "/conveyor/start"
    CONVEYOR_STOP: Final = "/conveyor/stop"
    CONVEYOR_RESET_FAULT: Final = "/conveyor/reset_fault"
    CONVEYOR_EMERGENCY_STOP: Final = "/conveyor/emergency_stop"
    SIM_RESET: Final = "/sim/reset"
    RECORDER_START: Final = "/recorder/start"
    RECORDER_SAVE: Final = "/recorder/save"
    RECORDER_DISCARD: Final = "/recorder/discard"
    POLICY_START: Final = "/policy/start"  # a new episode: the start wait, then the policy drives
    POLICY_STOP: Final = "/policy/stop"  # the policy stops sending (the arm's watchdog holds it)


class Params:
    """Parameter names shared by more than one node."""

    USE_SIM: Final = "use_sim"  # bool: sim backends instead of hardware
    USE_SIM_TIME: Final = "use_sim_time"  # bool (rclpy's own): the node's clock is /clock
    LOCKSTEP: Final = "lockstep"  # bool: in sim, the world waits for each node's part in each tick
    CONTROL_HZ: Final = "control_hz"  # float, Hz
    SERVO_HZ: Final = "servo_hz"  # float, Hz
    WATCHDOG_TIMEOUT: Final = "watchdog_timeout"  # float, s
    ACTIVE_SOURCE: Final = "active_source"  # str, one of ACTION_SOURCES or SOURCE_NONE
    SIM_LINK: Final = "sim_link"  # str, name of the shared sim-world link
    CAMERA_NAME: Final = "camera_name"  # str, one of CAMERA_NAMES
    CAMERA_HZ: Final = "camera_hz"  # float, Hz
    MAX_FRAME_AGE: Final = "max_frame_age"  # float, s
    BELT_SPEED: Final = "belt_speed"  # float, m/s


# Joint names
ARM_JOINT_NAMES: Final = (
    "shoulder_joint",
    "upperArm_joint",
    "foreArm_joint",
    "wrist1_joint",
    "wrist2_joint",
    "wrist3_joint",
)
GRIPPER_JOINT_NAME: Final = "gripper"
BELT_JOINT_NAME: Final = "belt"


# --------------------------------------------------------------------------
# QoS as plain data (see libero_workcell.ros_qos)
# --------------------------------------------------------------------------
@dataclass(frozen=True)
class QosSpec:
    reliable: bool
    depth: int
    transient_local: bool = False


class Qos:
    # Actions are relative: every one counts, so a short queue absorbs executor hiccups
    # instead of dropping a step (depth 1 lost actions under load).
    COMMAND: Final = QosSpec(reliable=True, depth=10)
    STATE: Final = QosSpec(reliable=True, depth=5)  # joint/TCP/gripper/belt state
    SENSOR: Final = QosSpec(reliable=False, depth=2)  # images: best effort, newest
    # images in sim lockstep: each frame counts (a step waits for its frames), so none may be dropped, nor lost
    # to a late match (ros_qos.qos(..., lockstep=True) makes it transient local too)
    SENSOR_LOCKSTEP: Final = QosSpec(reliable=True, depth=5)
    CLOCK: Final = QosSpec(reliable=True, depth=1)  # /clock (subscribers may ask best effort)
    LATCHED: Final = QosSpec(reliable=True, depth=1, transient_local=True)
    DIAGNOSTICS: Final = QosSpec(reliable=True, depth=10)


# --------------------------------------------------------------------------
# Prompts (LIBERO-PeRM preference-conditioned deployment)
# --------------------------------------------------------------------------
PREFERENCE_PROMPT_TEMPLATE: Final = "Task: {task}. Preference: {preference}."


class ContractError(ValueError):
    """An input that violates the contract (shape, finiteness or range)."""


def validate_action(action: object) -> np.ndarray:
    """Return ``action`` as a float64 (7,) array, or raise :class:`ContractError`.

    Rejects wrong length, non-numeric, NaN/inf and values outside [-1, 1].
    Nothing is clipped here: an out-of-range action is a bug in its source,
    and the arm must not move on it.
    """
    try:
        a = np.asarray(action, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ContractError(f"action is not numeric: {exc}") from exc
    if a.shape != (ACTION_DIM,):
        raise ContractError(f"action must have shape ({ACTION_DIM},), got {a.shape}")
    if not np.all(np.isfinite(a)):
        bad = [ACTION_NAMES[i] for i in np.flatnonzero(~np.isfinite(a))]
        raise ContractError(f"action has non-finite values in {bad}")
    if np.any(a < ACTION_LOW) or np.any(a > ACTION_HIGH):
        bad = [f"{ACTION_NAMES[i]}={a[i]:.4g}" for i in np.flatnonzero((a < ACTION_LOW) | (a > ACTION_HIGH))]
        raise ContractError(f"action out of range [{ACTION_LOW}, {ACTION_HIGH}]: {', '.join(bad)}")
    return a


def action_to_delta(action: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Split a validated action into (dpos m, drot axis-angle rad, gripper command)."""
    return (
        action[:3] * ACTION_POS_SCALE,
        action[3:6] * ACTION_ROT_SCALE,
        float(action[6]),
    )


def gripper_command_to_coord(command: float) -> float:
    """Map a gripper action in [-1 open, +1 close] to a target coordinate in [0, 1]."""
    return float(np.clip((command - GRIPPER_OPEN) / (GRIPPER_CLOSE - GRIPPER_OPEN), 0.0, 1.0))


def make_state(tcp_pos: np.ndarray, tcp_axis_angle: np.ndarray, gripper_coord: float) -> np.ndarray:
    """Assemble the 7-D state vector in contract order."""
    return np.concatenate([np.asarray(tcp_pos, float), np.asarray(tcp_axis_angle, float), [float(gripper_coord)]])


def format_prompt(task: str, preference: str | None = None) -> str:
    """The policy prompt: the bare task, or the LIBERO-PeRM preference template."""
    if not preference:
        return task
    return PREFERENCE_PROMPT_TEMPLATE.format(task=task.rstrip("."), preference=preference.rstrip("."))
