"""policy_node on real rclpy, against a real openpi-server on loopback: topics in, actions out as 'policy'."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import rclpy

from libero_workcell import ros_msgs
from libero_workcell.contract import CAMERA_NAMES, SOURCE_POLICY, Qos, Topics
from libero_workcell.ros_qos import qos
from policy_node.builtin_policies import ReachPolicy
from policy_node.serve import LocalPolicyServer

pytestmark = pytest.mark.slow
STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])


class PoisonablePolicy:
    """A policy whose chunks carry a NaN while ``poisoned`` (a server gone wrong, still answering)."""

    def __init__(self, policy) -> None:
        self.policy, self.poisoned = policy, False

    def infer(self, obs: dict) -> dict:
        reply = self.policy.infer(obs)
        if self.poisoned:
            reply["actions"] = np.array(reply["actions"], float)
            reply["actions"][3, 2] = np.nan
        return reply

    @property
    def metadata(self) -> dict:
        return getattr(self.policy, "metadata", {})


class StallProbe:
    """A thread that sleeps 10 ms at a time and notes how late it woke (wall s): the machine's stalls of this
    process, whatever its executor does (a tick that blocks on the server does not delay it: it waits, without
    the GIL)."""

    def __init__(self) -> None:
        self.late: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.time()
            time.sleep(0.01)
            self.late.append((time.time(), time.time() - t0 - 0.01))

    def longest(self, t0: float, t1: float) -> float:
        return max((late for t, late in self.late if t0 <= t <= t1), default=0.0)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture
def rig(tmp_path, request):
    """(node, spin, actions, diagnostics, server): the policy node fed at 20 Hz by a feeder node."""
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    from policy_node.node import PolicyNode

    policy = PoisonablePolicy(ReachPolicy([0.45, 0.0, 0.35], delay_ms=30))
    server = LocalPolicyServer(policy).start()
    server.policy = policy
    args = ["--ros-args", "-p", f"policy.url:={server.url}", "-p", "policy.task:=pick up the parts",
            "-p", "policy.start_wait_steps:=4", "-p", "policy.reconnect_period:=0.2",
            "-p", f"timing_path:={tmp_path / 'timing.jsonl'}", *getattr(request, "param", [])]  # fmt: skip
    rclpy.init(args=args)
    node = PolicyNode()
    feeder = rclpy.create_node("feeder")
    pub_state = feeder.create_publisher(JointState, Topics.ROBOT_STATE, qos(Qos.STATE))
    pub_img = {c: feeder.create_publisher(Image, Topics.image(c), qos(Qos.SENSOR)) for c in CAMERA_NAMES}
    actions: list[tuple[float, np.ndarray, str]] = []
    diagnostics: list[dict] = []

    pub_result = feeder.create_publisher(String, Topics.ACTION_RESULT, qos(Qos.COMMAND))
    pub_mode = feeder.create_publisher(String, Topics.ARM_MODE, qos(Qos.LATCHED))
    turns: list[int] = []  # the turn of each action
    sent: list[float] = []  # each action's stamp (wall s): when the node's control step sent it
    answering = [True]  # whether the "arm bridge" answers each action with its result
    stalls = StallProbe()  # how long the machine held this process beyond a 10 ms sleep, off the executor

    def arm(mode: str, fault: str = "", raw: str | None = None) -> None:
        """What the arm bridge reports on /aubo/mode (``raw``: a message as it comes, whatever it is)."""
        pub_mode.publish(String(data=raw if raw is not None else json.dumps({"mode": mode, "fault": fault})))

    def on_action(msg) -> None:
        values, source, turn = ros_msgs.action_from_msg(msg)
        actions.append((time.monotonic(), values, source))
        turns.append(turn)
        sent.append(ros_msgs.wall_from_stamp(msg.header.stamp))
        if not answering[0]:
            return
        # as the arm bridge says: its first servo target went out 2 ms after it came
        servo = ros_msgs.stamp_from_ns(time.time_ns() + 2_000_000)
        pub_result.publish(ros_msgs.action_result_msg(msg.header.stamp, source, True, "ok", 0, values, servo))

    def on_diag(msg) -> None:
        for st in msg.status:
            if st.name == "policy_node":
                diagnostics.append({"level": ros_msgs.diag_level(st), "message": st.message,
                                    **{kv.key: kv.value for kv in st.values}})  # fmt: skip

    feeder.create_subscription(JointState, Topics.ACTION, on_action, qos(Qos.COMMAND))
    feeder.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, on_diag, qos(Qos.DIAGNOSTICS))
    ex = SingleThreadedExecutor()
    ex.add_node(node)
    ex.add_node(feeder)
    img = np.full((256, 256, 3), 90, np.uint8)
    next_feed = [0.0]
    arm("enabled")  # the arm bridge enabled the arm (its mode is latched)

    def spin(seconds: float, feed: bool = True) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if feed and time.monotonic() >= next_feed[0]:
                t = time.time()
                pub_state.publish(ros_msgs.state_msg(STATE, t))
                for c in CAMERA_NAMES:
                    pub_img[c].publish(ros_msgs.image_msg(img, t, c))
                next_feed[0] = time.monotonic() + 0.05
            ex.spin_once(timeout_sec=0.005)

    spin.arm, spin.turns, spin.sent, spin.answering = arm, turns, sent, answering  # type: ignore[attr-defined]
    spin.stalls = stalls  # type: ignore[attr-defined]
    yield node, spin, actions, diagnostics, server, tmp_path / "timing.jsonl"
    stalls.stop()
    node.shutdown()
    ex.shutdown()
    node.destroy_node()
    feeder.destroy_node()
    rclpy.try_shutdown()
    server.stop()


def test_the_policy_drives_at_the_control_rate_stops_on_request_and_holds_when_the_server_goes(rig) -> None:
    from std_srvs.srv import Trigger

    node, spin, actions, diagnostics, server, timing = rig
    spin(3.0)
    assert actions and all(src == SOURCE_POLICY for _, _, src in actions)
    t = np.array(spin.sent)  # the node's control steps, as it stamped them: not when this test's loop read them
    steady = t[t > t[0] + 0.5]
    # 20 Hz and no pause: no step missed (a gap of two periods) beyond what the machine's load held this process
    # for, as a thread sleeping beside the executor saw it (a core busy elsewhere can hold both for 100 ms)
    stalled = spin.stalls.longest(steady[0], steady[-1])
    assert 0.045 < np.median(np.diff(steady)) < 0.055, np.diff(steady)
    assert np.max(np.diff(steady)) < 0.1 + stalled, (np.diff(steady), stalled)
    assert [r.kind for r in node.records[:5]] == ["wait"] * 4 + ["chunk"]  # the start wait, then the policy
    np.testing.assert_array_equal(actions[0][1], [0.0] * 6 + [-1.0])
    chunked = [r for r in node.records if r.kind == "chunk"]
    assert chunked and chunked[-1].action[0] > 0  # toward the target from the fed state
    rows = [json.loads(line) for line in timing.read_text().splitlines()]
    assert {"chunk", "index", "round_trip_ms", "server_infer_ms", "obs_age_ms", "kind"} <= set(rows[-1])
    # end to end: the frames' exposure, the action on the wire, its first servo target (the bridge's result)
    joined = [r for r in rows if r["kind"] == "chunk" and r["servo_t"] is not None]
    assert len(joined) >= 0.9 * sum(r["kind"] == "chunk" for r in rows) > 20
    for r in joined:
        assert r["exposure_t"] <= r["sent_t"] <= r["servo_t"], r
        assert r["e2e_ms"] == pytest.approx((r["servo_t"] - r["exposure_t"]) * 1e3) and r["e2e_ms"] < 1000, r
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)  # written in step order
    assert any(d["connected"] == "True" and d["level"] == 0 for d in diagnostics)

    assert node._srv_stop(Trigger.Request(), Trigger.Response()).success
    stopped = time.time()  # the service ran in this thread: no control step since it began
    n = len(actions)
    spin(0.5)
    # nothing sent after the stop, by the node's own stamps (what was on its way may still arrive here, the more
    # the later this test's loop reads it)
    assert not [s for s in spin.sent if s > stopped], np.array(spin.sent) - stopped
    assert node._srv_start(Trigger.Request(), Trigger.Response()).success
    spin(1.0)
    assert len(actions) > n + 10

    server.stop()  # the server goes away mid-episode
    gone = time.time()
    spin(1.5)
    after = [s - gone for s in spin.sent if s > gone]  # by the node's stamps, as above
    assert not after or after[-1] < 0.1 + 0.05, after  # held within 2 control periods
    lost = diagnostics[-1]
    assert lost["level"] == 2 and "no policy server" in lost["message"], lost


def test_a_steps_timing_line_is_written_when_its_result_never_comes_even_if_nothing_else_happens(rig) -> None:
    """An episode's last steps: their actions' results never come (the arm bridge is gone, or the world paused
    at the episode's end), no step follows and no input comes. Each line is written once its wait for the result
    is over all the same (an evaluation waits for a line of every step of its trial)."""
    from std_srvs.srv import Trigger

    from policy_node.node import RESULT_WAIT_S

    node, spin, actions, _diagnostics, _server, timing = rig
    spin(1.5)
    spin.answering[0] = False  # from here on no action gets its result
    n = len(actions)
    spin(0.5)
    assert len(actions) > n + 3
    assert node._srv_stop(Trigger.Request(), Trigger.Response()).success  # no step follows
    last = spin.sent[-1]
    spin(RESULT_WAIT_S + 1.0, feed=False)  # nothing comes in: only the node's own clock goes on
    rows = [json.loads(line) for line in timing.read_text().splitlines()]
    # (a row's sent_t and the message's stamp are the same instant as two floats: they may differ in the last bit)
    unanswered = [r for r in rows if r["sent_t"] is not None and r["sent_t"] > spin.sent[n - 1] + 1e-6]
    assert unanswered and all(r["servo_t"] is None for r in unanswered), unanswered
    assert any(r["sent_t"] == pytest.approx(last, abs=1e-6) for r in rows), (last, rows[-3:])  # the last one too
    assert [r["t"] for r in rows] == sorted(r["t"] for r in rows)  # still in step order


@pytest.mark.parametrize("rig", [["-p", "use_sim:=false", "-p", "autostart:=true"]], indirect=True)
def test_on_the_physical_cell_the_policy_drives_only_after_an_explicit_start(rig) -> None:
    """autostart is for the simulated workcell: on hardware, enabling the arm must not hand it to a policy
    that is already streaming; and a start without a task is refused with the reason."""
    from rclpy.parameter import Parameter
    from std_srvs.srv import Trigger

    node, spin, actions, _, _, _ = rig
    spin(1.5)
    assert not actions and not node.running  # the arm is enabled (rig): on hardware nothing starts by itself
    (ok,) = node.set_parameters([Parameter("policy.task", value="")])  # no task: no world here to give one
    refused = node._srv_start(Trigger.Request(), Trigger.Response())
    assert ok.successful and not refused.success and not node.running
    assert "no task" in refused.message and "workcell call policy task" in refused.message
    (ok,) = node.set_parameters([Parameter("policy.task", value="pick up the parts")])
    assert node._srv_start(Trigger.Request(), Trigger.Response()).success
    spin(1.5)
    assert len(actions) > 15 and all(src == SOURCE_POLICY for _, _, src in actions)


def test_the_task_changes_at_run_time_and_nothing_else(rig) -> None:
    """The evaluation on the physical cell sets each trial's task (its prompt) before starting it."""
    from rclpy.parameter import Parameter

    node, spin, _, _, _, _ = rig
    (ok,) = node.set_parameters([Parameter("policy.task", value="pick up the parts, right to left")])
    assert ok.successful and node.task == "pick up the parts, right to left"
    assert node.get_parameter("policy.task").value == "pick up the parts, right to left"
    (refused,) = node.set_parameters([Parameter("policy.url", value="ws://elsewhere:8000")])
    assert not refused.successful and "read once at start-up" in refused.reason
    spin(1.0)
    assert node.records and node.records[-1].kind in ("wait", "chunk")  # it runs on, with the new task


def test_a_refused_chunk_holds_the_arm_and_the_diagnostics_warn_with_the_reason(rig) -> None:
    node, spin, actions, diagnostics, server, _ = rig
    spin(2.5)
    assert diagnostics and diagnostics[-1]["level"] == 0 and diagnostics[-1]["message"] == "connected"
    server.policy.poisoned = True  # the server still answers, with a NaN in every chunk
    spin(1.5)  # what was queued runs out
    t_held = time.monotonic()
    spin(1.0)
    assert not [ts for ts, _, _ in actions if ts > t_held]  # nothing sent: the arm holds
    assert node.records[-1].action is None and node.records[-1].reason  # and the runner knows why
    warned = [d for d in diagnostics if d["level"] == 1]
    assert warned and warned[-1]["message"].startswith("holding: "), diagnostics[-3:]
    assert "nan" in warned[-1]["message"].lower() or "finite" in warned[-1]["message"].lower(), warned[-1]
    assert warned[-1]["connected"] == "True"  # connected, yet holding: a warning, not the lost-server error
    server.policy.poisoned = False
    valid_again = time.time()  # (StepRecord.t's clock)

    def recovered() -> bool:  # valid chunks again: actions flow, and the diagnostics say OK
        return any(r.action is not None for r in node.records if r.t > valid_again) and diagnostics[-1]["level"] == 0

    for _ in range(10):  # (beside a busy CPU an observation can come late: that step holds, as it must)
        spin(0.5)
        if recovered():
            break
    assert recovered(), (node.records[-3:], diagnostics[-3:])


def test_an_arm_stop_or_fault_ends_the_episode_and_only_a_start_on_the_enabled_arm_drives_again(rig) -> None:
    """Issue 35, item 1: every stop, homing or fault of the arm ends the policy's episode (its status says so);
    a start is refused until the arm is enabled, and the start after it is a new turn (the arm drops the old)."""
    from std_srvs.srv import Trigger

    node, spin, actions, _, _, _ = rig
    for mode, fault in (("fault", "controller protective stop"), ("disabled", ""), ("homing", "")):
        spin(1.0)
        assert node.running and actions, mode
        old_turn = spin.turns[-1]
        spin.arm(mode, fault)
        spin(0.3)
        assert not node.running and mode in node.ended_by and fault in node.ended_by
        n = len(actions)
        spin(0.6)
        assert len(actions) <= n + 1, mode  # at most one already on its way
        refused = node._srv_start(Trigger.Request(), Trigger.Response())
        assert not refused.success and f"the arm is {mode}" in refused.message and "enable it first" in refused.message
        spin.arm("enabled")  # the operator enables the arm (or homing ends): nothing drives by itself
        spin(0.6)
        assert len(actions) <= n + 1 and not node.running, mode
        assert node._srv_start(Trigger.Request(), Trigger.Response()).success
        spin(0.5)
        assert len(actions) > n + 5 and spin.turns[-1] > old_turn, mode  # a new turn: the arm follows it


def test_a_bad_arm_mode_message_is_dropped_and_counted(rig) -> None:
    node, spin, _, diagnostics, _, _ = rig
    spin(1.0)
    for raw in ("[]", '{"mode": 5}', '{"mode": "sideways"}', "[" * 5000, "not json"):
        spin.arm("", raw=raw)
        spin(0.1)
    spin(1.2)
    assert node.running and node.arm is not None and node.arm.mode == "enabled"  # the last good report stands
    assert node._arm_reader.dropped == 5 and diagnostics[-1]["dropped_arm_mode"] == "5"
