"""The evaluation's own rclpy node on a graph's domain: its services, its parameters, the world's episode reports
and the recorder's status, and (on the physical cell) the arm's mode and joints: whether it is home."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

START_TIMEOUT = 60.0  # s for a graph's services and first reports to appear
CALL_TIMEOUT = 10.0  # s for a service to answer
HOME_TIMEOUT = 60.0  # s for the arm to report it is home once it was told to home (a few s of travel)
HOME_TOLERANCE = 1e-3  # rad, each joint: the arm is home (a servoed arm at rest is well within it)


class GraphProbe:
    """Use as a context manager: its own rclpy context, so a process may hold one per graph."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __enter__(self) -> GraphProbe:
        import rclpy
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from std_msgs.msg import String

        from libero_workcell.contract import Qos, Topics
        from libero_workcell.json_topics import JsonTopicReader, RecorderStatus, SimEpisodeReport
        from libero_workcell.ros_qos import qos

        self._ctx = Context()
        rclpy.init(context=self._ctx)
        self.node = rclpy.create_node(self.name, context=self._ctx)
        self._ex = SingleThreadedExecutor(context=self._ctx)
        self._ex.add_node(self.node)
        self.episode: dict[str, Any] | None = None
        self.recorder: dict[str, Any] | None = None
        # each report checked (libero_workcell.json_topics): a bad message is counted, logged and dropped
        log = self.node.get_logger()
        for attr, model, topic in (("episode", SimEpisodeReport, Topics.SIM_EPISODE),
                                   ("recorder", RecorderStatus, Topics.RECORDER_STATUS)):  # fmt: skip
            reader = JsonTopicReader(model, topic, log)
            self.node.create_subscription(String, topic, lambda m, r=reader, a=attr: self._keep(a, r.checked(m)),
                                          qos(Qos.LATCHED))  # fmt: skip
        return self

    def watch_arm(self) -> None:
        """Follow the arm: its mode (/aubo/mode, latched, checked: json_topics) and its joints (/joint_states),
        each with when it came (time.monotonic)."""
        from sensor_msgs.msg import JointState
        from std_msgs.msg import String

        from libero_workcell.contract import Qos, Topics
        from libero_workcell.json_topics import ArmModeReport, JsonTopicReader
        from libero_workcell.ros_qos import qos

        self.arm_mode: Any = None  # the last ArmModeReport
        self.arm_mode_at = self.joints_at = -math.inf
        self.joints: np.ndarray | None = None
        reader = JsonTopicReader(ArmModeReport, Topics.ARM_MODE, self.node.get_logger())
        self.node.create_subscription(String, Topics.ARM_MODE, reader.then(self._on_arm_mode), qos(Qos.LATCHED))
        self.node.create_subscription(JointState, Topics.JOINT_STATES, self._on_joints, qos(Qos.STATE))

    def _on_arm_mode(self, report: Any) -> None:
        self.arm_mode, self.arm_mode_at = report, time.monotonic()

    def _on_joints(self, msg: Any) -> None:
        q = np.array(msg.position, float)
        if q.ndim == 1 and q.size and np.all(np.isfinite(q)):  # (a bad message is not the arm's position)
            self.joints, self.joints_at = q, time.monotonic()

    def home_reached(self, home_q: Sequence[float], since: float) -> bool:
        """Whether the arm says it is home since ``since`` (time.monotonic() before it was told to home): its mode
        one sources may drive (homing over, no fault) and joints received after ``since`` within HOME_TOLERANCE of
        ``home_q``. RuntimeError when a mode received since then says it will not get there (a fault, a stop)."""
        from libero_workcell.contract import ARM_DISABLED, ARM_FAULT

        mode = self.arm_mode
        if mode is not None and self.arm_mode_at > since and mode.mode in (ARM_FAULT, ARM_DISABLED):
            raise RuntimeError(f"the arm is {mode.mode}{f' ({mode.fault})' if mode.fault else ''}, not homing")
        q, home = self.joints, np.asarray(home_q, float)
        return (mode is not None and mode.driven and q is not None and self.joints_at > since
                and q.shape == home.shape and float(np.max(np.abs(q - home))) <= HOME_TOLERANCE)  # fmt: skip

    def wait_home(self, home_q: Sequence[float], since: float, check: Callable[[], None],
                  timeout: float = HOME_TIMEOUT) -> None:  # fmt: skip
        """Spin until :meth:`home_reached` (call :meth:`watch_arm` first); TimeoutError after ``timeout`` s."""
        self.spin(lambda: self.home_reached(home_q, since), timeout,
                  "the arm to report it is home (/aubo/mode enabled after homing, /joint_states at home_q)", check)

    def get_params(self, node: str, names: Sequence[str]) -> dict[str, Any]:
        """The values of ``node``'s parameters ``names``; RuntimeError naming one it does not have."""
        from rcl_interfaces.msg import ParameterType
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python

        client = self.node.create_client(GetParameters, f"/{node}/get_parameters")
        try:
            self.spin(client.service_is_ready, START_TIMEOUT, f"/{node}/get_parameters", lambda: None)
            future = client.call_async(GetParameters.Request(names=list(names)))
            self.spin(future.done, CALL_TIMEOUT, f"/{node}/get_parameters to answer", lambda: None)
            values = future.result().values
        finally:
            self.node.destroy_client(client)
        if len(values) != len(names) or any(v.type == ParameterType.PARAMETER_NOT_SET for v in values):
            raise RuntimeError(f"{node} does not have every parameter of {list(names)}")
        return {name: parameter_value_to_python(v) for name, v in zip(names, values, strict=True)}

    def _keep(self, attr: str, got: tuple[Any, Any] | None) -> None:
        if got is not None:
            setattr(self, attr, got[1])

    def __exit__(self, *exc: object) -> None:
        self._ex.shutdown()
        self.node.destroy_node()
        self._ctx.try_shutdown()

    def spin(self, until: Callable[[], Any], timeout: float, what: str, check: Callable[[], None]) -> None:
        """Spin until ``until()``; ``check()`` between spins raises if the graph is gone; TimeoutError after
        ``timeout`` s naming ``what``."""
        deadline = time.monotonic() + timeout
        while not until():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}")
            check()
            self._ex.spin_once(timeout_sec=0.05)

    def call(self, service: str, check: Callable[[], None]) -> str:
        """Call a Trigger service; its message, or RuntimeError with the refusal."""
        from std_srvs.srv import Trigger

        client = self.node.create_client(Trigger, service)
        try:
            self.spin(client.service_is_ready, START_TIMEOUT, service, check)
            future = client.call_async(Trigger.Request())
            self.spin(future.done, CALL_TIMEOUT, f"{service} to answer", check)
            res = future.result()
            if not res.success:
                raise RuntimeError(f"{service} refused: {res.message}")
            return res.message
        finally:
            self.node.destroy_client(client)

    def set_param(self, node: str, name: str, value: Any) -> None:
        from workcell.operator_cli import GraphClient, OperatorError

        try:
            ok, reason = GraphClient(self.node, self._ex).set_parameter(node, name, value)
        except OperatorError as exc:
            ok, reason = False, str(exc)
        if not ok:
            raise RuntimeError(f"{node}.{name} := {value!r} refused: {reason}")

    def set_params_atomically(self, node: str, values: dict[str, Any]) -> None:
        """Set several parameters of ``node`` in one change (its callback sees them together: a task's fields are
        checked as one task, never half old, half new)."""
        from rcl_interfaces.srv import SetParametersAtomically
        from rclpy.parameter import Parameter

        client = self.node.create_client(SetParametersAtomically, f"/{node}/set_parameters_atomically")
        try:
            self.spin(client.service_is_ready, START_TIMEOUT, f"/{node}/set_parameters_atomically", lambda: None)
            request = SetParametersAtomically.Request(
                parameters=[Parameter(name, value=value).to_parameter_msg() for name, value in values.items()]
            )
            future = client.call_async(request)
            self.spin(future.done, CALL_TIMEOUT, f"/{node}/set_parameters_atomically to answer", lambda: None)
            result = future.result().result
            if not result.successful:
                raise RuntimeError(f"{node} refused {values}: {result.reason}")
        finally:
            self.node.destroy_client(client)
