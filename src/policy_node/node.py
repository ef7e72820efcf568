"""policy_node: a VLA policy served by a policy server drives the arm as source ``policy``.

The server is ``policy.url``; its scheme selects the client (policy_node.clients; ``ws://``, ``wss://``:
openpi's websocket server). At ``control_hz`` it takes the newest robot state and both camera frames, and runs
one step of :class:`policy_node.runner.PolicyRunner` (the observation that protocol's adapter builds, for
openpi the one its LIBERO client sends; chunks requested synchronously or ahead of time; every action
validated): the action it hands out is published on
``/workcell/action``; when it hands out none (no chunk yet, the server lost, the observation too old),
nothing is published and aubo_bridge's watchdog holds the arm within 1.5 control periods.

Services (std_srvs/Trigger): ``/policy/start`` begins an episode (the start wait, then the policy drives; on the
physical cell only with a task: refused with the reason without one),
``/policy/stop`` ends it; with ``autostart`` (default, sim only) the first episode starts once the arm is
enabled. A start is refused while the arm is not enabled, and the arm leaving the modes sources drive in (a stop,
homing, a fault: ``/aubo/mode``) ends the episode: every episode carries a turn of its own (ros_msgs.new_turn),
and the arm follows a turn only from its start to its next stop (aubo_bridge.arbiter). On the simulated
workcell in lockstep a step is the world's control step, taken on that step's exact observation, and with
``autostart`` every world episode is a policy episode (restarted at its first step, over at its end); a
reply's delay counts in sim time (``policy.latency``: 0, milliseconds or measured; policy_node.runner).
``/policy/status`` (JSON, every step) and ``/diagnostics`` (1 Hz) say what it is doing; ``timing_path`` (a
JSON-lines file, one line per step: which action of which chunk, the round trip, the server's inference time,
the observation's age, the delay in steps, and end to end the frames' exposure, the action's send and its first
servo target, joined from aubo_bridge's /workcell/action_result) keeps the evidence. Camera frames are
preprocessed for the policy in their callback (policy_node.observation.FrameInput): the tick only assembles.
Settings: ``policy.<field>`` of :class:`policy_node.config.PolicyConfig`; ``policy.task`` empty takes the
simulated world's instruction.

The log says when the arm starts holding on a fault and why, and when the policy recovers (once per change,
rate-limited), and ends each episode with a cadence report (policy_node.cadence). A bad input message (a frame
whose data is not height x width x 3, a non-finite state) is dropped and counted (policy_node.inputs): no
callback raises, so no message ends the node.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs
from libero_workcell.cell_file import redact_text
from libero_workcell.contract import CAMERA_NAMES, SOURCE_POLICY, Params, Qos, Services, Topics
from libero_workcell.json_topics import ArmModeReport, JsonTopicReader, SimEpisodeReport, decode
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, declare_config, fixed_at_startup, prefixed
from libero_workcell.rate import CONTROL_PRIORITY
from libero_workcell.ros_qos import qos
from policy_node.cadence import WARNING, Cadence
from policy_node.config import TASK_PARAM, PolicyConfig
from policy_node.inputs import InputDrops, image_from_msg, state_from_msg
from policy_node.observation import LatestInputs, Snapshot, snapshot_of
from policy_node.runner import PolicyRunner, StepRecord
from transports.node_steps import NodeSteps
from transports.stepping import Step

POLICY_DEFAULTS = {k: v for k, v in PolicyConfig.parameter_defaults().items() if k != Params.CONTROL_HZ}
CONFIG_PARAMS = prefixed("policy", POLICY_DEFAULTS)  # policy.<PolicyConfig field>
STATE = "state"
RESULT_WAIT_S: Final = 1.0  # wall s a step's timing line waits for its action's result (servo_t) before it is written


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.CONTROL_HZ: 20.0,
    "autostart": True,
    "timing_path": "",  # JSON lines, one per step; "" = none
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
    **CONFIG_PARAMS,
}


class PolicyNode(Node):
    def __init__(self) -> None:
        super().__init__("policy_node")
        declare_all(self, PARAMETERS)
        values = declare_config(self, "policy", POLICY_DEFAULTS)
        self.add_on_set_parameters_callback(self._on_params)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        self.use_sim = bool(p(Params.USE_SIM))
        self.config = PolicyConfig.from_mapping(
            {**values, "control_hz": float(self.get_parameter(Params.CONTROL_HZ).value)}
        )
        # lockstep takes part once the server answers too (a step never waits for a connection: that would depend
        # on the machine)
        self.steps = NodeSteps(self, self.config.control_hz, self._step, inputs=(STATE, *CAMERA_NAMES),
                               source=SOURCE_POLICY, priority=CONTROL_PRIORITY,
                               also_ready=lambda: self.runner.connected)  # fmt: skip
        self.lockstep = self.steps.lockstep
        self.task = self.config.task
        timing = str(self.get_parameter("timing_path").value)
        self._timing: IO[str] | None = None
        # timing lines waiting for their action's result (/workcell/action_result): [key, row, deadline], in step
        # order; rows_by_key: the rows not joined yet, by their action's stamp (microseconds)
        self._unjoined: deque[tuple[int | None, dict[str, Any], float]] = deque()
        self._rows_by_key: dict[int, dict[str, Any]] = {}
        if timing:
            Path(timing).parent.mkdir(parents=True, exist_ok=True)
            self._timing = open(timing, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed at shutdown)
        self._lock = threading.Lock()
        self.drops = InputDrops(self.get_logger())
        self.cadence = Cadence(self.config.control_hz)
        self.episode_report = ""  # the last episode's cadence report (policy_node.cadence)
        # On the physical cell the policy never drives by itself: only an explicit /policy/start (logged) starts
        # it, whatever autostart says (enabling the arm must not hand it to a policy already streaming).
        self.autostart = bool(self.get_parameter("autostart").value) and bool(p(Params.USE_SIM))
        if bool(self.get_parameter("autostart").value) and not self.autostart:
            self.get_logger().warning("physical workcell: autostart is ignored; the policy drives only after "
                                      f"{Services.POLICY_START} (workcell call policy start)")  # fmt: skip
        # The turn this node's actions carry (ros_msgs.new_turn): a new one at every start. A stop, homing or a
        # fault of the arm ends the episode here and the turn at the arm (aubo_bridge.arbiter): it drives again
        # only after an explicit start on the enabled arm. Autostart (sim) starts the first episode once the arm
        # is enabled; in lockstep every world episode starts one at its first step (the arm enables at the first).
        self.running = self.autostart and self.lockstep
        self._autostart_pending = self.autostart and not self.lockstep
        self.turn = ros_msgs.new_turn() if self.running else 0
        self.arm: ArmModeReport | None = None  # the arm's mode as /aubo/mode last said it
        self.ended_by = ""  # why the arm ended the last episode ("" when it did not)
        self.records: list[StepRecord] = []  # the last few, for status and tests
        self._now = 0.0  # lockstep: the step's sim time, the runner's clock
        self.runner = PolicyRunner(self.config, clock=lambda: self._now, sim=True) if self.lockstep else \
            PolicyRunner(self.config)
        self.inputs = self.steps.inputs  # lockstep: by stamp (frames as FrameInput)
        # wall clock: the newest, each frame preprocessed for the policy in its callback (the tick only assembles)
        self.latest = LatestInputs(CAMERA_NAMES, self.runner.frame_input, self.config.image_view)
        self._instructions: dict[int, str] = {}  # sim: each world episode's instruction
        self._episode = -1
        self._pub = self.steps.publisher(JointState, Topics.ACTION, Qos.COMMAND)
        self._status = self.create_publisher(String, Topics.POLICY_STATUS, qos(Qos.STATE))
        self._diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        self.steps.read(JointState, Topics.ROBOT_STATE, Qos.STATE, self._on_state)
        self.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        self._arm_reader = JsonTopicReader(ArmModeReport, Topics.ARM_MODE, self.get_logger())
        self.create_subscription(String, Topics.ARM_MODE, self._arm_reader.then(self._on_arm_mode), qos(Qos.LATCHED))
        self.create_subscription(String, Topics.ACTION_RESULT, self._on_action_result, self.steps.qos(Qos.COMMAND))
        self.steps.read_frames(self._on_image)
        self.create_service(Trigger, Services.POLICY_START, self._srv_start)
        self.create_service(Trigger, Services.POLICY_STOP, self._srv_stop)
        self.create_timer(1.0, self._publish_diagnostics)
        if self._timing is not None:  # a line whose result never comes is written once its wait is over, even when
            # nothing else happens then (an episode's last steps: the world paused; sim time stands, the wall's not)
            # (a lambda: an executor hands a callback that takes an argument the timer's info)
            self.create_timer(RESULT_WAIT_S / 4, lambda: self._flush_timing(),
                              clock=Clock(clock_type=ClockType.STEADY_TIME))  # fmt: skip
        self.steps.start()
        c = self.config
        # an empty task takes the simulated world's instruction; on the physical cell there is none to take
        task = repr(self.task) if self.task else "the world's" if self.use_sim else "none (`workcell call policy task`)"
        self.get_logger().info(
            f"policy from {redact_text(c.url)} as {SOURCE_POLICY!r} at {c.control_hz:g} Hz: {c.mode}, replan_steps "
            f"{c.replan_steps}, images {c.image_view}, state {c.state_format}, task {task}"
            + (f", preference {c.condition.spec!r} ({c.condition.kind}: {c.preference_text!r})" if c.preference else "")
        )

    @property
    def loop(self):
        """The wall-clock loop's timing (None in lockstep)."""
        return self.steps.loop

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg: JointState) -> None:
        state = self.drops.decode(STATE, state_from_msg, msg)
        if state is not None:
            self.inputs.put(STATE, ros_msgs.ns_from_stamp(msg.header.stamp), state)
            self.latest.put_state(ros_msgs.wall_from_stamp(msg.header.stamp), state)

    def _on_image(self, camera: str, msg: Image) -> None:
        """The frame is made ready for the policy here, as it arrives (the protocol's transform; about 1.7 ms
        for openpi's resize-with-pad), and stored with its own stamp as one FrameInput. Not while the policy is
        stopped: an idle node would spend that on every frame of both cameras (the first request after a start
        transforms the frames it takes, to the same bytes)."""
        rgb = self.drops.decode(camera, image_from_msg, msg)
        if rgb is not None:
            stamp_ns = ros_msgs.ns_from_stamp(msg.header.stamp)  # the stamp it is stored by, in s as Step.time reads it
            prepare = self.running
            frame = self.drops.decode(camera, lambda _m: self.latest.frame(stamp_ns * 1e-9, rgb, prepare), msg)
            if frame is None:
                return
            self.inputs.put(camera, stamp_ns, frame)
            self.latest.put_frame(camera, frame)

    def _on_action_result(self, msg: String) -> None:
        """The arm bridge's result of one of this node's actions: when its first servo target went out (``servo_t``)
        joins that step's timing line, with the end-to-end latency from the camera frames' exposure."""
        outcome = self.drops.decode("action_result", ros_msgs.action_result_from_msg, msg)
        if outcome is None or outcome.source != SOURCE_POLICY or outcome.servo_time is None:
            return
        with self._lock:
            row = self._rows_by_key.pop(_result_key(outcome.stamp), None)
            if row is not None:
                row["servo_t"] = outcome.servo_time
                if row.get("exposure_t") is not None:
                    row["e2e_ms"] = (outcome.servo_time - row["exposure_t"]) * 1e3
        self._flush_timing()

    def _timing_row(self, row: dict[str, Any], key: int | None) -> None:
        """Queue a step's timing line: written once its action's result (``key``: _result_key of its stamp) joined
        it (or RESULT_WAIT_S passed; at once with no action), in step order."""
        if self._timing is None:
            return
        with self._lock:
            self._unjoined.append((key, row, time.monotonic() + RESULT_WAIT_S))
            if key is not None:
                self._rows_by_key[key] = row
        self._flush_timing()

    def _flush_timing(self, force: bool = False) -> None:
        with self._lock:
            while self._unjoined and self._timing is not None:
                key, row, deadline = self._unjoined[0]
                if key is not None and key in self._rows_by_key and not force and time.monotonic() < deadline:
                    return
                self._unjoined.popleft()
                self._rows_by_key.pop(key, None)
                self._timing.write(json.dumps(row) + "\n")

    def _on_episode(self, msg: String) -> None:
        report = self.drops.decode("episode", lambda m: decode(SimEpisodeReport, m.data, Topics.SIM_EPISODE), msg)
        if report is None:
            return
        number, instruction = report.episode, report.instruction
        with self._lock:
            self._instructions[number] = instruction
        if not self.config.task and instruction and not self.lockstep:  # sim: the world's instruction is the task
            self.task = instruction

    def snapshot(self) -> Snapshot | None:
        return self.latest.snapshot()

    # ------------------------------------------------------------------ the control loop
    def _lockstep_snapshot(self, step: Step) -> Snapshot | None:
        assert step.frames_ns is not None
        got = self.steps.gather({STATE: step.time_ns, **step.frames_ns})
        if got is None:
            return None
        # each FrameInput carries its own stamp (the one it was stored by: this step's frame, sim time)
        return snapshot_of(got[STATE], step.time, got["external"], got["wrist"])

    def _episode_task(self, step: Step) -> str:
        """Lockstep: this world episode's instruction (its report is published before its first tick)."""
        if self.config.task:
            return self.config.task
        deadline = time.monotonic() + 5.0
        while True:
            with self._lock:
                instruction = self._instructions.get(step.episode)
            if instruction is not None or time.monotonic() > deadline or self.steps.stopping.is_set():
                return instruction or ""
            time.sleep(0.005)

    def _step(self, step: Step) -> bool:
        if self.lockstep:
            if step.episode != self._episode:  # a new world episode: a new policy episode, with its task
                self._end_episode("the world's next episode")
                self._episode = step.episode
                self.task = self._episode_task(step)
                self.runner.restart_episode()
                self.running = self.running or self.autostart
                if self.running:
                    self.turn = ros_msgs.new_turn()
            if step.paused:  # the episode is over: nothing more is sent until the next one
                self._end_episode("the world's episode is over")
                return False
            self._now = step.time
            snap = self._lockstep_snapshot(step)
        else:
            snap = self.snapshot()
        if not self.running:
            return False
        if not self.task:
            self.get_logger().warning("no task yet (policy.task, or the sim world's): not starting",
                                      throttle_duration_sec=2.0)  # fmt: skip
            return
        record = self.runner.step(snap, self.task)
        if (change := self.cadence.add(record, time.monotonic())) is not None:
            level, text = change
            (self.get_logger().warning if level == WARNING else self.get_logger().info)(text)
        sent, key = None, None  # the action's stamp: when it went on the wire (the step's sim time in lockstep)
        if record.action is not None:
            sent_ns = step.time_ns if self.lockstep else time.time_ns()
            stamp = ros_msgs.stamp_from_ns(sent_ns)
            self._pub.publish(ros_msgs.action_msg(record.action, SOURCE_POLICY, stamp, turn=self.turn))
            sent, key = sent_ns * 1e-9, _result_key(ros_msgs.wall_from_stamp(stamp))
        row = {**record.as_dict(), "sent_t": sent, "servo_t": None, "e2e_ms": None}
        if self.lockstep:
            row["episode"] = self._episode  # the world's: a warm evaluation graph runs trial after trial
        self._timing_row(row, key)
        self.records = [*self.records[-199:], record]
        status = {"running": True, "connected": self.runner.connected, "task": self.task, "step": row}
        self._status.publish(String(data=json.dumps({**status, **self._status_extras()})))
        return record.action is not None

    # ------------------------------------------------------------------ services
    def _on_params(self, params: list[Any]) -> SetParametersResult:
        """Only the task changes at run time (the evaluation on the physical cell sets each trial's before
        starting it); every other parameter is refused with the reason."""
        refusal = fixed_at_startup(params, changeable=(TASK_PARAM,))
        if refusal:
            return SetParametersResult(successful=False, reason=refusal)
        for p in params:
            task = str(p.value)
            self.config = replace(self.config, task=task)
            self.task = task
            self.get_logger().info(f"task: {task!r} (from the next /policy/start)")
        return SetParametersResult(successful=True)

    def _on_arm_mode(self, report: ArmModeReport) -> None:
        """The arm left the modes sources drive in (a stop, homing, a fault): the episode is over. The arm drops
        this turn's actions from now on anyway; ending here makes the status say so, and a start is needed."""
        self.arm = report
        if report.driven and self._autostart_pending:
            self._autostart_pending = False
            self._begin_episode()
            self.get_logger().info("autostart: the arm is enabled, the policy drives")
        if report.driven or not self.running:
            return
        self.running = False
        self.ended_by = f"the arm is {report.mode}" + (f" ({report.fault})" if report.fault else "")
        self._end_episode(self.ended_by)
        self.runner.restart_episode()
        self._publish_idle_status()
        self.get_logger().warning(f"policy episode ended: {self.ended_by}; it drives again only after "
                                  f"{Services.POLICY_START} on the enabled arm (workcell call policy start)")

    def _begin_episode(self) -> None:
        """A new episode on a new turn."""
        self.runner.restart_episode()
        self.turn = ros_msgs.new_turn()
        self.ended_by = ""
        self.running = True

    def _arm_refusal(self) -> str:
        """Why a start must wait for the arm ("" when it may start): sources start only on an enabled arm."""
        if self.arm is None:
            # (the simulated arm enables itself at its first tick, which may come after this start)
            return "" if self.use_sim else f"the arm's mode is not known yet (nothing on {Topics.ARM_MODE}): is " \
                                           "aubo_bridge running?"  # fmt: skip
        if not self.arm.driven:
            fault = f" ({self.arm.fault})" if self.arm.fault else ""
            return f"the arm is {self.arm.mode}{fault}: enable it first (workcell call enable), then start the policy"
        return ""

    def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        if refusal := self._arm_refusal():
            res.success, res.message = False, refusal
            self.get_logger().error(f"{Services.POLICY_START} refused: {res.message}")
            return res
        if not self.task and not self.use_sim:  # on the physical cell there is no world to give the instruction
            res.success, res.message = False, (f"no task: on the physical cell the policy starts only with an "
                                               f"instruction: `workcell call policy task \"...\"` ({TASK_PARAM}), "
                                               "then start again")  # fmt: skip
            self.get_logger().error(f"{Services.POLICY_START} refused: {res.message}")
            return res
        self._end_episode("restarted by /policy/start")
        self._begin_episode()
        res.success, res.message = True, f"policy episode started ({self.config.start_wait_steps} wait steps first)"
        self.get_logger().warning(f"{Services.POLICY_START}: {res.message}")  # who started the policy, in the log
        return res

    def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        self.running = False
        self._end_episode("stopped")
        self.runner.restart_episode()
        self.ended_by = ""
        self._publish_idle_status()
        res.success, res.message = True, "policy stopped: nothing more is sent, the arm holds"
        self.get_logger().info(res.message)
        return res

    def _publish_idle_status(self) -> None:
        """The status while no episode runs (sent at each stop and then every second, as the steps send theirs: a
        console or `workcell status` that joins later still reads why it stopped)."""
        self._status.publish(String(data=json.dumps({"running": False, "ended_by": self.ended_by,
                                                     "connected": self.runner.connected,
                                                     **self._status_extras()})))  # fmt: skip

    def _publish_diagnostics(self) -> None:
        if not self.running:
            self._publish_idle_status()
        r = self.runner
        level = ros_msgs.DIAG_OK if r.connected else ros_msgs.DIAG_ERROR
        message = "connected" if r.connected else f"no policy server: {r.last_error or 'connecting'}"
        last = self.records[-1] if self.records else None
        if r.connected and self.running and last is not None and last.action is None and last.reason:
            # connected, yet the arm holds on a fault (a refused reply, a stale observation): say so, and why
            level, message = ros_msgs.DIAG_WARN, f"holding: {last.reason}"
        rtts = [x.round_trip_ms for x in self.records if x.round_trip_ms is not None]
        values: dict[str, Any] = {"url": redact_text(self.config.url), "mode": self.config.mode,
                                  "running": self.running, "connected": r.connected, "last_error": r.last_error,
                                  "prefetch": r.prefetch(),
                                  "loop_overruns": self.loop.overruns if self.loop else 0,
                                  "loop_errors": self.loop.errors if self.loop else self.steps.errors}  # fmt: skip
        if rtts:
            values["round_trip_p50_ms"] = float(np.percentile(rtts, 50))
            values["round_trip_max_ms"] = float(np.max(rtts))
        values.update({f"count_{k}": v for k, v in r.counters.items()})
        values.update(self.drops.diagnostics())
        values["ended_by"] = self.ended_by
        values["dropped_arm_mode"] = self._arm_reader.dropped
        self._diag.publish(ros_msgs.diagnostics_msg("policy_node", SOURCE_POLICY, level, message, values,
                                                    self.get_clock().now().to_msg()))  # fmt: skip

    def _status_extras(self) -> dict[str, str]:
        """What the operator's console shows beside the step: the server's last error, the last cadence report."""
        return {"last_error": self.runner.last_error, "episode_report": self.episode_report}

    def _end_episode(self, why: str) -> None:
        """Log the cadence report of the episode that ends here (nothing if it had no step); the status carries
        it from then on."""
        if (line := self.cadence.end(why)) is not None:
            self.episode_report = line
            self.get_logger().info(line)

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        self.steps.stop()
        self._end_episode("shutdown")
        self.runner.close()
        self._flush_timing(force=True)
        if self._timing is not None:
            with self._lock:
                self._timing.close()
                self._timing = None


def _result_key(stamp_s: float) -> int:
    """An action's key between its step and its result: its stamp as ActionOutcome reads it, in us."""
    return round(stamp_s * 1e6)


def main(args: list[str] | None = None) -> None:
    run_node(PolicyNode, "policy_node", args)


if __name__ == "__main__":
    main()
