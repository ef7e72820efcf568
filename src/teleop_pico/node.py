"""teleop_pico node: the right controller (PICO headset, or a scripted session) as action source ``teleop``.

At ``control_hz`` it reads the source, runs the teleop core (teleop_pico.core: clutch, trigger, holds) on
the newest robot state and publishes the 7-D action. With no fresh state (older than ``max_state_age``)
it publishes nothing, so the arm's watchdog holds. Every action is checked against the contract before it is
published (teleop_pico.output): a bad headset sample or robot state makes the core hold, and the holds are
counted and reported on ``/teleop/status`` (with the reason) and, once per change, in the log. Button presses
become recorder commands (A: start, or stop and save while recording; B: discard), sent to the recorder's services.

``source``: ``headset`` (xrobotoolkit-sdk; its PC service must run with the headset connected) or
``scripted`` (``session_file``, played ``session_repeats`` times; with ``reset_sim`` the simulated world
is reset before each play, so every run meets the task from its start). The node finishes after the last
scripted run once the recorder has saved everything (``exit_when_done``).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Final

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.parameter_client import AsyncParameterClient
from sensor_msgs.msg import JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs
from libero_workcell.config_files import find_config_file
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SOURCE_TELEOP, Params, Qos, Services, Topics
from libero_workcell.json_topics import ArmModeReport, JsonTopicReader, RecorderStatus, SimEpisodeReport
from libero_workcell.node_main import log_outcome, run_node
from libero_workcell.node_params import declare_all, declare_config, prefixed, refuse_runtime_changes
from libero_workcell.rate import CONTROL_PRIORITY
from libero_workcell.ros_qos import qos
from teleop_pico.config import TeleopConfig
from teleop_pico.core import SessionCommand, TeleopCore, session_command
from teleop_pico.output import Outgoing, TeleopOutput
from teleop_pico.sources import ControllerSource, HeadsetSource, ScriptedSource, SessionScript, load_session
from transports.node_steps import NodeSteps
from transports.stepping import Step

SOURCES = ("headset", "scripted")
TASK_KEYS = ("workpieces", "slot_permutation", "belt_speed", "arrival_interval", "first_arrival", "seed")
TELEOP_DEFAULTS = {k: v for k, v in TeleopConfig.parameter_defaults().items() if k != Params.CONTROL_HZ}
CONFIG_PARAMS = prefixed("teleop", TELEOP_DEFAULTS)  # teleop.<TeleopConfig field>
STATE = "state"
WORLD_NODE = "sim_world"
COMMAND_TIMEOUT = 10.0  # s (wall) a lockstep step waits for the recorder to take a command
STATUS_REPEAT_S = 1.0  # wall s: /teleop/status is sent on each change and repeated this often
COMMAND_SERVICES = {
    SessionCommand.START: Services.RECORDER_START,
    SessionCommand.SAVE: Services.RECORDER_SAVE,
    SessionCommand.DISCARD: Services.RECORDER_DISCARD,
}


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    "source": "headset",
    "session_file": "",
    "session_repeats": 1,
    "reset_sim": False,
    "max_state_age": 0.1,  # s
    "exit_when_done": False,
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
    **CONFIG_PARAMS,
}


class TeleopNode(Node):
    def __init__(self) -> None:
        super().__init__("teleop_pico")
        declare_all(self, PARAMETERS)
        values = declare_config(self, "teleop", TELEOP_DEFAULTS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        self.hz = float(p(Params.CONTROL_HZ))
        # a scripted session's runs start at once: lockstep waits until the recorder is seen too (their first step
        # must not depend on when a message came)
        self.steps = NodeSteps(self, self.hz, self._step, inputs=(STATE,), source=SOURCE_TELEOP,
                               priority=CONTROL_PRIORITY,
                               also_ready=lambda: self._script is None or self._recorder_seen)  # fmt: skip
        self.lockstep = self.steps.lockstep
        # the core behind the publish path: every action validated before it is sent, fault holds counted. In
        # lockstep the simulated arm enables itself at the world's first tick: the clutch may engage from it.
        config = TeleopConfig.from_mapping({**values, "control_hz": self.hz})
        self.output = TeleopOutput(TeleopCore(config, arm_enabled=self.lockstep))
        # the turn this node's actions carry (ros_msgs.new_turn): a new one at each of the core's starts (a clutch
        # engaged, a trigger edge); the arm follows a turn only from its start on the enabled arm to its next stop
        self.turn, self._starts = 0, 0
        kind = str(p("source"))
        if kind not in SOURCES:
            raise ValueError(f"source must be one of {list(SOURCES)}, got {kind!r}")
        self.max_state_age = float(p("max_state_age"))
        self.reset_sim, self.exit_when_done = bool(p("reset_sim")), bool(p("exit_when_done"))
        self._script: SessionScript | None = None
        self._runs_left = 0
        if kind == "scripted":
            try:
                session = find_config_file(str(p("session_file")))
            except FileNotFoundError as exc:
                raise ValueError(f"session_file: {exc}") from None
            self._script = load_session(session)
            self._runs_left = int(p("session_repeats"))
            if self._runs_left < 1:
                raise ValueError(f"session_repeats must be >= 1, got {self._runs_left}")
        self._now = 0.0  # lockstep: the step's sim time
        self._now_ns = self._run_ns = 0  # lockstep: the step's and the run's first step's sim clock (integer ns)
        self._reset_from = -1  # lockstep: the world episode a scripted run's reset was asked in
        self.inputs = self.steps.inputs
        self._lock = threading.Lock()
        self._state: tuple[float, np.ndarray] | None = None  # (monotonic receipt, state7)
        self._recording = False
        self._recorder_seen = False
        self.source: ControllerSource | None = HeadsetSource() if kind == "headset" else None
        self.done = threading.Event()
        self._pub = self.steps.publisher(JointState, Topics.ACTION, Qos.COMMAND)
        self._status_pub = self.create_publisher(String, Topics.TELEOP_STATUS, qos(Qos.STATE))
        self._status_text: str | None = None  # the last status sent: repeated every STATUS_REPEAT_S of wall time
        self.create_timer(STATUS_REPEAT_S, self._repeat_status, clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.steps.read(JointState, Topics.ROBOT_STATE, Qos.STATE, self._on_state)
        # the JSON topics, each decoded and checked in one place (libero_workcell.json_topics): a bad message is
        # counted and dropped, the last good one stands
        log = self.get_logger()
        self._readers = {Topics.RECORDER_STATUS: JsonTopicReader(RecorderStatus, Topics.RECORDER_STATUS, log),
                         Topics.ARM_MODE: JsonTopicReader(ArmModeReport, Topics.ARM_MODE, log),
                         Topics.SIM_EPISODE: JsonTopicReader(SimEpisodeReport, Topics.SIM_EPISODE, log)}  # fmt: skip
        for topic, handle in ((Topics.RECORDER_STATUS, self._on_recorder), (Topics.ARM_MODE, self._on_arm_mode)):
            self.create_subscription(String, topic, self._readers[topic].then(handle), qos(Qos.LATCHED))
        if self._script is not None and self._script.task is not None:
            reader = self._readers[Topics.SIM_EPISODE]
            self.create_subscription(String, Topics.SIM_EPISODE, reader.then(self._on_episode), qos(Qos.LATCHED))
        self._task_checked = False
        self._recorder_clients = {c: self.create_client(Trigger, name) for c, name in COMMAND_SERVICES.items()}
        self._reset = self.create_client(Trigger, Services.SIM_RESET) if self.reset_sim else None
        # A scripted session brings the task it was made for: the world is set to it before its first reset.
        self._world_task = self._session_world_task() if self._reset is not None else None
        self._world_params = AsyncParameterClient(self, WORLD_NODE) if self._world_task is not None else None
        self._starting = False
        self._pending_run = False
        self.steps.start()
        clock = "the world's control steps (lockstep)" if self.lockstep else f"{self.hz} Hz"
        self.get_logger().info(f"teleop from the {kind} source: actions as {SOURCE_TELEOP!r} at {clock}")

    @property
    def core(self) -> TeleopCore:
        return self.output.core

    @property
    def loop(self):
        """The wall-clock loop's timing (None in lockstep)."""
        return self.steps.loop

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is not None:
            self.inputs.put(STATE, ros_msgs.ns_from_stamp(msg.header.stamp), state)
            with self._lock:
                self._state = (time.monotonic(), state)

    def _on_arm_mode(self, report: ArmModeReport) -> None:
        """A stop, homing or fault of the arm releases the clutch; it engages again only from a fresh grip on the
        enabled arm (teleop_pico.core)."""
        if self.core.engaged and not report.driven:
            self.get_logger().warning(f"the arm is {report.mode}: clutch released; release the grip and engage it "
                                      "again once the arm is enabled")  # fmt: skip
        self.core.arm_driven(report.driven)

    def _on_episode(self, report: SimEpisodeReport) -> None:
        """A scripted demonstration is made for one task: say so loudly if the world holds another."""
        spec, made_for = report.spec, self._script.task if self._script else None
        if self._task_checked or not made_for:
            return
        self._task_checked = True
        differs = {k: (spec.get(k), v) for k, v in made_for.items() if k in TASK_KEYS and spec.get(k) != v}
        if differs:
            self.get_logger().error(
                f"the session was made for another task (world vs session: {differs}): it will not do the task; "
                "set the world to the session's task (docs/teleop.md)"
            )

    def _on_recorder(self, status: RecorderStatus) -> None:
        self._recording = status.recording
        self._recorder_seen = True
        over = self._script is not None and self._runs_left == 0 and self.source is None
        over = over and not self._pending_run and not self._starting
        if over and not self._recording and not status.saving:
            self.done.set()

    # ------------------------------------------------------------------ the control loop
    def _step(self, step: Step) -> bool:
        if self.lockstep:  # the state of this step exactly; the session's clock is the world's
            self._now, self._now_ns = step.time, step.time_ns
            now = step.time
            got = self.steps.gather({STATE: step.time_ns})
            state = None if got is None else (now, got[STATE])
            fresh = state is not None
        else:
            now = time.monotonic()
            with self._lock:
                state = self._state
            fresh = state is not None and now - state[0] <= self.max_state_age
        if self.source is None:
            started = step.episode > self._reset_from if self.lockstep else fresh
            if self._pending_run and started:  # the reset world's state is here: play from its first step
                self._pending_run = False
                # in lockstep the session's time is counted in integer ns from its first step: every run of it
                # reads the same samples, whenever it starts
                self._run_ns = self._now_ns
                clock = (lambda: (self._now_ns - self._run_ns) * 1e-9) if self.lockstep else time.monotonic
                self.source = ScriptedSource(self._script, clock)
                self.get_logger().info(f"scripted run started ({self._runs_left} more after this)")
            elif not self._pending_run:
                self._next_run(step)
                return False
            else:
                return False
        sample = self.source.read()
        if isinstance(self.source, ScriptedSource) and self.source.finished:
            self.source = None  # this run is over; the next starts from a reset world
            if self._recording:  # its save press never came through: the run's end ends its episode
                self.get_logger().warning("the scripted run ended while recording: saving its episode")
                self._call(SessionCommand.SAVE)
            return False
        if not fresh:  # no fresh state: nothing is sent, the arm's watchdog holds it; the buttons still work
            self._report(self.output.step_without_state(sample))
            return False
        health_clock = time.monotonic() if isinstance(self.source, HeadsetSource) else now  # a headset is live
        out = self.output.step(sample, state[1], health_clock)  # the action validated: never an invalid one
        if self.core.starts != self._starts:  # the operator started it again: a new turn from this action on
            self._starts, self.turn = self.core.starts, ros_msgs.new_turn()
        if out.action is not None:
            stamp = ros_msgs.stamp_from_ns(step.time_ns) if self.lockstep else None
            self._pub.publish(ros_msgs.action_msg(out.action, SOURCE_TELEOP, stamp, turn=self.turn))
        self._report(out)
        return out.action is not None

    def _repeat_status(self) -> None:
        """The status again, changed or not: a console or a session log that joined after the last change sees it
        (the topic is volatile: a late reader gets nothing of the past)."""
        if self._status_text is not None:
            self._status_text = self._status_json()  # (its counts may have grown meanwhile)
            self._status_pub.publish(String(data=self._status_text))

    def _status_json(self) -> str:
        """/teleop/status: the core's status, and the bad messages dropped on each JSON topic, if any."""
        dropped = {topic: r.dropped for topic, r in self._readers.items() if r.dropped}
        return json.dumps({**self.output.status(), **({"dropped": dropped} if dropped else {})})

    def _report(self, out: Outgoing) -> None:
        """The step's button presses to the recorder; a changed status to /teleop/status and, once, the log."""
        self._handle(out.step.presses)
        if not out.changed:
            return
        self._status_text = self._status_json()
        self._status_pub.publish(String(data=self._status_text))
        said = self.output.transition()
        if said is not None:
            level, text = said
            log = self.get_logger()
            (log.warning if level == "warning" else log.info)(text, throttle_duration_sec=1.0)

    def _handle(self, presses) -> None:
        for button in presses:
            command = session_command(button, self._recording)
            if command is not None:
                self._call(command)

    def _next_run(self, step: Step) -> None:
        """Scripted: start the next run (after a world reset, if asked), once the recorder is there. In lockstep
        the run starts on the reset episode's first control step, whenever the reset's answer comes."""
        if self._script is None or self._runs_left == 0 or self._starting or not self._recorder_seen:
            return
        if self._recording:
            return  # the last run's episode is still open: its save press comes first
        self._starting = True
        if self._reset is None:
            self._reset_from = step.episode - 1
            self._begin_run()
            return
        if not self._reset.service_is_ready():
            self._starting = False
            return
        if self._world_task is not None:  # before the first reset, the world takes the session's task
            self._set_world_task()
            self._world_task = None
        future = self._reset.call_async(Trigger.Request())
        if self.lockstep:
            self._reset_from = step.episode
            self._begin_run()
            future.add_done_callback(self._reset_answered)
        else:
            future.add_done_callback(lambda _f: self._begin_run())

    def _session_world_task(self) -> dict | None:
        """The sim_world parameters of the scripted session's task, or None when it names none."""
        task = self._script.task if self._script is not None else None
        if not task:
            return None
        out = {k: task[k] for k in ("seed", "belt_speed", "arrival_interval", "first_arrival") if k in task}
        if "combination" in task:
            out["combination"] = int(task["combination"])
        if "slot_permutation" in task:
            out["slot_permutation"] = [int(i) for i in task["slot_permutation"]]
        return out

    def _set_world_task(self) -> bool:
        """Set the world to the session's task (once, before the first reset); False if it refused."""
        params = [Parameter(k, value=float(v) if k in ("belt_speed", "arrival_interval", "first_arrival") else v)
                  for k, v in (self._world_task or {}).items()]  # fmt: skip
        client = self._world_params
        assert client is not None
        if not client.wait_for_services(timeout_sec=COMMAND_TIMEOUT):
            self.get_logger().error(f"{WORLD_NODE} has no parameter service: the world keeps its own task")
            return False
        future = client.set_parameters(params)
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while not future.done() and time.monotonic() < deadline:
            time.sleep(0.001)
        results = future.result().results if future.done() else []
        refused = [r.reason for r in results if not r.successful] or ([] if results else ["no answer"])
        if refused:
            self.get_logger().error(f"the world refused the session's task ({refused}): it keeps its own")
            return False
        self.get_logger().info(f"world set to the session's task: {self._world_task}")
        return True

    def _reset_answered(self, future) -> None:
        res = future.result()
        if not res.success:
            self.get_logger().error(f"{Services.SIM_RESET}: {res.message}")

    def _begin_run(self) -> None:
        self._runs_left -= 1
        # a fresh clutch: the first sample latches the reset arm
        self.output.core = TeleopCore(self.core.config, arm_enabled=self.core.arm_ok)
        with self._lock:
            self._state = None  # states from before the reset must not start the run
        self._pending_run = True
        self._starting = False

    def _call(self, command: SessionCommand) -> None:
        client = self._recorder_clients[command]
        if not client.service_is_ready():
            self.get_logger().error(f"{COMMAND_SERVICES[command]} is not available: is the recorder running?")
            return
        if command is SessionCommand.START:
            self._recording = True  # at once: a second press before the status arrives means save
        elif command is SessionCommand.SAVE:
            self._recording = False

        def done(future) -> None:
            res = future.result()
            log_outcome(self.get_logger(), res.success, f"{command.value}: {res.message}")

        future = client.call_async(Trigger.Request())
        future.add_done_callback(done)
        if self.lockstep:  # hold this step until the recorder took it: it acts at the next control step
            deadline = time.monotonic() + COMMAND_TIMEOUT
            while not future.done() and time.monotonic() < deadline and not self.steps.stopping.is_set():
                time.sleep(0.001)

    @property
    def finished(self) -> bool:
        return self.exit_when_done and self.done.is_set()

    def shutdown(self) -> None:
        self.steps.stop()
        if self.source is not None:
            self.source.close()


def main(args: list[str] | None = None) -> None:
    run_node(TeleopNode, "teleop_pico", args)


if __name__ == "__main__":
    main()
