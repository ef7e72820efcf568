"""policy_server node (simulation): the local openpi policy server inside the simulated workcell's graph.

openpi-server's ``WebsocketPolicyServer`` (policy_node.serve.LocalPolicyServer) on ``host``:``port``
(127.0.0.1 unless ``host`` says otherwise), serving ``policy``: ``expert`` (sim_cell.expert_policy: the
scripted expert's chunks, from the observed state and the world's ground truth, which this node reads from
``/sim/ground_truth``), ``reach`` (policy_node.builtin_policies: toward a fixed TCP position) or ``reach-rtc``
(the same as a sampled policy that does real-time chunking with policy_node's ``policy.rtc`` fields). The
policy_node connects to it as it would to a GPU machine's server. ``delay_ms`` adds inference time.
"""

from __future__ import annotations

import time
from typing import Any, Final

from rclpy.node import Node
from std_msgs.msg import String

from libero_workcell.contract import CONTROL_HZ_DEFAULT, Params, Qos, Topics
from libero_workcell.json_topics import GroundTruth, JsonTopicReader
from libero_workcell.loopback import LOOPBACK
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.ros_qos import qos
from policy_node.builtin_policies import ReachPolicy, SampledReachPolicy
from policy_node.serve import REACH_TARGET_DEFAULT, LocalPolicyServer
from sim_cell.expert_policy import ExpertChunkPolicy
from transports.stepping import StampedInputs

POLICIES = ("expert", "reach", "reach-rtc")
TRUTH = "truth"
TRUTH_TIMEOUT = 5.0  # s (wall) a lockstep request waits for the ground truth of its moment
WORLD_TIMEOUT = 60.0  # s (wall) for the world's ground truth publisher to be discovered, as the world waits for us


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",  # injected into every node; unused here
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    "policy": "expert",
    "host": LOOPBACK,
    "port": 8000,
    "horizon": 10,  # actions per chunk (pi05_libero: 10)
    "delay_ms": 0.0,  # inference time to spend per request
}


class PolicyServerNode(Node):
    def __init__(self) -> None:
        super().__init__("policy_server")
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        if not p(Params.USE_SIM):
            raise ValueError("policy_server serves the simulated workcell only; on the real one use openpi's server")
        kind = str(p("policy"))
        if kind not in POLICIES:
            raise ValueError(f"policy must be one of {list(POLICIES)}, got {kind!r}")
        self._truth = StampedInputs((TRUTH,), depth=64)
        self._truth_reader = JsonTopicReader(GroundTruth, Topics.SIM_GROUND_TRUTH, self.get_logger())
        hz, horizon, delay = float(p(Params.CONTROL_HZ)), int(p("horizon")), float(p("delay_ms"))
        if kind == "expert":
            policy = ExpertChunkPolicy(self.truth, horizon, hz, delay_ms=delay)
            self.create_subscription(String, Topics.SIM_GROUND_TRUTH, self._on_truth, qos(Qos.STATE, True))
            self._await_world()
        elif kind == "reach-rtc":
            policy = SampledReachPolicy(REACH_TARGET_DEFAULT, horizon, delay, hz)
        else:
            policy = ReachPolicy(REACH_TARGET_DEFAULT, horizon, delay, hz)
        self.server = LocalPolicyServer(policy, str(p("host")), int(p("port")), {"policy": kind, "horizon": horizon})
        try:
            self.server.start()
        except RuntimeError as exc:
            raise RuntimeError(f"{exc} (is port {p('port')} in use?)") from None
        self.get_logger().info(f"serving the {kind} policy on {self.server.url} (openpi's websocket protocol)")

    def _await_world(self) -> None:
        """Serve only once the world's ground truth reaches this node. The policy node registers with the world
        once it is connected here, and the world's first tick waits for it: so the first request never finds a
        subscription still being discovered (on a loaded machine that took seconds, the first chunk failed, and
        the episode depended on the load)."""
        deadline = time.monotonic() + WORLD_TIMEOUT
        while self.count_publishers(Topics.SIM_GROUND_TRUTH) == 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {Topics.SIM_GROUND_TRUTH} publisher after {WORLD_TIMEOUT:g} s: is sim_world "
                                   "running on this domain?")  # fmt: skip
            time.sleep(0.05)

    def _on_truth(self, msg: String) -> None:
        got = self._truth_reader.checked(msg)  # a bad one is counted, logged and dropped (libero_workcell.json_topics)
        if got is not None:
            doc, gt = got
            self._truth.put(TRUTH, doc.clock_ns or 0, gt)

    def truth(self, clock_ns: int | None = None) -> dict | None:
        """The newest ground truth; with ``clock_ns`` (a lockstep request), the one of that moment (it is on its
        way: the world publishes it before the step it belongs to)."""
        if clock_ns is None:
            latest = self._truth.latest(TRUTH)
            return None if latest is None else latest[1]
        got = self._truth.wait({TRUTH: clock_ns}, timeout=TRUTH_TIMEOUT)
        return None if got is None else got[TRUTH]

    def shutdown(self) -> None:
        self.server.stop()


def main(args: list[str] | None = None) -> None:
    run_node(PolicyServerNode, "policy_server", args)


if __name__ == "__main__":
    main()
