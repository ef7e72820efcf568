"""console node: the operator's web page for the running graph (docs/console.md).

It only listens (the arm's mode and pose, the gripper, the belt, the jobs' status topics, ``/diagnostics``, and
each camera while a page watches it) and, when a button is pressed, calls the same services and parameters
``workcell call`` does.
It takes no part in sim lockstep and reads every topic with a reader that never slows its writer (cameras best
effort, newest only): a console that is slow, or a page that lags, costs the graph nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.srv import SetParameters
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from std_srvs.srv import Trigger

from console import access
from console.app import STATE_HZ, create_app
from console.controls import OFFERED, GraphControls, plan
from console.frames import JPEG_QUALITY, FrameStore
from console.model import ConsoleModel
from console.server import ConsoleServer
from libero_workcell import json_topics, ros_msgs
from libero_workcell.contract import CAMERA_NAMES, ContractError, Params, Qos, Topics
from libero_workcell.image_convention import POLICY_VIEWS
from libero_workcell.json_topics import ArmModeReport, RecorderStatus, SimEpisodeReport, StatusDocument, TopicDocument
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.ros_qos import qos

DEFAULT_PORT: Final = 8080
WATCHED_S: Final = 5.0  # a camera's (or the fast state's) subscription ends this long after the last page asked

PARAMETERS: Final[dict[str, Any]] = {
    "host": "127.0.0.1",  # any other address needs a token (console.access)
    "port": DEFAULT_PORT,  # 0: one the system chooses (the log says which)
    "token_file": "",  # a file holding the token (mode 600); else the environment's WORKCELL_CONSOLE_TOKEN
    "policy_view": "libero",  # what the policy is shown of a frame (policy_node's policy.image_view)
    "state_hz": STATE_HZ,  # the page's state updates per second
    "jpeg_quality": JPEG_QUALITY,
    "title": "workcell",
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
}

# topic -> the model's key, for the jobs' JSON status topics (latched ones first: their last message comes too)
JSON_TOPICS: Final = {  # topic -> (the model's key, its QoS, what its document must be: libero_workcell.json_topics)
    Topics.RECORDER_STATUS: ("recorder", Qos.LATCHED, RecorderStatus),
    Topics.SIM_EPISODE: ("episode", Qos.LATCHED, SimEpisodeReport),
    Topics.TELEOP_STATUS: ("teleop", Qos.STATE, StatusDocument),
    Topics.POLICY_STATUS: ("policy", Qos.STATE, StatusDocument),
    Topics.REPLAY_STATUS: ("replay", Qos.LATCHED, StatusDocument),
}
NEWEST_ONLY: Final = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=1, reliability=ReliabilityPolicy.BEST_EFFORT,
                                durability=DurabilityPolicy.VOLATILE)  # fmt: skip


def policy_transform(view: str) -> Callable[[Any], Any] | None:
    """What the policy is shown of a frame: the deploy graph's own preprocessing (its view, then what the local
    policy server's protocol sends: policy_node.clients.frame_transform); None where that protocol sends no
    frame of its own making."""
    from policy_node.clients import frame_transform

    if view not in POLICY_VIEWS:
        raise ValueError(f"policy_view must be one of {list(POLICY_VIEWS)}, got {view!r}")
    return frame_transform(view)


class ConsoleNode(Node):
    def __init__(self, **node_options: Any) -> None:  # rclpy Node's options (a context, parameter overrides)
        super().__init__("console", **node_options)
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        host, port = str(p("host")), int(p("port"))
        token = access.load_token(str(p("token_file")))
        access.check_bind(host, token)
        self.model = ConsoleModel()
        self.frames = FrameStore(CAMERA_NAMES, policy_transform(str(p("policy_view"))), int(p("jpeg_quality")))
        self._triggers: dict[str, Any] = {}
        self._param_clients: dict[str, Any] = {}
        for command, choices in OFFERED.items():  # every client a button needs, made once: a hold waits for nothing
            for args in choices or ((),):
                for step in plan(command, list(args)) if choices is not None else plan(command, ["none"]):
                    if step.service and step.service not in self._triggers:
                        self._triggers[step.service] = self.create_client(Trigger, step.service)
                    elif step.node and step.node not in self._param_clients:
                        self._param_clients[step.node] = self.create_client(SetParameters,
                                                                            f"/{step.node}/set_parameters")
        self._subscribe()
        app = create_app(self.model, self.frames, GraphControls(self), host=host, port=port, token=token,
                         state_hz=float(p("state_hz")), title=str(p("title")))  # fmt: skip
        self.server = ConsoleServer(app, host, port)
        self.server.start()
        self.get_logger().info(f"console at {self.server.url}" + (" (token required)" if token else ""))

    # ------------------------------------------------------------------ inputs
    def _subscribe(self) -> None:
        m = self.model
        self._cameras: dict[str, Any] = {}  # camera -> its subscription, while a page watches it
        self.create_timer(0.2, self._follow_pages, clock=Clock(clock_type=ClockType.STEADY_TIME))
        self.create_subscription(String, Topics.ARM_MODE,
                                 lambda msg: m.update_arm_mode(_json(msg.data, ArmModeReport, Topics.ARM_MODE)),
                                 qos(Qos.LATCHED))  # fmt: skip
        self.create_subscription(String, Topics.ACTIVE_SOURCE, lambda msg: m.update_active_source(msg.data),
                                 qos(Qos.LATCHED))  # fmt: skip
        self._motion: list[Any] = []  # the TCP, gripper and belt subscriptions, while a page asks for the state
        self.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, self._on_diagnostics, qos(Qos.DIAGNOSTICS))
        for topic, (key, spec, model) in JSON_TOPICS.items():
            self.create_subscription(String, topic, lambda msg, k=key, d=model, t=topic: m.update_json(
                k, _json(msg.data, d, t)), qos(spec))  # fmt: skip

    def _follow_pages(self) -> None:
        """Take a camera's frames only while a page watches it, and the arm's and the belt's fast state topics
        only while a page asks for the state: idle, the console follows only what it must not miss (modes,
        faults, diagnostics, the jobs' status)."""
        m = self.model
        state_watched = m.state_watched(WATCHED_S)
        if state_watched and not self._motion:
            self._motion = [
                self.create_subscription(PoseStamped, Topics.TCP_POSE, self._on_tcp, NEWEST_ONLY),
                self.create_subscription(JointState, Topics.GRIPPER_STATE, self._on_gripper, NEWEST_ONLY),
                self.create_subscription(JointState, Topics.CONVEYOR_STATE, self._on_belt, NEWEST_ONLY),
            ]
        elif self._motion and not state_watched:
            for sub in self._motion:
                self.destroy_subscription(sub)
            self._motion = []
            m.forget_motion()
        for camera in CAMERA_NAMES:
            watched = self.frames.wanted(camera, WATCHED_S)
            if watched and camera not in self._cameras:
                self._cameras[camera] = self.create_subscription(Image, Topics.image(camera), self._on_frame(camera),
                                                                 NEWEST_ONLY)  # fmt: skip
            elif not watched and camera in self._cameras:
                self.destroy_subscription(self._cameras.pop(camera))

    def _on_frame(self, camera: str) -> Callable[[Image], None]:
        return lambda msg: self.frames.put(camera, msg.height, msg.width, msg.encoding, msg.data)

    def _on_tcp(self, msg: PoseStamped) -> None:
        p, o = msg.pose.position, msg.pose.orientation
        self.model.update_tcp((p.x, p.y, p.z), (o.x, o.y, o.z, o.w))

    def _on_gripper(self, msg: JointState) -> None:
        self.model.update_gripper(msg.position[0] if len(msg.position) else None)

    def _on_belt(self, msg: JointState) -> None:
        if len(msg.position) and len(msg.velocity):
            self.model.update_conveyor(msg.position[0], msg.velocity[0])

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            self.model.update_diagnostic(status.name, ros_msgs.diag_level(status), status.message)

    # ------------------------------------------------------------------ controls (console.controls.StepRunner)
    def offers(self, service: str) -> bool:
        client = self._triggers.get(service)
        return client is not None and client.service_is_ready()

    async def trigger(self, service: str) -> tuple[bool, str]:
        client = self._triggers[service]
        if not client.service_is_ready():
            return False, f"{service} is not offered by this graph (is its node running?)"
        response = await _awaited(client, client.call_async(Trigger.Request()))
        return bool(response.success), str(response.message)

    async def set_parameter(self, node: str, name: str, value: Any) -> tuple[bool, str]:
        client = self._param_clients[node]
        if not client.service_is_ready():
            return False, f"node {node} is not running in this graph"
        request = SetParameters.Request(parameters=[Parameter(name, value=value).to_parameter_msg()])
        result = (await _awaited(client, client.call_async(request))).results[0]
        return bool(result.successful), str(result.reason) or f"{name} = {value!r}"

    def shutdown(self) -> None:
        self.server.stop()


async def _awaited(client: Any, future: Any) -> Any:
    """An rclpy future (completed by the node's executor, in its thread) awaited on the web server's loop."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def finish(f: Any) -> None:
        if not done.done():
            done.set_result(f)

    future.add_done_callback(lambda f: loop.call_soon_threadsafe(finish, f))
    try:
        return (await done).result()
    finally:
        if not future.done():
            client.remove_pending_request(future)


def _json(text: str, model: type[TopicDocument], topic: str) -> Any:
    """The message's JSON if it is ``model``'s document (libero_workcell.json_topics), else None: the model counts
    it as a bad message and keeps what it had."""
    try:
        return json_topics.checked(model, text, topic)[1]
    except ContractError:
        return None


def main(args: list[str] | None = None) -> None:
    run_node(ConsoleNode, "console", args, startup_errors=(ValueError, RuntimeError, OSError))


if __name__ == "__main__":
    main()
