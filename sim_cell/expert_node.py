"""scripted_expert node: the scripted expert as an action source on the ROS graph.

Reads the sim-only ground truth topic and the contract's 7-D state, and publishes the 7-D action as source
``expert`` once per control step. In lockstep (the sim graph's default) a step is the world's control step:
it takes the state and the ground truth stamped with that step's sim time exactly, and the world waits for
its action; otherwise it runs on the wall clock with the newest inputs. It never talks to the arm any other
way.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Final

from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from aubo_bridge.config import ACTION_RESPONSES, RESPONSE_LIBERO
from libero_workcell import ros_msgs
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SOURCE_EXPERT, Params, Qos, Topics
from libero_workcell.json_topics import ArmModeReport, GroundTruth, JsonTopicReader, SimEpisodeReport
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.rate import CONTROL_PRIORITY
from libero_workcell.ros_qos import qos
from sim_cell.expert import ExpertConfig, SceneView, ScriptedExpert
from transports.node_steps import NodeSteps
from transports.stepping import Step

STATE, TRUTH = "state", "truth"


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    "max_input_age": 0.25,  # s since receipt (wall clock): older inputs -> no action
    "exit_on_done": False,
    "action_response": RESPONSE_LIBERO,  # the arm's (aubo_bridge.action_response)
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
}


class ExpertNode(Node):
    def __init__(self) -> None:
        super().__init__("scripted_expert")
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        hz = float(p(Params.CONTROL_HZ))
        self.max_age_ns = round(float(p("max_input_age")) * 1e9)
        self.exit_on_done = bool(p("exit_on_done"))
        response = str(p("action_response"))
        if response not in ACTION_RESPONSES:
            raise ValueError(f"action_response must be one of {list(ACTION_RESPONSES)}, got {response!r}")
        self.expert = ScriptedExpert(ExpertConfig(control_hz=hz, action_response=response))
        self.steps = NodeSteps(self, hz, self._step, inputs=(STATE, TRUTH), source=SOURCE_EXPERT,
                               priority=CONTROL_PRIORITY)  # fmt: skip
        lockstep = self.steps.lockstep
        self._episode: int | None = None
        # The turn its actions carry (ros_msgs.new_turn): a new one at each world episode (the world starts it),
        # and on the wall clock once the arm first enables itself (its stream began before). After a stop or a
        # fault of the arm it drives again only from the next world episode (aubo_bridge.arbiter).
        self.turn = 0
        self._arm_seen_enabled = lockstep  # in lockstep the arm enables at the world's first tick, before any step
        log = self.get_logger()
        self._arm_reader = JsonTopicReader(ArmModeReport, Topics.ARM_MODE, log)
        self._truth_reader = JsonTopicReader(GroundTruth, Topics.SIM_GROUND_TRUTH, log)
        self._episode_reader = JsonTopicReader(SimEpisodeReport, Topics.SIM_EPISODE, log)
        self.done = threading.Event()
        self._pub = self.steps.publisher(JointState, Topics.ACTION, Qos.COMMAND)
        self.steps.read(String, Topics.SIM_GROUND_TRUTH, Qos.STATE, self._on_truth)
        self.steps.read(JointState, Topics.ROBOT_STATE, Qos.STATE, self._on_state)
        self.create_subscription(String, Topics.SIM_EPISODE, self._episode_reader.then(self._on_episode),
                                 qos(Qos.LATCHED))  # fmt: skip
        self.create_subscription(String, Topics.ARM_MODE, self._arm_reader.then(self._on_arm_mode), qos(Qos.LATCHED))
        self.steps.start()
        if self.steps.priority_note:
            self.get_logger().warning(f"action loop: {self.steps.priority_note}")
        clock = "the world's control steps (lockstep)" if self.steps.lockstep else f"{hz} Hz"
        self.get_logger().info(f"scripted expert publishing actions as {SOURCE_EXPERT!r} at {clock}")

    def _on_truth(self, msg: String) -> None:
        got = self._truth_reader.checked(msg)  # a bad one is counted, logged and dropped (libero_workcell.json_topics)
        if got is None:
            return
        doc, gt = got
        stamp = doc.clock_ns if doc.clock_ns is not None else time.time_ns()
        self.steps.inputs.put(TRUTH, stamp, (time.time_ns(), doc.episode, SceneView.from_ground_truth(gt)))

    def _on_state(self, msg: JointState) -> None:
        state = ros_msgs.decoded_or_logged(ros_msgs.state_from_msg, msg, self.get_logger())
        if state is not None:
            self.steps.inputs.put(STATE, ros_msgs.ns_from_stamp(msg.header.stamp), (time.time_ns(), state))

    def _on_arm_mode(self, report: ArmModeReport) -> None:
        if report.driven and not self._arm_seen_enabled:  # the simulated arm enabled itself: the episode's start
            self._arm_seen_enabled = True
            self.turn = ros_msgs.new_turn()

    def _on_episode(self, report: SimEpisodeReport) -> None:
        if report.done and not self.done.is_set():
            self.get_logger().info(f"episode done: {report.metrics.model_dump_json()}")
            self.done.set()

    def _step(self, step: Step) -> bool:
        if step.lockstep:
            got = self.steps.gather({STATE: step.time_ns, TRUTH: step.time_ns})
            if got is None:
                return False
            (_, state), (_, episode, scene) = got[STATE], got[TRUTH]
        else:  # the newest inputs, if they arrived recently enough (wall clock)
            s, t = self.steps.inputs.latest(STATE), self.steps.inputs.latest(TRUTH)
            if s is None or t is None or step.time_ns - min(s[1][0], t[1][0]) > self.max_age_ns:
                return False  # stale inputs: send nothing, the arm's watchdog holds it
            (_, state), (_, episode, scene) = s[1], t[1]
        if episode != self._episode:  # a new episode: the script starts over (its ground truth says so)
            self._episode = episode
            self.expert.reset()
            self.turn = ros_msgs.new_turn()
        action = self.expert.act(scene, state)
        self._pub.publish(ros_msgs.action_msg(action, SOURCE_EXPERT, ros_msgs.stamp_from_ns(step.time_ns),
                                              turn=self.turn))  # fmt: skip
        return True

    @property
    def loop(self):
        """The wall-clock loop's timing (None in lockstep)."""
        return self.steps.loop

    @property
    def finished(self) -> bool:
        """run_node stops spinning once the episode is done, if asked to."""
        return self.exit_on_done and self.done.is_set()

    def shutdown(self) -> None:
        self.steps.stop()


def main(args: list[str] | None = None) -> None:
    run_node(ExpertNode, "scripted_expert", args)


if __name__ == "__main__":
    main()
