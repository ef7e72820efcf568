"""demo_replay node: replay a recorded demonstration through the whole graph on the simulated workcell.

The sim world was started with the same ``demo_path`` (its task, the arm on the demo's first pose). This
node waits for the graph (a fresh robot state, the bridge listening to source ``policy``), resets the
world so the episode starts at sim time 0, then sends one action per control period as source
``policy`` (a replay is a policy that reads its actions from a file): the recorded ones (``open_loop``)
or the retargeting law toward the recorded TCP path (``closed_loop``, :mod:`sim_bridge.replay`). After the
last step it lets the scene settle, then writes, in ``out_dir``:

- ``replay_report.json``: tracking error against the recorded TCP, recorded and replayed outcome, the
  achieved real-time factor, late control steps;
- ``replay_strip.png``: recorded (top) and replayed (below) frames of both cameras at a few steps;

and exits, which ends the graph (``ros2 launch`` and ``workcell replay`` alike). Simulation only: the node
refuses to start with ``use_sim:=false``.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from rclpy.node import Node
from scipy.spatial.transform import Rotation, Slerp
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
from libero_workcell.libero_format import CAMERA_IMAGE_KEYS, LiberoFormatError, read_frames
from libero_workcell.node_main import run_node
from libero_workcell.node_params import refuse_runtime_changes
from libero_workcell.rate import CONTROL_PRIORITY, RateLoop, set_realtime_priority
from libero_workcell.replay_run import REPORT_FILE
from libero_workcell.ros_qos import qos
from sim_bridge.replay import check_mode, load_plan, side_by_side, strip_steps, tracking_summary

STRIP_FILE = "replay_strip.png"
START_POSE_TOL = 5e-3  # m: after the reset the arm must be this close to the demo's first TCP pose


class ReplayError(RuntimeError):
    pass


def tcp_at(
    history: list[tuple[float, np.ndarray]], times: list[float], latest_pos: np.ndarray, latest_rotvec: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The TCP at each of ``times``, interpolated between measured states (``history``: measurement stamp,
    7-D state): the pose at the moment each action went out, not the last state received before it (up to a
    publish period older). Where the history does not bracket a time, the latest state received is kept."""
    stamps = np.array([t for t, _ in history])
    if len(stamps) < 2:
        return latest_pos, latest_rotvec
    order = np.argsort(stamps, kind="stable")
    stamps, states = stamps[order], np.array([history[i][1] for i in order])
    keep = np.concatenate([[True], np.diff(stamps) > 0])
    stamps, states = stamps[keep], states[keep]
    if len(stamps) < 2:
        return latest_pos, latest_rotvec
    t = np.asarray(times, float)
    inside = (t >= stamps[0]) & (t <= stamps[-1])
    pos, rotvec = latest_pos.copy(), latest_rotvec.copy()
    if inside.any():
        pos[inside] = np.stack([np.interp(t[inside], stamps, states[:, k]) for k in range(3)], axis=1)
        slerp = Slerp(stamps, Rotation.from_rotvec(states[:, 3:6]))
        rotvec[inside] = slerp(t[inside]).as_rotvec()
    return pos, rotvec


