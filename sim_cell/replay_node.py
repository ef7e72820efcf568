"""demo_replay node: replay a recorded demonstration through the whole graph on the simulated workcell.

The sim world was started with the same ``demo_path`` (its task, the arm on the demo's first pose). This
node waits for the graph (the bridge listening to source ``policy``), resets the world, and from the new
episode's first control step sends one action per control step as source ``policy`` (a replay is a policy
that reads its actions from a file): the recorded ones (``open_loop``) or the retargeting law toward the
recorded TCP path (``closed_loop``, :mod:`sim_cell.replay`). It runs in lockstep with the world: each
action answers the state of its own step exactly, so a demo recorded in sim time replays to the same
episode. After the last step it lets the scene settle (``settle_time`` of sim time), then writes, in
``out_dir``:

- ``replay_report.json``: tracking error against the recorded TCP, recorded and replayed outcome, the
  sim seconds per wall second;
- ``replay_strip.png``: recorded (top) and replayed (below) frames of both cameras at a few steps;

and exits, which ends the graph (``ros2 launch`` and ``workcell replay`` alike). While replaying it logs
"replayed K of N steps" about twenty times (``workcell replay``'s progress bar reads these lines). Simulation in
lockstep only: the node refuses to start with ``use_sim:=false`` or ``lockstep:=false``.

Meanwhile it publishes its progress on ``/replay/status`` (std_msgs/String JSON, latched, for the operator's
console; :func:`sim_cell.replay.replay_status`): at each replayed step ``step`` of ``steps``, ``mode``, the
tracking error so far against the recorded TCP (``pos_err_rms_mm``, ``pos_err_max_mm``, ``rot_err_rms_deg``,
``rot_err_max_deg``: the report's figures, computed by the same functions) and ``done`` false; at the end ``done``
true with the report's ``outcome`` (or the ``error`` it failed with).
"""

from __future__ import annotations

import enum
import json
import threading
import time
from pathlib import Path
from typing import Any, Final

import cv2
import numpy as np
from rclpy.node import Node
from rclpy.task import Future
from scipy.spatial.transform import Rotation
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs
from libero_workcell.contract import (
    CAMERA_NAMES,
    CONTROL_HZ_DEFAULT,
    SOURCE_POLICY,
    Params,
    Qos,
    Services,
    Topics,
)
from libero_workcell.image_convention import to_upright
from libero_workcell.json_topics import JsonTopicReader, SimEpisodeReport
from libero_workcell.libero_format import CAMERA_IMAGE_KEYS, LiberoFormatError, read_frames
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.ros_qos import qos
from sim_cell.replay import (
    check_mode,
    error_summary,
    load_plan,
    replay_status,
    side_by_side,
    strip_steps,
    tracking_errors,
    tracking_summary,
)
from transports.node_steps import NodeSteps
from transports.stepping import Step
from workcell.replay_run import PROGRESS, PROGRESS_LINES, REPORT_FILE

STRIP_FILE = "replay_strip.png"
START_POSE_TOL = 5e-3  # m: after the reset the arm must be this close to the demo's first TCP pose
STATE = "state"


class ReplayError(RuntimeError):
    pass


class Phase(enum.Enum):
    WAITING = "waiting for the graph"
    RESETTING = "resetting the world"
    REPLAYING = "replaying"
    SETTLING = "settling"
    DONE = "done"


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
    "demo_path": "",
    "demo": "",
    "mode": "open_loop",
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    "out_dir": "replay-output",
    "strip_frames": 6,
    "settle_time": 2.0,  # s of sim time after the last action before the outcome is read
    "max_steps": 0,  # 0: the whole demo
    "start_timeout": 60.0,  # s (wall) for the graph to come up
}


