"""The benchmark's own ROS participant and a shared-memory link monitor.

:class:`Probe` is one rclpy node on its own context, spun on a background
thread: it records the arrival time (``time.time()``) and header stamp of
every message the figures need, publishes actions through the contract's
``ros_msgs.action_msg`` and calls Trigger / SetParameters services.
Import this module only after :func:`libero_workcell.dds.apply_loopback_env`.

:class:`LinkMonitor` polls the sim world's shared-memory link (the world's
own state, stamped by the world; the servo targets, stamped by the arm
driver's servo thread) without touching DDS.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import rclpy
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.srv import SetParameters
from rclpy.context import Context
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs
from libero_workcell.contract import CAMERA_NAMES, Qos, Topics
from libero_workcell.ros_qos import qos


@dataclass(frozen=True)
class Diag:
    recv: float
    name: str
    level: int
    message: str
    values: dict[str, str]


class Probe:
    """Subscriptions with arrival times, an action publisher, service calls."""

    def __init__(self) -> None:
        self.context = Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node(f"bench_probe_{os.getpid()}", context=self.context)
        n = self.node
        self._lock = threading.Lock()
        # (recv, sim_time, done, episode)
        self.ground_truth: list[tuple[float, float, bool, int]] = []
        # (recv, stamp, x, y, z)
        self.tcp: list[tuple[float, float, float, float, float]] = []
        # (recv, stamp, source)
        self.actions: list[tuple[float, float, str]] = []
        self.turn = 0  # the turn of the actions this probe publishes (publish_action)
        # camera -> [(recv, stamp)]
        self.images: dict[str, list[tuple[float, float]]] = {c: [] for c in CAMERA_NAMES}
        self.diagnostics: list[Diag] = []
        self.action_pub = n.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND))
        n.create_subscription(String, Topics.SIM_GROUND_TRUTH, self._on_truth, qos(Qos.STATE))
        n.create_subscription(PoseStamped, Topics.TCP_POSE, self._on_tcp, qos(Qos.STATE))
        n.create_subscription(JointState, Topics.ACTION, self._on_action, qos(Qos.COMMAND))
        n.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, self._on_diag, qos(Qos.DIAGNOSTICS))
        for cam in CAMERA_NAMES:
            n.create_subscription(Image, Topics.image(cam), self._image_cb(cam), qos(Qos.SENSOR))
        self._clients: dict[tuple[type, str], Any] = {}
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(n)
        self._thread = threading.Thread(target=self._spin, name="bench-probe", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------ callbacks
    def _spin(self) -> None:
        with contextlib.suppress(ExternalShutdownException):
            self.executor.spin()

    def _on_truth(self, msg: String) -> None:
        recv = time.time()
        gt = json.loads(msg.data)
        self.ground_truth.append((recv, float(gt["sim_time"]), bool(gt["done"]), int(gt["episode"])))

    def _on_tcp(self, msg: PoseStamped) -> None:
        recv = time.time()
        p = msg.pose.position
        self.tcp.append((recv, ros_msgs.wall_from_stamp(msg.header.stamp), p.x, p.y, p.z))

    def _on_action(self, msg: JointState) -> None:
        source = msg.header.frame_id.partition(ros_msgs.TURN_SEPARATOR)[0]  # SOURCE#TURN
        self.actions.append((time.time(), ros_msgs.wall_from_stamp(msg.header.stamp), source))

    def _image_cb(self, cam: str) -> Callable[[Image], None]:
        store = self.images[cam]

        def on_image(msg: Image) -> None:
            store.append((time.time(), ros_msgs.wall_from_stamp(msg.header.stamp)))

        return on_image

    def _on_diag(self, msg: DiagnosticArray) -> None:
        recv = time.time()
        for st in msg.status:
            self.diagnostics.append(Diag(recv, st.name, ros_msgs.diag_level(st), st.message,
                                         {kv.key: kv.value for kv in st.values}))  # fmt: skip

    # ------------------------------------------------------------ queries
    @staticmethod
    def since(items: Sequence[Any], t0: float, t1: float = float("inf")) -> list[Any]:
        """Records whose first field (arrival time) lies in [t0, t1]."""
        return [x for x in list(items) if t0 <= (x[0] if isinstance(x, tuple) else x.recv) <= t1]

    def diags(self, name: str, t0: float = 0.0, t1: float = float("inf")) -> list[Diag]:
        return [d for d in list(self.diagnostics) if d.name == name and t0 <= d.recv <= t1]

    def latest_tcp(self) -> np.ndarray | None:
        return np.array(self.tcp[-1][2:]) if self.tcp else None

    # ------------------------------------------------------------ commands
    def publish_action(self, values: Sequence[float], source: str, turn: int | None = None) -> float:
        """Publish one 7-D action of ``source``'s stream ``turn`` (default: this probe's, taken at its first
        action: the arm follows it until its next stop); returns its stamp (= time.time() just before publishing)."""
        if turn is None:
            self.turn = self.turn or ros_msgs.new_turn()
            turn = self.turn
        t = time.time()
        self.action_pub.publish(ros_msgs.action_msg(values, source, wall_time=t, turn=turn))
        return t

    def _client(self, srv_type: type, name: str) -> Any:
        key = (srv_type, name)
        if key not in self._clients:
            self._clients[key] = self.node.create_client(srv_type, name)
        return self._clients[key]

    def wait_for_service(self, srv_type: type, name: str, timeout: float) -> bool:
        return bool(self._client(srv_type, name).wait_for_service(timeout_sec=timeout))

    def _call(self, srv_type: type, name: str, request: Any, timeout: float) -> Any:
        client = self._client(srv_type, name)
        if not client.wait_for_service(timeout_sec=timeout):
            raise TimeoutError(f"service {name} not available after {timeout:.0f} s")
        future = client.call_async(request)
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        if not done.wait(timeout):
            client.remove_pending_request(future)
            raise TimeoutError(f"service {name} did not answer within {timeout:.0f} s")
        return future.result()

    def trigger(self, name: str, timeout: float = 15.0) -> tuple[bool, str]:
        res = self._call(Trigger, name, Trigger.Request(), timeout)
        return bool(res.success), str(res.message)

    def set_parameter(self, node_name: str, name: str, value: Any, timeout: float = 10.0) -> tuple[bool, str]:
        req = SetParameters.Request()
        req.parameters = [Parameter(name, value=value).to_parameter_msg()]
        res = self._call(SetParameters, f"/{node_name}/set_parameters", req, timeout)
        r = res.results[0]
        return bool(r.successful), str(r.reason)

    def clear(self) -> None:
        """Forget everything recorded so far (between graphs)."""
        self.ground_truth.clear()
        self.tcp.clear()
        self.actions.clear()
        for v in self.images.values():
            v.clear()
        self.diagnostics.clear()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.executor.shutdown(timeout_sec=2.0)
        self._thread.join(timeout=3.0)
        with contextlib.suppress(Exception):
            self.node.destroy_node()
        self.context.try_shutdown()


class LinkMonitor:
    """Polls a sim link: world state samples (when their sequence changes) and arm servo targets."""

    def __init__(self, link_name: str, period: float = 0.002, attach_timeout: float = 10.0) -> None:
        from transports.sim_link import SimLink

        self.link = SimLink.attach(link_name, timeout=attach_timeout)
        self.period = period
        # (world wall_time, sim_time, x, y, z, max |arm_qd|)
        self.states: list[tuple[float, float, float, float, float, float]] = []
        # (seq, wall_time written by the servo thread)
        self.commands: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None

    def start(self) -> LinkMonitor:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="bench-link", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        last_state = last_cmd = -1
        try:
            while not self._stop.is_set():
                seq, st = self.link.read_state()
                if seq != last_state:
                    last_state = seq
                    p = st.tcp_pos
                    self.states.append((st.wall_time, st.sim_time, float(p[0]), float(p[1]), float(p[2]),
                                        float(np.max(np.abs(st.arm_qd)))))
                cmd = self.link.read_arm_command()
                if cmd.seq != last_cmd:
                    last_cmd = cmd.seq
                    self.commands.append((cmd.seq, cmd.wall_time))
                time.sleep(self.period)
        except Exception as exc:  # the world went away: report, do not crash the bench
            self.error = repr(exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def clear(self) -> None:
        self.states.clear()
        self.commands.clear()

    def servo_periods(self, t0: float, t1: float) -> np.ndarray:
        """Intervals (s) between consecutive servo targets written in [t0, t1] (gaps in seq skipped)."""
        cmds = [c for c in list(self.commands) if t0 <= c[1] <= t1]
        out = [b[1] - a[1] for a, b in itertools.pairwise(cmds) if b[0] - a[0] == 1]
        return np.asarray(out)