class ReplayNode(Node):
    def __init__(self) -> None:
        super().__init__("demo_replay")
        self.declare_parameter(Params.USE_SIM, True)
        self.declare_parameter(Params.SIM_LINK, "workcell")  # injected into every node; unused here
        self.declare_parameter("demo_path", "")
        self.declare_parameter("demo", "")
        self.declare_parameter("mode", "open_loop")
        self.declare_parameter(Params.CONTROL_HZ, CONTROL_HZ_DEFAULT)
        self.declare_parameter("out_dir", "replay-output")
        self.declare_parameter("strip_frames", 6)
        self.declare_parameter("settle_time", 2.0)  # s after the last action before the outcome is read
        self.declare_parameter("max_steps", 0)  # 0: the whole demo
        self.declare_parameter("start_timeout", 60.0)  # s for the graph to come up
        refuse_runtime_changes(self)
        names = (
            Params.USE_SIM,
            "demo_path",
            "demo",
            "mode",
            Params.CONTROL_HZ,
            "out_dir",
            "strip_frames",
            "settle_time",
            "max_steps",
            "start_timeout",
        )
        p = {n: self.get_parameter(n).value for n in names}
        if not p[Params.USE_SIM]:
            raise ValueError("demo_replay runs on the simulated workcell only (use_sim:=true)")
        if not p["demo_path"]:
            raise ValueError("demo_replay needs demo_path (a LIBERO-layout HDF5 file)")
        self.mode = check_mode(str(p["mode"]))
        self.demo_path = Path(str(p["demo_path"]))
        self.plan = load_plan(self.demo_path, str(p["demo"]))
        self.hz = float(p[Params.CONTROL_HZ])
        if not self.hz > 0:
            raise ValueError(f"control_hz must be > 0, got {self.hz}")
        max_steps = int(p["max_steps"])
        self.steps = self.plan.steps if max_steps <= 0 else min(max_steps, self.plan.steps)
        self.out_dir = Path(str(p["out_dir"]))
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.strip_at = strip_steps(self.steps, int(p["strip_frames"]))
        self.settle_time = float(p["settle_time"])
        self.start_timeout = float(p["start_timeout"])

        self._lock = threading.Lock()
        self._state: tuple[float, np.ndarray] | None = None
        self._history: list[tuple[float, np.ndarray]] | None = None  # (measurement wall time, state) while replaying
        self._source: str | None = None
        self._episode: dict[str, Any] | None = None
        self._truth: tuple[float, float] | None = None  # (received, monotonic; the world's sim time)
        self._frames: dict[str, np.ndarray] = {}
        self._took_effect: dict[float, int] = {}  # action stamp -> servo tick (the bridge's action results)
        self._pub = self.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND))
        self.create_subscription(JointState, Topics.ROBOT_STATE, self._on_state, qos(Qos.STATE))
        self.create_subscription(String, Topics.ACTIVE_SOURCE, self._on_source, qos(Qos.LATCHED))
        self.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        self.create_subscription(String, Topics.SIM_GROUND_TRUTH, self._on_truth, qos(Qos.STATE))
        self.create_subscription(String, Topics.ACTION_RESULT, self._on_action_result, qos(Qos.COMMAND))
        for cam in CAMERA_NAMES:
            self.create_subscription(Image, Topics.image(cam), lambda m, c=cam: self._on_image(c, m), qos(Qos.SENSOR))
        self._reset = self.create_client(Trigger, Services.SIM_RESET)
        self._stop = threading.Event()
        self.done = threading.Event()
        self.report: dict[str, Any] | None = None
        self._thread = threading.Thread(target=self._run, name="replay", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"replaying {self.demo_path}:{self.plan.demo.name} ({self.steps} steps, {self.mode}) as "
            f"{SOURCE_POLICY!r} at {self.hz:g} Hz; report in {self.out_dir}/"
        )

    # ------------------------------------------------------------------ inputs
    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is None:
            return
        with self._lock:
            self._state = (time.monotonic(), state)
            if self._history is not None:
                self._history.append((ros_msgs.wall_from_stamp(msg.header.stamp), state))

    def _on_source(self, msg: String) -> None:
        self._source = msg.data

    def _on_episode(self, msg: String) -> None:
        info = json.loads(msg.data)
        info["_received"] = time.monotonic()
        self._episode = info

    def _on_truth(self, msg: String) -> None:
        self._truth = (time.monotonic(), float(json.loads(msg.data)["sim_time"]))

    def _on_action_result(self, msg: String) -> None:
        outcome = ros_msgs.decoded_or_logged(ros_msgs.action_result_from_msg, msg, self.get_logger())
        if outcome is not None and outcome.source == SOURCE_POLICY and outcome.servo_tick is not None:
            self._took_effect[outcome.stamp] = outcome.servo_tick

    def _on_image(self, camera: str, msg: Image) -> None:
        image = ros_msgs.decoded_or_logged(ros_msgs.image_from_msg, msg, self.get_logger())
        if image is not None:
            self._frames[camera] = image

    # ------------------------------------------------------------------ the replay
    def _wait(self, what: str, ready, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if self._stop.is_set():
                raise ReplayError("stopped")
            if time.monotonic() > deadline:
                raise ReplayError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(0.02)

    def _fresh_state(self, after: float) -> np.ndarray | None:
        with self._lock:
            s = self._state
        return s[1] if s is not None and s[0] > after else None

    def _run(self) -> None:
        try:
            self.report = self._replay()
            self.get_logger().info(
                "replay done: " + json.dumps(self.report["tracking"]) + f" outcome {self.report['outcome']}"
            )
        except ReplayError as exc:
            if not self._stop.is_set():
                self.get_logger().error(f"replay failed: {exc}")
                self.report = {"error": str(exc)}
                self._write({"error": str(exc), "demo": self.plan.demo.name, "mode": self.mode})
        except Exception as exc:  # never die silently: the report says what happened
            self.get_logger().fatal(f"replay crashed: {exc!r}")
            self.report = {"error": repr(exc)}
            self._write({"error": repr(exc), "demo": self.plan.demo.name, "mode": self.mode})
        finally:
            self.done.set()

    def _replay(self) -> dict[str, Any]:
        t_up = time.monotonic()
        self._wait(
            "the robot state and the bridge listening to 'policy' (aubo_bridge.active_source:=policy)",
            lambda: self._fresh_state(t_up - 1.0) is not None and self._source == SOURCE_POLICY,
            self.start_timeout,
        )
        if self.strip_at:  # the strip needs both cameras: they may come up after the arm
            self._wait(
                f"images from the cameras {list(CAMERA_NAMES)}",
                lambda: all(c in self._frames for c in CAMERA_NAMES),
                self.start_timeout,
            )
        self._wait(f"the {Services.SIM_RESET} service", lambda: self._reset.service_is_ready(), self.start_timeout)
        future = self._reset.call_async(Trigger.Request())
        self._wait("the world to reset", future.done, 30.0)
        if not future.result().success:
            raise ReplayError(f"sim reset refused: {future.result().message}")
        t_reset = time.monotonic()
        start = self.plan.path.pos[0]
        self._wait("the arm on the demo's first pose after the reset",
                   lambda: (s := self._fresh_state(t_reset)) is not None and np.linalg.norm(s[:3] - start)
                   < START_POSE_TOL, 5.0)  # fmt: skip
        self._wait("the world's ground truth after the reset",
                   lambda: self._truth is not None and self._truth[0] > t_reset, 5.0)  # fmt: skip
        truth_start = self._truth
        with self._lock:
            self._history = []
        sent: list[float] = []  # wall time each action was published
        stamps: list[float] = []  # ... as its message's stamp reads (the key of the bridge's action results)
        loop = RateLoop(self.hz)
        note = set_realtime_priority(CONTROL_PRIORITY)
        if note:
            self.get_logger().warning(f"replay loop: {note}")
        pos, rotvec, frames, t_wall0 = [], [], {c: [] for c in CAMERA_NAMES}, time.monotonic()
        for t in range(self.steps):
            if t > 0 and not loop.sleep(self._stop):
                raise ReplayError("stopped")
            s = self._fresh_state(t_reset)
            if s is None:
                raise ReplayError(f"no robot state at step {t}")
            pos.append(s[:3].copy())
            rotvec.append(s[3:6].copy())
            if t in self.strip_at:
                for c in CAMERA_NAMES:
                    frames[c].append(self._frames.get(c))
            action = self.plan.action(self.mode, t, s[:3], Rotation.from_rotvec(s[3:6]).as_matrix())
            sent.append(time.time())
            msg = ros_msgs.action_msg(action, SOURCE_POLICY, sent[-1])
            stamps.append(ros_msgs.wall_from_stamp(msg.header.stamp))
            self._pub.publish(msg)
        wall = time.monotonic() - t_wall0
        truth_end = self._truth
        time.sleep(max(self.settle_time, 0.1))  # and a state measured after the last send
        with self._lock:
            history, self._history = self._history or [], None
        pos, rotvec = tcp_at(history, sent, np.array(pos), np.array(rotvec))  # arrays from here on
        t_settled = time.monotonic()
        self._wait(
            "an episode report after settling",
            lambda: self._episode is not None and self._episode["_received"] > t_settled,
            5.0,
        )
        metrics = self._episode["metrics"]
        placed = [bool(x) for x in metrics["placed"]]
        # sim time advanced per wall second over the replay, both read from the world's ground truth stream
        dt_wall = truth_end[0] - truth_start[0]
        rtf = (truth_end[1] - truth_start[1]) / dt_wall if dt_wall > 0 else None
        report = {
            "demo_path": str(self.demo_path),
            "demo": self.plan.demo.name,
            "mode": self.mode,
            "steps": self.steps,
            "demo_steps": self.plan.steps,
            "control_hz": self.hz,
            "tracking": tracking_summary(self.plan, np.array(pos), np.array(rotvec)),
            "outcome": {
                "recorded_placed": self.plan.placed,
                "replayed_placed": placed,
                "same": None if self.plan.placed is None else placed == self.plan.placed,
                "metrics": metrics,
            },
            "timing": {
                "wall_s": wall,
                "real_time_factor": rtf,
                "late_steps": loop.overruns,
                "period_error": loop.period_error_stats(),
            },
            "strip_steps": self.strip_at,
            # the replayed TCP when each step's action was sent (base frame, m and axis-angle rad), interpolated
            # between the measurements' stamps; the servo tick each action took effect on (-1: no report)
            "per_step": {
                "tcp_pos": pos.tolist(),
                "tcp_rotvec": rotvec.tolist(),
                "servo_tick": [self._took_effect.get(t, -1) for t in stamps],
            },
        }
        report["strip"] = self._write_strip(frames)
        self._write(report)
        return report

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
        self._stop.set()
        self._thread.join(timeout=2.0)


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
