"""The evaluation's own rclpy node on a graph's domain: its services, its parameters, the world's episode reports
and the recorder's status."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

START_TIMEOUT = 60.0  # s for a graph's services and first reports to appear
CALL_TIMEOUT = 10.0  # s for a service to answer


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
