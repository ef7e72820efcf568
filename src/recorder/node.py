"""recorder node: pairs each observation with the action issued for it and records LIBERO-layout demos.

Each action the recorded source (``record_source``, default ``teleop``) publishes while an episode is
open becomes one step: the newest robot state, joints and camera frames received before it, and the
action itself (LIBERO's pairing: observation t, then the action issued for it). A state older than
``max_state_age`` records nothing for that action (a dropped step, counted from the stamps); a camera
frame older than ``max_frame_age`` is recorded as it is and flagged stale (the gap is counted and stored:
recording goes on through a stalled camera). The episode file is written by a process of its own
(recorder.episode_writer), and saving runs in a thread, so the operator can start the next episode at once;
a save that fails (a full disk) costs that episode only: the error is logged and reported, the episode being
recorded meanwhile goes on, and the next one saves. The arm driver's report on each recorded action
(``/workcell/action_result``) is stored with its step: accepted or refused, and the action it applied; the arm's
first fault while an episode records (``/aubo/mode``) is stored with the demo (``arm_fault``). A demo the arm
refused every action of, or faulted in, is saved and not counted by the collection plan (the log says so).

A message that breaks the contract (a non-finite action or state, an image whose data does not match its
size) is counted, reported and dropped: the node and the open episode live on (the step it belonged to is
not recorded, a dropped step).

Services (std_srvs/Trigger): ``/recorder/start``, ``/recorder/save``, ``/recorder/discard``. The latched
``/recorder/status`` (JSON) says what is being recorded; once a second the log shows episode, duration,
steps and dropped steps, and warns when steps arrive slower than ``control_hz``; ``/diagnostics``
(``recorder``) carries the errors and the counts of bad messages and failed saves.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import json_topics, ros_msgs
from libero_workcell.contract import (
    ACTION_DIM,
    ARM_FAULT,
    CAMERA_NAMES,
    CONTROL_HZ_DEFAULT,
    IMAGE_SIZE,
    SOURCE_TELEOP,
    STATE_DIM,
    ContractError,
    Params,
    Qos,
    Services,
    Topics,
)
from libero_workcell.image_convention import CONVENTIONS, ENV_ARGS_TEXT, ROBOSUITE_RAW, stored
from libero_workcell.json_topics import ArmModeReport, JsonTopicReader, SimEpisodeReport
from libero_workcell.layout import ROBOT
from libero_workcell.libero_format import CAMERA_IMAGE_KEYS
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.ros_qos import qos
from libero_workcell.task import TaskSpec
from preferences.catalogue import Catalogue
from recorder.collection_plan import CollectionPlan, Configuration, not_counted
from recorder.episode_writer import EpisodeWriter, SavedEpisode, warm_up
from recorder.session_file import UNREADABLE, RecorderError, SessionFile
from recorder.step import FAULT_DURING, ArmReport, RecordedStep
from recorder.stop_signals import StopSignals, interrupted_reason
from transports.node_steps import NodeSteps
from transports.stepping import Step

STATE, JOINTS, ACTION, RESULT = "state", "joints", "action", "result"
# Lockstep: what a dropped bad message leaves at its stamp, so the step it belonged to records nothing and
# does not wait for it.
BAD: Final = object()
EPISODE_REPORT_TIMEOUT = 5.0  # s (wall) for the world's end-of-episode report to arrive (follow_episodes)

RATE_WARN: float = 0.9  # warn when steps arrive below this fraction of control_hz


PREFERENCE_KEYS = ("preference", "preference_specs", "task_spec")  # set by the collection's preference at save

def finite(values: np.ndarray, size: int | None, what: str) -> np.ndarray:
    """``values`` if they are ``size`` finite numbers (any number when None), else ContractError."""
    if (size is not None and values.shape != (size,)) or not np.all(np.isfinite(values)):
        raise ContractError(f"{what} must be {size or 'only'} finite numbers, got {values.tolist()}")
    return values


def recordable_action(msg: JointState) -> tuple[np.ndarray, str]:
    """The action and its source, if it can be recorded (ACTION_DIM finite numbers), else ContractError."""
    action, source, _turn = ros_msgs.action_from_msg(msg)
    return finite(action, ACTION_DIM, "an action"), source


def recordable_image(msg: Image) -> np.ndarray:
    """The frame, if it is one the episode file takes (IMAGE_SIZE x IMAGE_SIZE rgb8), else ContractError."""
    rgb = ros_msgs.image_from_msg(msg)
    if rgb.shape != (IMAGE_SIZE, IMAGE_SIZE, 3):
        raise ContractError(f"image of {rgb.shape[1]} x {rgb.shape[0]}: recordings hold {IMAGE_SIZE} x {IMAGE_SIZE}")
    return rgb


def console_line(name: str, duration: float, steps: int, dropped: int, last_second: int, hz: float) -> tuple[str, bool]:
    """The once-a-second line while recording, and whether it is a warning: fewer steps in the last second
    than RATE_WARN of the declared rate (once a whole second has been recorded)."""
    line = f"episode {name} | {duration:6.1f} s | {steps} steps | {dropped} dropped"
    slow = steps > last_second and last_second < RATE_WARN * hz
    return (f"{line} | {last_second} steps in the last second, below {hz:g} Hz" if slow else line), slow


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    "out_path": "demos/d2s.hdf5",
    "record_source": SOURCE_TELEOP,
    "max_state_age": 0.1,  # s
    Params.MAX_FRAME_AGE: 0.2,  # s
    "min_free_mb": 512,
    "image_convention": ROBOSUITE_RAW,  # how images are stored (image_convention.py)
    "task": "",  # JSON task configuration (the collection plan's); "" in sim: /sim/episode
    "env_name": "libero_industry_workcell_d2s",
    "plan_per_config": 0,  # > 0: follow the collection plan, this many demos each
    "preference": "",  # LIBERO-PeRM catalogue spec(s) the demos are collected with
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
    "follow_episodes": False,
    "cell": "",  # the lab's cell file (libero_workcell.cell_file), stored with the session, secrets redacted
    "mcap_log": "",  # the session's MCAP log (session_log), named in each demo's attributes
}


class RecorderNode(Node):
    def __init__(self) -> None:
        super().__init__("recorder")
        declare_all(self, PARAMETERS)
        # lockstep: record every world episode, from its first control step to its end (the rollout recorder)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        self.hz = float(p(Params.CONTROL_HZ))
        self.source = str(p("record_source"))
        self.max_state_age, self.max_frame_age = float(p("max_state_age")), float(p(Params.MAX_FRAME_AGE))
        self.convention = str(p("image_convention"))
        if self.convention not in CONVENTIONS:
            raise ValueError(f"image_convention must be one of {list(CONVENTIONS)}, got {self.convention!r}")
        task = str(p("task"))
        self.task: dict[str, Any] = json.loads(task) if task else {}
        # refused here unless it can be scored (preferences.catalogue): the node does not start on it
        self.condition = Catalogue.load().condition(str(p("preference")))
        env_args = {"env_name": str(p("env_name")), "robot": ROBOT, "control_freq": self.hz,
                    "images": ENV_ARGS_TEXT[self.convention]}  # fmt: skip
        if str(p("cell")):  # what made this workcell this lab's, recorded with what it produced
            env_args["cell"] = self._cell(str(p("cell")))
        instruction = self.task.get("language_instruction", "")
        # Each demo's own attributes hold its instruction (a session spans task configurations).
        problem = {"problem_name": str(p("env_name")), "language_instruction": instruction}
        self.session = SessionFile(str(p("out_path")), problem, env_args, int(p("min_free_mb")) * 1024**2)
        warm_up()  # the episode writers' fork server: the first episode's writer is ready at once
        per_config = int(p("plan_per_config"))
        self.plan = CollectionPlan(per_config) if per_config > 0 else None
        # The plan's next configuration in words (its setup()), "complete" when done, "" without a plan: the status
        # says it (plan_next), refreshed at start-up, at each start and after each save or discard
        self.plan_next = ""
        if self.plan is not None and self.task:
            raise ValueError("plan_per_config and task are exclusive: the plan says which task each demo is")
        self._lock = threading.Lock()
        self._stops = StopSignals()  # what stopped the recorder, and a shutdown no second signal cuts short
        self._state: tuple[float, np.ndarray] | None = None  # (stamp, state7)
        self._joints: np.ndarray | None = None
        self._frames: dict[str, tuple[float, np.ndarray]] = {}
        self._writer: EpisodeWriter | None = None
        self._saving: list[threading.Thread] = []
        self.saved: list[SavedEpisode] = []
        self._last_error = ""
        self.bad_messages: dict[str, int] = {}  # input -> messages dropped for breaking the contract
        self.save_failures = 0
        self._save_failed = False  # the latest save failed (diagnostics ERROR until one succeeds)
        self._sim_metrics: dict[str, Any] | None = None  # sim: the world's latest outcome, stored with a demo
        self._arm_fault = ""  # the arm's fault as /aubo/mode last said it ("": not in fault)
        # the session's MCAP log (docs/session_log.md): each demo names it, with its first and last step's times
        self.mcap_log = str(Path(p("mcap_log")).absolute()) if p("mcap_log") else ""
        self._status_pub = self.create_publisher(String, Topics.RECORDER_STATUS, qos(Qos.LATCHED))
        self._diag_pub = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        # lockstep: each of the world's control steps recorded (_lockstep_step); on the wall clock the callbacks
        # record as the messages come, and no step loop runs
        steps = NodeSteps(self, self.hz, self._lockstep_step, inputs=(STATE, JOINTS, ACTION, RESULT, *CAMERA_NAMES))
        self.lockstep = steps.lockstep
        self.runner: NodeSteps | None = steps if self.lockstep else None
        self.inputs = steps.inputs
        steps.read(JointState, Topics.ROBOT_STATE, Qos.STATE, self._on_state)
        steps.read(JointState, Topics.JOINT_STATES, Qos.STATE, self._on_joints)
        steps.read(JointState, Topics.ACTION, Qos.COMMAND, self._on_action)
        self.create_subscription(String, Topics.ACTION_RESULT, self._on_action_result, steps.qos(Qos.COMMAND))
        self.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        self._arm_reader = JsonTopicReader(ArmModeReport, Topics.ARM_MODE, self.get_logger())
        self.create_subscription(String, Topics.ARM_MODE, self._arm_reader.then(self._on_arm_mode), qos(Qos.LATCHED))
        steps.read_frames(self._on_image)
        self.create_service(Trigger, Services.RECORDER_START, self._srv_start)
        self.create_service(Trigger, Services.RECORDER_SAVE, self._srv_save)
        self.create_service(Trigger, Services.RECORDER_DISCARD, self._srv_discard)
        self._console = self.create_timer(1.0, self._report)
        self._steps_at_report = 0
        self.follow = bool(p("follow_episodes"))
        if self.follow and not self.lockstep:
            raise ValueError("follow_episodes records the simulated world's episodes: it needs use_sim and lockstep")
        if self.runner is not None:
            self._boundary: tuple[str, int] | None = None  # a start, save or discard, at that control step
            self._pending: EpisodeWriter | None = None  # started, recording from the boundary's step on
            self._episode = -1
            self._done_step = -1  # the last control step this recorder finished
            self._episodes: dict[int, dict[str, Any]] = {}  # the world's reports, by episode
            self.runner.start()
        self._announce_next()
        if self.session.partials:
            self.get_logger().warning(f"incomplete episodes from an earlier run kept: {self.session.partials}")
        for name, reason in self.session.set_aside.items():
            aside = f"{self.session.episode_path(name).name}{UNREADABLE}"
            self._fail(f"{name} could not be read ({reason}): moved aside as {aside}; resumed with the other episodes")
        self.get_logger().info(
            f"recording {self.source!r} actions into {self.session.path} ({self.session.num_demos} demos so far)"
        )
        self._publish_status()

    def _asked(self, task: dict[str, Any]) -> dict[str, Any]:
        """The task's attributes with the collection's preference: its language, its specs and the task
        configuration that asks it (what the satisfaction curve is scored under when the demo is saved)."""
        if not self.condition.preferences:
            return task
        asked = {**task, "preference": self.condition.text, "preference_specs": [p.spec for p in
                                                                               self.condition.preferences]}  # fmt: skip
        if "task_spec" in task:
            raw = task["task_spec"]
            spec = self.condition.apply(TaskSpec.from_dict(json.loads(raw) if isinstance(raw, str) else raw))
            asked["task_spec"] = spec.to_json()
        return asked

    # ------------------------------------------------------------------ inputs
    def _decoded(self, what: str, decode: Callable[[Any], Any], msg: Any) -> Any | None:
        """``decode(msg)``, or None for a message that breaks the contract: counted, logged (throttled), dropped.
        In lockstep the step it belonged to is told (BAD at its stamp): it records nothing, never waits for it."""
        try:
            return decode(msg)
        except (ContractError, ValueError, TypeError) as exc:
            self.bad_messages[what] = self.bad_messages.get(what, 0) + 1
            self.get_logger().error(f"dropped a bad {what} message ({self.bad_messages[what]} so far): {exc}",
                                    throttle_duration_sec=2.0)  # fmt: skip
            if self.lockstep and what in (STATE, JOINTS, ACTION, *CAMERA_NAMES):
                self.inputs.put(what, ros_msgs.ns_from_stamp(msg.header.stamp), BAD)
            return None

    def _on_state(self, msg: JointState) -> None:
        state = self._decoded(STATE, lambda m: finite(ros_msgs.state_from_msg(m), STATE_DIM, "state"), msg)
        if state is not None:
            if self.lockstep:
                self.inputs.put(STATE, ros_msgs.ns_from_stamp(msg.header.stamp), state)
            with self._lock:
                self._state = (ros_msgs.wall_from_stamp(msg.header.stamp), state)

    def _on_joints(self, msg: JointState) -> None:
        joints = self._decoded(JOINTS, lambda m: finite(np.array(m.position, float), None, "joint positions"), msg)
        if joints is None:
            return
        if self.lockstep:
            self.inputs.put(JOINTS, ros_msgs.ns_from_stamp(msg.header.stamp), joints)
        with self._lock:
            self._joints = joints

    def _on_image(self, camera: str, msg: Image) -> None:
        rgb = self._decoded(camera, recordable_image, msg)
        if rgb is not None:
            if self.lockstep:
                self.inputs.put(camera, ros_msgs.ns_from_stamp(msg.header.stamp), rgb)
            with self._lock:
                self._frames[camera] = (ros_msgs.wall_from_stamp(msg.header.stamp), rgb)

    def _on_episode(self, msg: String) -> None:
        report = self._decoded("episode", lambda m: json_topics.decode(SimEpisodeReport, m.data, Topics.SIM_EPISODE),
                               msg)  # fmt: skip
        if report is None:
            return
        info = report.model_dump()
        if not self.get_parameter("task").value and report.spec:  # sim: the world's task is the demo's
            self.task = {**report.spec, "task_spec": json.dumps(report.spec)}
        self._sim_metrics = info["metrics"]
        if self.lockstep:
            with self._lock:
                self._episodes[report.episode] = info

    def _on_arm_mode(self, report: ArmModeReport) -> None:
        """The arm's fault, noted on the episode being recorded (and one starting): the plan does not count it."""
        with self._lock:
            self._arm_fault = (report.fault or "fault") if report.mode == ARM_FAULT else ""
            for writer in (self._writer, getattr(self, "_pending", None)):
                self._note_fault(writer)

    def _note_fault(self, writer: EpisodeWriter | None) -> None:
        if writer is not None and self._arm_fault:
            writer.attrs.setdefault(FAULT_DURING, self._arm_fault)

    def _on_action(self, msg: JointState) -> None:
        if ros_msgs.source_of(msg.header.frame_id) != self.source:  # another source's (SOURCE#TURN)
            return
        decoded = self._decoded(ACTION, recordable_action, msg)
        if decoded is None:
            return
        if self.lockstep:  # the step it answers takes it (_lockstep_step)
            self.inputs.put(ACTION, ros_msgs.ns_from_stamp(msg.header.stamp), decoded[0])
            return
        action, sent = decoded[0], ros_msgs.wall_from_stamp(msg.header.stamp)
        with self._lock:
            writer, state, joints, frames = self._writer, self._state, self._joints, dict(self._frames)
        if writer is None:
            return
        if state is None or joints is None or sent - state[0] > self.max_state_age or set(frames) != set(CAMERA_NAMES):
            return  # no fresh observation for this action: nothing recorded (a dropped step)
        stamp, s7 = state
        key = CAMERA_IMAGE_KEYS
        step = RecordedStep(
            stamp=stamp, ee_pos=s7[:3], ee_ori=s7[3:6], gripper=float(s7[6]), joints=joints, action=action,
            action_time=sent, images={key[c]: stored(frames[c][1], self.convention) for c in CAMERA_NAMES},
            image_stamps={key[c]: frames[c][0] for c in CAMERA_NAMES},
            stale=frozenset(key[c] for c in CAMERA_NAMES if stamp - frames[c][0] > self.max_frame_age),
        )  # fmt: skip
        try:
            writer.add(step)
        except RecorderError as exc:
            self._fail(str(exc))

    def _on_action_result(self, msg: String) -> None:
        outcome = self._decoded(RESULT, ros_msgs.action_result_from_msg, msg)  # a bad one: counted and dropped
        if outcome is None or outcome.source != self.source:
            return
        applied = None if outcome.applied is None else np.array(outcome.applied, float)
        report = ArmReport(outcome.accepted, applied if outcome.accepted else None, outcome.servo_tick)
        if self.lockstep:  # kept by stamp: it may come before the step that records its action (_add)
            self.inputs.put(RESULT, round(outcome.stamp * 1e9), report)
        with self._lock:
            writer = self._writer
        if writer is not None:
            writer.arm_report(outcome.stamp, report)

    # ------------------------------------------------------------------ services
    def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        with self._lock:
            if self._writer is not None:
                res.success, res.message = False, f"already recording {self._writer.name}: save or discard it first"
                return res
        if self.plan is not None:  # the plan's next configuration is this demo's task
            config = self._refresh_plan_next()
            if config is None:
                res.success, res.message = False, "the collection plan is complete: every configuration has its demos"
                return res
            self.task = config.attrs()
            self.get_logger().info(f"plan: recording {config.setup()}")
        if self.follow:
            res.success, res.message = False, "this recorder records the world's episodes (follow_episodes)"
            return res
        try:
            writer = self._new_writer()
        except RecorderError as exc:
            res.success, res.message = False, str(exc)
            self._fail(str(exc))
            return res
        with self._lock:
            if self.lockstep:  # from the next control step on: where the world stands decides, not the wall clock
                self._pending, self._boundary = writer, ("start", self._next_step())
                res.success, res.message = True, f"recording {writer.name} from control step {self._boundary[1]}"
                return res
            self._writer = writer
        self._steps_at_report = 0
        res.success, res.message = True, f"recording {writer.name}"
        self.get_logger().info(res.message)
        self._publish_status()
        return res

    def _srv_save(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if self.lockstep:
            return self._at_boundary("save", res)
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is None:
            res.success, res.message = False, "not recording"
            return res
        self._start_save(writer)
        res.success, res.message = True, f"saving {writer.name} ({writer.steps} steps)"
        self._publish_status()
        return res

    @staticmethod
    def _cell(path: str) -> dict[str, Any]:
        from libero_workcell.cell_file import load_cell

        return load_cell(path).recorded()  # bring-up checked it against the graph it runs

    def _with_task(self, writer: EpisodeWriter) -> None:
        """The demo's task and (sim) the world's outcome into its attributes, as the save stores them."""
        for key, value in self._asked(self.task).items():  # the task may have become known after the start (sim)
            if key in PREFERENCE_KEYS:
                writer.attrs[key] = value
            else:
                writer.attrs.setdefault(key, value)
        if self._sim_metrics and "placed" in self._sim_metrics:  # sim: the outcome, as replay compares it
            m = self._sim_metrics
            writer.attrs.update({"placed": [bool(x) for x in m["placed"]], "SR": m.get("SR"), "PCR_T": m.get("PCR_T")})

    def _start_save(self, writer: EpisodeWriter) -> None:
        self._with_task(writer)
        thread = threading.Thread(target=self._save, args=(writer,), name=f"save-{writer.name}", daemon=False)
        self._saving.append(thread)
        thread.start()

    def _srv_discard(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if self.lockstep:
            return self._at_boundary("discard", res)
        with self._lock:
            writer, self._writer = self._writer, None
        if writer is None:
            res.success, res.message = False, "not recording"
            return res
        writer.discard()
        res.success, res.message = True, f"discarded {writer.name} ({writer.steps} steps)"
        self.get_logger().info(res.message)
        self._announce_next()
        self._publish_status()
        return res

    def _save(self, writer: EpisodeWriter) -> None:
        try:
            saved = writer.save()
        except Exception as exc:  # (RecorderError, or anything else: a save thread never dies silently)
            self.save_failures += 1
            self._save_failed = True
            self._fail(str(exc) if isinstance(exc, RecorderError) else f"saving {writer.name} failed: {exc!r}")
            return
        self._save_failed = False
        self.saved.append(saved)
        self.get_logger().info(
            f"saved {saved.name}: {saved.num_samples} steps, {saved.duration:.1f} s, {saved.dropped_steps} dropped, "
            f"stale frames {saved.stale_frames}, in {saved.save_latency:.2f} s; {self.session.num_demos} demos"
        )
        if self.plan is not None and (why := not_counted(self.session.record_of(saved.name))) is not None:
            self.get_logger().warning(f"{saved.name} does not count toward the collection plan: {why}")
        self._announce_next()
        self._publish_status()

    def _refresh_plan_next(self) -> Configuration | None:
        """The plan's next configuration (None: no plan, or the plan is complete), and ``plan_next`` from it."""
        if self.plan is None:
            self.plan_next = ""
            return None
        config = self.plan.next(self.session.demo_attrs())
        self.plan_next = "complete" if config is None else config.setup()
        return config

    def _announce_next(self) -> None:
        """The plan's next configuration: in the log, and in the status (``plan_next``)."""
        if self.plan is None:
            return
        config = self._refresh_plan_next()
        text = "the collection plan is complete" if config is None else f"next, set up {config.setup()}"
        self.get_logger().info(f"plan: {text}")

    # ------------------------------------------------------------------ lockstep: the world's control steps
    def _new_writer(self) -> EpisodeWriter:
        keys = tuple(CAMERA_IMAGE_KEYS[c] for c in CAMERA_NAMES)
        log = {"mcap_log": self.mcap_log} if self.mcap_log else {}
        writer = EpisodeWriter(self.session, {"robot": ROBOT, **log, **self._asked(self.task)}, keys, self.hz)
        with self._lock:
            self._note_fault(writer)  # started on an arm in fault
        return writer

    def _next_step(self) -> int:
        """The control step a command takes effect at: the world's current one if this recorder is still in it
        (it always waits there for the recorded source's decision, so a source that calls it in its step, as
        teleop does, lands in that very step), else the next. Where it lands depends on the world's clock,
        never on when the message came."""
        assert self.runner is not None
        p = self.runner.participant
        tick = p.current() if p is not None else None
        if tick is None:
            return 0
        spc = p.control_period_ns // p.servo_period_ns
        step = -(-tick.index // spc)  # the current control step, or the next if between two
        return step if step > self._done_step else step + 1

    def _at_boundary(self, what: str, res: Trigger.Response) -> Trigger.Response:
        with self._lock:
            if self.follow:
                res.success, res.message = False, "this recorder records the world's episodes (follow_episodes)"
            elif self._writer is None and self._pending is None:
                res.success, res.message = False, "not recording"
            else:
                name = (self._writer or self._pending).name
                self._boundary = (what, self._next_step())
                res.success, res.message = True, f"{what} {name} at control step {self._boundary[1]}"
        return res

    def _lockstep_step(self, step: Step) -> bool:
        """One control step of the world: the recorded source's decision first (a command it sends in this step
        lands in this step), then the step recorded exactly (its state, joints and frames, and the source's
        action for it, if it sent one) between the start and the save or discard due."""
        assert self.runner is not None and self.runner.participant is not None and step.frames_ns is not None
        acted = self.runner.source_acted(self.source, step)
        self._lockstep_boundaries(step, "start")
        with self._lock:
            writer = self._writer
        if writer is not None and acted and not step.paused:
            self.runner.waiting(2)
            obs = self.runner.gather({STATE: step.time_ns, JOINTS: step.time_ns, **step.frames_ns})
            got = self.runner.gather({ACTION: step.time_ns})
            if obs is not None and got is not None and not any(v is BAD for v in (*obs.values(), got[ACTION])):
                self._add(writer, step, obs, got[ACTION])
        self._lockstep_boundaries(step, "end")
        self._done_step = step.index
        self.runner.waiting(5)
        return False

    def _add(self, writer: EpisodeWriter, step: Step, obs: dict[str, Any], action: np.ndarray) -> None:
        assert step.frames_ns is not None
        s7, t = obs[STATE], ros_msgs.seconds_from_ns(step.time_ns)
        key = CAMERA_IMAGE_KEYS
        recorded = RecordedStep(
            stamp=t, ee_pos=s7[:3], ee_ori=s7[3:6], gripper=float(s7[6]), joints=obs[JOINTS], action=action,
            action_time=t, images={key[c]: stored(obs[c], self.convention) for c in CAMERA_NAMES},
            image_stamps={key[c]: ros_msgs.seconds_from_ns(step.frames_ns[c]) for c in CAMERA_NAMES},
        )  # fmt: skip
        try:
            writer.add(recorded)
        except RecorderError as exc:
            self._fail(str(exc))
        report = self.inputs.get(RESULT, step.time_ns)
        if report is not None:
            writer.arm_report(t, report)

    def _lockstep_boundaries(self, step: Step, phase: str) -> None:
        """At the ``start`` of a step: a start due now, or (``follow_episodes``) a new world episode; at its
        ``end``: a save or discard due now, or the world's episode over."""
        if self.follow:
            self._follow_episodes(step, phase)
            return
        with self._lock:
            b = self._boundary
            due = b is not None and step.index >= b[1] and (b[0] == "start") == (phase == "start")
            if not due:
                return
            self._boundary = None
            what = b[0]
            if what == "start":
                self._writer, self._pending = self._pending, None
                writer = self._writer
            else:
                writer, self._writer, self._pending = self._writer or self._pending, None, None
        if writer is None:
            return
        if what == "start":
            self.get_logger().info(f"recording {writer.name} from control step {step.index}")
        elif what == "save":
            self._start_save(writer)
        else:
            writer.discard()
            self.get_logger().info(f"discarded {writer.name} ({writer.steps} steps)")
            self._announce_next()
        self._publish_status()

    def _follow_episodes(self, step: Step, phase: str) -> None:
        with self._lock:
            writer = self._writer
        if phase == "end":
            if writer is not None and step.paused:
                self._save_episode(writer, self._episode)
            return
        if writer is not None and step.episode != self._episode:  # a reset before the end: save what there is
            self._save_episode(writer, self._episode)
            writer = None
        if writer is None and not step.paused and step.episode != self._episode:
            self._episode = step.episode
            try:
                writer = self._new_writer()
            except RecorderError as exc:
                self._fail(str(exc))
                return
            with self._lock:
                self._writer = writer
            self.get_logger().info(f"recording {writer.name}: world episode {step.episode}")
            self._publish_status()

    def _save_episode(self, writer: EpisodeWriter, episode: int) -> None:
        """follow_episodes: save the recording of a world episode, with its task and the world's final outcome
        (its report of the episode's end is on its way: the world published it before this step)."""
        with self._lock:
            self._writer = None
        deadline = time.monotonic() + EPISODE_REPORT_TIMEOUT
        while (info := self._episodes.get(episode)) is None or not info.get("done"):
            if time.monotonic() > deadline or self.runner is None or self.runner.stopping.is_set():
                break
            time.sleep(0.01)
        if info is not None:
            self.task = {**info["spec"], "task_spec": json.dumps(info["spec"])}
            writer.attrs.update(self._asked(self.task))
            self._sim_metrics = info.get("metrics")
        self._start_save(writer)
        self._publish_status()

    # ------------------------------------------------------------------ status
    def _fail(self, message: str) -> None:
        """Log and report an error once (an episode whose writer failed refuses every later step alike)."""
        if message == self._last_error:
            return
        self._last_error = message
        self.get_logger().error(message)
        self._publish_status()

    def _publish_status(self) -> None:
        with self._lock:
            w = self._writer
        status = {
            "recording": w is not None, "episode": w.name if w else None, "steps": w.steps if w else 0,
            "duration": round(w.duration, 3) if w else 0.0, "dropped": w.dropped_steps() if w else 0,
            "stale_frames": w.stale_counts() if w else {},
            "num_demos": self.session.num_demos, "saved": [s.name for s in self.saved], "saving": self.saving,
            "error": self._last_error, "save_failures": self.save_failures, "bad_messages": dict(self.bad_messages),
            "set_aside": sorted(self.session.set_aside), "session_file": str(self.session.path),
            "last_saved": self._last_saved(), "plan_next": self.plan_next,
        }  # fmt: skip
        self._status_pub.publish(String(data=json.dumps(status)))
        self._publish_diagnostics(status)

    def _last_saved(self) -> dict[str, Any] | None:
        """The demo saved last: its name, steps and first and last step's times (what a session log records of
        it, session_log.node)."""
        if not self.saved:
            return None
        s = self.saved[-1]
        return {"name": s.name, "num_samples": s.num_samples, "start_time": s.start_time, "end_time": s.end_time}

    def _publish_diagnostics(self, status: dict[str, Any]) -> None:
        """ERROR while the latest save has failed; WARN once any error or bad message was seen; else OK."""
        if self._save_failed:
            level = ros_msgs.DIAG_ERROR
        elif self._last_error or self.bad_messages:
            level = ros_msgs.DIAG_WARN
        else:
            level = ros_msgs.DIAG_OK
        message = self._last_error or ("recording" if status["recording"] else "idle")
        values = {k: v for k, v in status.items() if k not in ("saved", "bad_messages", "error", "last_saved")}
        values.update({f"bad_{k}": v for k, v in self.bad_messages.items()}, last_error=self._last_error)
        self._diag_pub.publish(ros_msgs.diagnostics_msg("recorder", self.source, level, message, values,
                                                        self.get_clock().now().to_msg()))  # fmt: skip

    def _report(self) -> None:
        with self._lock:
            w = self._writer
        if w is not None:
            last, self._steps_at_report = w.steps - self._steps_at_report, w.steps
            line, slow = console_line(w.name, w.duration, w.steps, w.dropped_steps(), last, self.hz)
            if slow:  # (rclpy refuses one call site logging at two severities: two calls)
                self.get_logger().warning(line)
            else:
                self.get_logger().info(line)
        self._publish_status()

    @property
    def saving(self) -> int:
        """Saves still running (a save reporting its own end does not count itself)."""
        return sum(t.is_alive() and t is not threading.current_thread() for t in self._saving)

    def shutdown(self) -> None:
        """Saves in progress complete, and an episode still recording is completed as interrupted (kept, never
        counted: recorder.session_file), whatever stopped the graph; further stop signals wait for that."""
        with self._stops.shutting_down():
            if self.runner is not None:
                self.runner.stop()
            for thread in self._saving:
                thread.join()  # a save in progress completes: nothing the operator saved is lost
            with self._lock:
                writer, self._writer = self._writer, None
                pending, self._pending = (self._pending, None) if self.lockstep else (None, None)
            if pending is not None:  # started, not yet at its first step: nothing recorded
                pending.discard()
            if writer is not None:
                self._keep_interrupted(writer, interrupted_reason(self._stops.first))

    def _keep_interrupted(self, writer: EpisodeWriter, reason: str) -> None:
        """Complete ``writer``'s episode as interrupted, with its task and ``reason`` (here, not in a thread)."""
        self._with_task(writer)
        try:
            saved = writer.save(interrupted=reason)
        except Exception as exc:  # (RecorderError: fewer than 2 steps, a failed writer; its partial stays marked)
            self.get_logger().error(f"{writer.name}: {reason}; it could not be kept: {exc}")
            return
        where = self.session.episode_path(saved.name, interrupted=True)
        self.get_logger().warning(f"{saved.name}: {reason}; kept as {where.name} ({saved.num_samples} steps, in "
                                  f"{saved.save_latency:.2f} s) beside the session: never counted or exported as a "
                                  "demo unless asked (docs/data.md)")  # fmt: skip


def main(args: list[str] | None = None) -> None:
    # orphaned too, its shutdown completes the saves in progress and keeps the episode being recorded: unbounded
    run_node(RecorderNode, "recorder", args, startup_errors=(ValueError, RuntimeError, RecorderError),
             orphan_bound=None)  # fmt: skip


if __name__ == "__main__":
    main()