class ReplayNode(Node):
    def __init__(self) -> None:
        super().__init__("demo_replay")
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        if not p(Params.USE_SIM) or not p(Params.LOCKSTEP):
            raise ValueError("demo_replay runs on the simulated workcell only, in lockstep "
                             "(use_sim:=true lockstep:=true)")
        if not p("demo_path"):
            raise ValueError("demo_replay needs demo_path (a LIBERO-layout HDF5 file)")
        self.mode = check_mode(str(p("mode")))
        self.demo_path = Path(str(p("demo_path")))
        self.plan = load_plan(self.demo_path, str(p("demo")))
        self.hz = float(p(Params.CONTROL_HZ))
        if not self.hz > 0:
            raise ValueError(f"control_hz must be > 0, got {self.hz}")
        max_steps = int(p("max_steps"))
        self.steps = self.plan.steps if max_steps <= 0 else min(max_steps, self.plan.steps)
        self.out_dir = Path(str(p("out_dir")))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.strip_at = strip_steps(self.steps, int(p("strip_frames")))
        self.settle_steps = max(1, round(float(p("settle_time")) * self.hz))
        self.start_timeout = float(p("start_timeout"))

        self.runner = NodeSteps(self, self.hz, self._step, inputs=(STATE, *CAMERA_NAMES), source=SOURCE_POLICY,
                                lockstep=True)  # fmt: skip
        self.inputs = self.runner.inputs
        self._source: str | None = None
        self._episodes: list[dict[str, Any]] = []  # /sim/episode reports of the replayed episode
        self._took_effect: dict[int, int] = {}  # action stamp (ns) -> servo tick (the bridge's action results)
        self._pub = self.runner.publisher(JointState, Topics.ACTION, Qos.COMMAND)
        self._status_pub = self.create_publisher(String, Topics.REPLAY_STATUS, qos(Qos.LATCHED))
        self.runner.read(JointState, Topics.ROBOT_STATE, Qos.STATE, self._on_state)
        self.create_subscription(String, Topics.ACTIVE_SOURCE, self._on_source, qos(Qos.LATCHED))
        self._episode_reader = JsonTopicReader(SimEpisodeReport, Topics.SIM_EPISODE, self.get_logger())
        self.create_subscription(String, Topics.SIM_EPISODE, self._episode_reader.then(self._on_episode),
                                 qos(Qos.LATCHED))  # fmt: skip
        self.create_subscription(String, Topics.ACTION_RESULT, self._on_action_result, self.runner.qos(Qos.COMMAND))
        for cam in CAMERA_NAMES:  # the frames are waited for only at the steps the strip shows
            self.runner.read(Image, Topics.image(cam), Qos.SENSOR_LOCKSTEP, lambda m, c=cam: self._on_image(c, m),
                             waited=bool(self.strip_at))  # fmt: skip
        self._reset = self.create_client(Trigger, Services.SIM_RESET)
        self._reset_future: Future | None = None
        self._started_wall = time.monotonic()
        self.phase = Phase.WAITING
        self._episode = -1  # the world's episode before our reset
        self._turn = 0  # the replay's turn, taken when it starts (aubo_bridge.arbiter)
        self._first_step = 0  # the replayed episode's first control step
        self._pos: list[np.ndarray] = []
        self._rotvec: list[np.ndarray] = []
        self._errors: tuple[list[float], list[float]] = ([], [])  # per step: position (m), rotation (deg)
        self._stamps: list[int] = []
        self._frames: dict[str, list[np.ndarray]] = {c: [] for c in CAMERA_NAMES}
        self._t_wall = (0.0, 0.0)
        self.done = threading.Event()
        self.report: dict[str, Any] | None = None
        self.runner.start()
        self.get_logger().info(
            f"replaying {self.demo_path}:{self.plan.demo.name} ({self.steps} steps, {self.mode}) as "
            f"{SOURCE_POLICY!r} in lockstep; report in {self.out_dir}/"
        )

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is not None:
            self.inputs.put(STATE, ros_msgs.ns_from_stamp(msg.header.stamp), state)

    def _on_source(self, msg: String) -> None:
        self._source = msg.data

    def _on_episode(self, report: SimEpisodeReport) -> None:
        if self.phase in (Phase.REPLAYING, Phase.SETTLING, Phase.DONE) and report.episode == self._episode + 1:
            self._episodes.append(report.model_dump())

    def _on_action_result(self, msg: String) -> None:
        outcome = ros_msgs.decoded_or_logged(ros_msgs.action_result_from_msg, msg, self.get_logger())
        if outcome is not None and outcome.source == SOURCE_POLICY and outcome.servo_tick is not None:
            self._took_effect[round(outcome.stamp * 1e9)] = outcome.servo_tick

    def _on_image(self, camera: str, msg: Image) -> None:
        image = ros_msgs.decoded_or_logged(ros_msgs.image_from_msg, msg, self.get_logger())
        if image is not None:
            self.inputs.put(camera, ros_msgs.ns_from_stamp(msg.header.stamp), image)

    # ------------------------------------------------------------------ the replay, one control step at a time
    def _step(self, step: Step) -> bool:
        if self.done.is_set():
            return False
        try:
            return self._advance(step)
        except ReplayError as exc:
            self._fail(str(exc))
        except Exception as exc:  # never die silently: the report says what happened
            self._fail(repr(exc))
        return False

    def _advance(self, step: Step) -> bool:
        if self.phase is Phase.WAITING:
            if time.monotonic() - self._started_wall > self.start_timeout:
                raise ReplayError(f"the bridge did not listen to {SOURCE_POLICY!r} within {self.start_timeout:g} s "
                                  "(aubo_bridge.active_source:=policy)")  # fmt: skip
            if self._source == SOURCE_POLICY and self._reset.service_is_ready():
                self._episode = step.episode
                self._reset_future = self._reset.call_async(Trigger.Request())
                self.phase = Phase.RESETTING
            return False
        if self.phase is Phase.RESETTING:
            if step.episode <= self._episode:  # the world resets between two ticks: not yet
                return False
            future = self._reset_future
            if future is not None and future.done() and not future.result().success:
                raise ReplayError(f"sim reset refused: {future.result().message}")
            self.phase, self._first_step = Phase.REPLAYING, step.index
            self._turn = ros_msgs.new_turn()  # the replay is a source started now (aubo_bridge.arbiter)
            self._t_wall = (time.monotonic(), step.time)
        k = step.index - self._first_step
        if self.phase is Phase.REPLAYING:
            return self._replay_step(step, k)
        if k < self.steps + self.settle_steps:
            return False
        settled = k / self.hz  # episode time at which the outcome counts (or the horizon, if that comes first)
        report = next((e for e in sorted(self._episodes, key=lambda e: e["sim_time"])
                       if e["sim_time"] >= settled - 1e-9 or e.get("done")), None)  # fmt: skip
        if report is None:
            return False  # the world reports its outcome every half second of sim time: the next one
        self._finish(report["metrics"], step)
        return False

    def _replay_step(self, step: Step, k: int) -> bool:
        wanted = {STATE: step.time_ns}
        if k in self.strip_at:
            wanted |= {c: step.frames_ns[c] for c in CAMERA_NAMES} if step.frames_ns else {}
        got = self.runner.gather(wanted)
        if got is None:
            raise ReplayError("stopped")
        s = got[STATE]
        if k == 0 and np.linalg.norm(s[:3] - self.plan.path.pos[0]) > START_POSE_TOL:
            raise ReplayError(f"the arm is at {np.round(s[:3], 4).tolist()} after the reset, not on the demo's first "
                              f"pose {np.round(self.plan.path.pos[0], 4).tolist()}")  # fmt: skip
        self._pos.append(s[:3].copy())
        self._rotvec.append(s[3:6].copy())
        pos_err, rot_err = tracking_errors(self.plan, s[None, :3], s[None, 3:6], first=k)
        self._errors[0].append(float(pos_err[0]))
        self._errors[1].append(float(rot_err[0]))
        if k in self.strip_at:
            for c in CAMERA_NAMES:
                self._frames[c].append(got.get(c))
        action = self.plan.action(self.mode, k, s[:3], Rotation.from_rotvec(s[3:6]).as_matrix())
        self._pub.publish(ros_msgs.action_msg(action, SOURCE_POLICY, ros_msgs.stamp_from_ns(step.time_ns),
                                              turn=self._turn))  # fmt: skip
        self._stamps.append(step.time_ns)
        self._publish_status(replay_status(self.mode, self.steps, k + 1, error_summary(*self._errors)))
        if (k + 1) % max(1, self.steps // PROGRESS_LINES) == 0 or k == self.steps - 1:
            self.get_logger().info(PROGRESS.format(done=k + 1, total=self.steps))  # `workcell replay`'s bar
        if k == self.steps - 1:
            self.phase = Phase.SETTLING
            self._t_wall = (time.monotonic() - self._t_wall[0], step.time - self._t_wall[1])
        return True

    def _finish(self, metrics: dict[str, Any], step: Step) -> None:
        placed = [bool(x) for x in metrics["placed"]]
        wall, sim = self._t_wall
        report = {
            "demo_path": str(self.demo_path),
            "demo": self.plan.demo.name,
            "mode": self.mode,
            "steps": self.steps,
            "demo_steps": self.plan.steps,
            "control_hz": self.hz,
            "tracking": tracking_summary(self.plan, np.array(self._pos), np.array(self._rotvec)),
            "outcome": {
                "recorded_placed": self.plan.placed,
                "replayed_placed": placed,
                "same": None if self.plan.placed is None else placed == self.plan.placed,
                "metrics": metrics,
            },
            "timing": {"wall_s": wall, "sim_s": sim, "real_time_factor": sim / wall if wall > 0 else None},
            "strip_steps": self.strip_at,
            # the replayed TCP at each step, as that step's action answered it (base frame, m and axis-angle
            # rad); the servo tick each action took effect on (-1: no report)
            "per_step": {
                "tcp_pos": np.array(self._pos).tolist(),
                "tcp_rotvec": np.array(self._rotvec).tolist(),
                "servo_tick": [self._took_effect.get(t, -1) for t in self._stamps],
            },
        }
        report["strip"] = self._write_strip(self._frames)
        self._write(report)
        self.report = report
        self.phase = Phase.DONE
        self._publish_status(replay_status(self.mode, self.steps, len(self._pos), report["tracking"], done=True,
                                           outcome=report["outcome"]))  # fmt: skip
        self.get_logger().info("replay done: " + json.dumps(report["tracking"]) + f" outcome {report['outcome']}")
        self.done.set()

    def _fail(self, error: str) -> None:
        if self.runner.stopping.is_set():
            return
        self.get_logger().error(f"replay failed: {error}")
        self.report = {"error": error}
        self._write({"error": error, "demo": self.plan.demo.name, "mode": self.mode})
        tracking = error_summary(*self._errors) if self._errors[0] else None
        self._publish_status(replay_status(self.mode, self.steps, len(self._pos), tracking, done=True, error=error))
        self.phase = Phase.DONE
        self.done.set()

    def _publish_status(self, status: dict[str, Any]) -> None:
        """``/replay/status``; quietly nothing once ROS is shutting down."""
        if not self.context.ok():
            return
        try:
            self._status_pub.publish(String(data=json.dumps({"demo": self.plan.demo.name, **status})))
        except Exception:
            if self.context.ok():
                raise

    def _write_strip(self, frames: dict[str, list]) -> str | None:
        """The side-by-side PNG, or None (and why, in the log) when frames are missing."""
        rows = []
        for cam in CAMERA_NAMES:
            replayed = frames[cam]
            if not replayed or any(f is None for f in replayed):
                self.get_logger().warning(
                    f"no strip: no {cam} camera frames were received during the replay "
                    f"(latest frames from: {sorted(self._frames)})"
                )
                return None
            try:
                raw = read_frames(self.demo_path, self.plan.demo.name, CAMERA_IMAGE_KEYS[cam], self.strip_at)
            except LiberoFormatError as exc:
                self.get_logger().warning(f"no strip: {exc}")
                return None
            recorded = [to_upright(f, self.plan.image_convention) for f in raw]  # as the cameras publish
            rows.append(side_by_side(recorded, replayed))
        strip = np.concatenate([rows[0], np.full((8, rows[0].shape[1], 3), 255, np.uint8), *rows[1:]])
        path = self.out_dir / STRIP_FILE
        cv2.imwrite(str(path), cv2.cvtColor(strip, cv2.COLOR_RGB2BGR))
        return str(path)

    def _write(self, report: dict[str, Any]) -> None:
        tmp = self.out_dir / (REPORT_FILE + ".partial")
        tmp.write_text(json.dumps(report, indent=2))
        tmp.replace(self.out_dir / REPORT_FILE)

    # ------------------------------------------------------------------ lifecycle
    @property
    def finished(self) -> bool:
        return self.done.is_set()

    def shutdown(self) -> None:
        self.runner.stop()


def main(args: list[str] | None = None) -> None:
    nodes: list[ReplayNode] = []

    def factory() -> ReplayNode:
        nodes.append(ReplayNode())
        return nodes[-1]

    run_node(factory, "demo_replay", args)  # a bad demo (LiberoFormatError) is a ValueError: exit 2, one line
    if nodes and (nodes[0].report is None or "error" in nodes[0].report):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
