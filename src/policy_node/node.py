"""policy_node: a VLA policy served by openpi's websocket server drives the arm as source ``policy``.

At ``control_hz`` it takes the newest robot state and both camera frames, and runs one step of
:class:`policy_node.runner.PolicyRunner` (the observation openpi's LIBERO client sends, chunks requested
synchronously or ahead of time, every action validated): the action it hands out is published on
``/workcell/action``; when it hands out none (no chunk yet, the server lost, the observation too old),
nothing is published and aubo_bridge's watchdog holds the arm within 1.5 control periods.

Services (std_srvs/Trigger): ``/policy/start`` begins an episode (the start wait, then the policy drives),
``/policy/stop`` ends it; with ``autostart`` (default) the first episode starts at once. ``/policy/status``
(JSON, every step) and ``/diagnostics`` (1 Hz) say what it is doing; ``timing_path`` (a JSON-lines file, one
line per step: which action of which chunk, the round trip, the server's inference time, the
observation's age) keeps the evidence. Settings: ``policy.<field>`` of :class:`policy_node.config.PolicyConfig`;
``policy.task`` empty takes the simulated world's instruction.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import IO, Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs
from libero_workcell.contract import CAMERA_NAMES, SOURCE_POLICY, Params, Qos, Services, Topics
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_config, prefixed, refuse_runtime_changes
from libero_workcell.rate import CONTROL_PRIORITY, run_loop
from libero_workcell.ros_qos import qos
from policy_node.config import PolicyConfig
from policy_node.observation import Snapshot
from policy_node.runner import PolicyRunner, StepRecord

POLICY_DEFAULTS = {k: v for k, v in PolicyConfig.parameter_defaults().items() if k != Params.CONTROL_HZ}
CONFIG_PARAMS = prefixed("policy", POLICY_DEFAULTS)  # policy.<PolicyConfig field>


class PolicyNode(Node):
    def __init__(self) -> None:
        super().__init__("policy_node")
        self.declare_parameter(Params.CONTROL_HZ, 20.0)
        self.declare_parameter("autostart", True)
        self.declare_parameter("timing_path", "")  # JSON lines, one per step; "" = none
        values = declare_config(self, "policy", POLICY_DEFAULTS)
        refuse_runtime_changes(self)
        self.config = PolicyConfig.from_mapping(
            {**values, "control_hz": float(self.get_parameter(Params.CONTROL_HZ).value)}
        )
        self.task = self.config.task
        timing = str(self.get_parameter("timing_path").value)
        self._timing: IO[str] | None = None
        if timing:
            Path(timing).parent.mkdir(parents=True, exist_ok=True)
            self._timing = open(timing, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (closed at shutdown)
        self._lock = threading.Lock()
        self._state: tuple[float, np.ndarray] | None = None
        self._frames: dict[str, tuple[float, np.ndarray]] = {}
        self.running = bool(self.get_parameter("autostart").value)
        self.records: list[StepRecord] = []  # the last few, for status and tests
        self.runner = PolicyRunner(self.config)
        self._pub = self.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND))
        self._status = self.create_publisher(String, Topics.POLICY_STATUS, qos(Qos.STATE))
        self._diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        self.create_subscription(JointState, Topics.ROBOT_STATE, self._on_state, qos(Qos.STATE))
        self.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        for cam in CAMERA_NAMES:
            self.create_subscription(Image, Topics.image(cam), lambda m, c=cam: self._on_image(c, m), qos(Qos.SENSOR))
        self.create_service(Trigger, Services.POLICY_START, self._srv_start)
        self.create_service(Trigger, Services.POLICY_STOP, self._srv_stop)
        self.create_timer(1.0, self._publish_diagnostics)
        self._stop = threading.Event()
        self._thread, self.loop = run_loop(self.config.control_hz, self._step, self._stop, "policy",
                                           priority=CONTROL_PRIORITY)  # fmt: skip
        c = self.config
        task = self.task or "(the world's)"
        self.get_logger().info(
            f"policy from {c.url} as {SOURCE_POLICY!r} at {c.control_hz:g} Hz: {c.mode}, replan_steps "
            f"{c.replan_steps}, images {c.image_view}, state {c.state_format}, task {task!r}"
            + (f", preference {c.condition.spec!r} ({c.condition.kind}: {c.preference_text!r})" if c.preference else "")
        )

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is not None:
            with self._lock:
                self._state = (ros_msgs.wall_from_stamp(msg.header.stamp), state)

    def _on_image(self, camera: str, msg: Image) -> None:
        rgb = ros_msgs.decoded_or_logged(ros_msgs.image_from_msg, msg, self.get_logger())
        if rgb is not None:
            with self._lock:
                self._frames[camera] = (ros_msgs.wall_from_stamp(msg.header.stamp), rgb)

    def _on_episode(self, msg: String) -> None:
        if not self.config.task:  # sim: the world's instruction is the task
            instruction = json.loads(msg.data).get("spec", {}).get("language_instruction", "")
            if instruction:
                self.task = str(instruction)

    def snapshot(self) -> Snapshot | None:
        with self._lock:
            state, frames = self._state, dict(self._frames)
        if state is None or set(frames) != set(CAMERA_NAMES):
            return None
        (ts, s7), (te, ext), (tw, wri) = state, frames["external"], frames["wrist"]
        return Snapshot(s7, ts, ext, te, wri, tw)

    # ------------------------------------------------------------------ the control loop
    def _step(self) -> None:
        if not self.running:
            return
        if not self.task:
            self.get_logger().warning("no task yet (policy.task, or the sim world's): not starting",
                                      throttle_duration_sec=2.0)  # fmt: skip
            return
        record = self.runner.step(self.snapshot(), self.task)
        if record.action is not None:
            self._pub.publish(ros_msgs.action_msg(record.action, SOURCE_POLICY))
        row = record.as_dict()
        if self._timing is not None:
            self._timing.write(json.dumps(row) + "\n")
        self.records = [*self.records[-199:], record]
        self._status.publish(String(data=json.dumps({"running": True, "connected": self.runner.connected,
                                                     "task": self.task, "step": row})))  # fmt: skip

    # ------------------------------------------------------------------ services
    def _srv_start(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        self.runner.restart_episode()
        self.running = True
        res.success, res.message = True, f"policy episode started ({self.config.start_wait_steps} wait steps first)"
        self.get_logger().info(res.message)
        return res

    def _srv_stop(self, _req: Trigger.Request, res: Trigger.Response) -> Trigger.Response:
        self.running = False
        self.runner.restart_episode()
        self._status.publish(String(data=json.dumps({"running": False, "connected": self.runner.connected})))
        res.success, res.message = True, "policy stopped: nothing more is sent, the arm holds"
        self.get_logger().info(res.message)
        return res

    def _publish_diagnostics(self) -> None:
        r = self.runner
        level = ros_msgs.DIAG_OK if r.connected else ros_msgs.DIAG_ERROR
        message = "connected" if r.connected else f"no policy server: {r.last_error or 'connecting'}"
        rtts = [x.round_trip_ms for x in self.records if x.round_trip_ms is not None]
        values: dict[str, Any] = {"url": self.config.url, "mode": self.config.mode, "running": self.running,
                                  "connected": r.connected, "last_error": r.last_error, "prefetch": r.prefetch(),
                                  "loop_overruns": self.loop.overruns, "loop_errors": self.loop.errors}  # fmt: skip
        if rtts:
            values["round_trip_p50_ms"] = float(np.percentile(rtts, 50))
            values["round_trip_max_ms"] = float(np.max(rtts))
        values.update({f"count_{k}": v for k, v in r.counters.items()})
        self._diag.publish(ros_msgs.diagnostics_msg("policy_node", SOURCE_POLICY, level, message, values))

    # ------------------------------------------------------------------ lifecycle
    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)
        self.runner.close()
        if self._timing is not None:
            self._timing.close()


def main(args: list[str] | None = None) -> None:
    run_node(PolicyNode, "policy_node", args)


if __name__ == "__main__":
    main()
