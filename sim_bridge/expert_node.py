"""scripted_expert node: the scripted expert as an action source on the ROS graph.

Reads the sim-only ground truth topic and the contract's 7-D state, and
publishes the 7-D action as source ``expert`` at the control rate, from its
own thread on absolute deadlines. It never talks to the arm any other way.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from aubo_bridge.config import ACTION_RESPONSES, RESPONSE_LIBERO
from libero_workcell import ros_msgs
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SOURCE_EXPERT, Params, Qos, Topics
from libero_workcell.node_main import run_node
from libero_workcell.node_params import refuse_runtime_changes
from libero_workcell.rate import CONTROL_PRIORITY, run_loop
from libero_workcell.ros_qos import qos
from sim_bridge.expert import ExpertConfig, SceneView, ScriptedExpert


class ExpertNode(Node):
    def __init__(self) -> None:
        super().__init__("scripted_expert")
        self.declare_parameter(Params.CONTROL_HZ, CONTROL_HZ_DEFAULT)
        self.declare_parameter("max_input_age", 0.25)  # s: older ground truth or state -> no action
        self.declare_parameter("exit_on_done", False)
        self.declare_parameter("action_response", RESPONSE_LIBERO)  # the arm's (aubo_bridge.action_response)
        refuse_runtime_changes(self)
        hz = float(self.get_parameter(Params.CONTROL_HZ).value)
        self.max_age = float(self.get_parameter("max_input_age").value)
        self.exit_on_done = bool(self.get_parameter("exit_on_done").value)
        response = str(self.get_parameter("action_response").value)
        if response not in ACTION_RESPONSES:
            raise ValueError(f"action_response must be one of {list(ACTION_RESPONSES)}, got {response!r}")
        self.expert = ScriptedExpert(ExpertConfig(control_hz=hz, action_response=response))
        self._lock = threading.Lock()
        self._scene: tuple[float, SceneView] | None = None
        self._state: tuple[float, np.ndarray] | None = None
        self._episode: int | None = None
        self.done = threading.Event()
        self._pub = self.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND))
        self.create_subscription(String, Topics.SIM_GROUND_TRUTH, self._on_truth, qos(Qos.STATE))
        self.create_subscription(JointState, Topics.ROBOT_STATE, self._on_state, qos(Qos.STATE))
        self.create_subscription(String, Topics.SIM_EPISODE, self._on_episode, qos(Qos.LATCHED))
        self._stop = threading.Event()
        self._thread, self.loop = run_loop(hz, self._step, self._stop, "expert", priority=CONTROL_PRIORITY)
        if self.loop.priority_note:
            self.get_logger().warning(f"action loop: {self.loop.priority_note}")
        self.get_logger().info(f"scripted expert publishing actions as {SOURCE_EXPERT!r} at {hz} Hz")

    def _on_truth(self, msg: String) -> None:
        gt = json.loads(msg.data)
        with self._lock:
            self._scene = (time.monotonic(), SceneView.from_ground_truth(gt))

    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is None:
            return
        with self._lock:
            self._state = (time.monotonic(), state)

    def _on_episode(self, msg: String) -> None:
        info = json.loads(msg.data)
        episode = info.get("episode")
        if episode != self._episode:  # a reset: start the script over
            self._episode = episode
            self.expert.reset()
        if info.get("done") and not self.done.is_set():
            self.get_logger().info(f"episode done: {json.dumps(info.get('metrics', {}))}")
            self.done.set()

    def _step(self) -> None:
        now = time.monotonic()
        with self._lock:
            scene, state = self._scene, self._state
        if scene is None or state is None or now - scene[0] > self.max_age or now - state[0] > self.max_age:
            return  # stale inputs: send nothing, the arm's watchdog holds it
        action = self.expert.act(scene[1], state[1])
        self._pub.publish(ros_msgs.action_msg(action, SOURCE_EXPERT))

    @property
    def finished(self) -> bool:
        """run_node stops spinning once the episode is done, if asked to."""
        return self.exit_on_done and self.done.is_set()

    def shutdown(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1.0)


def main(args: list[str] | None = None) -> None:
    run_node(ExpertNode, "scripted_expert", args)


if __name__ == "__main__":
    main()
