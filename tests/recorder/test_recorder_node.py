"""The recorder node on real rclpy in one process: pairing, stale frames, other sources, the plan."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import h5py
import numpy as np
import pytest
from conftest import fill_disk, json_messages

from libero_workcell import ros_msgs
from libero_workcell.contract import ARM_JOINT_NAMES, CAMERA_NAMES, SOURCE_EXPERT, SOURCE_TELEOP, Qos, Topics
from libero_workcell.libero_format import read_demos
from libero_workcell.ros_qos import qos

pytestmark = pytest.mark.ros
rclpy = pytest.importorskip("rclpy")


@pytest.fixture
def graph(tmp_path):
    """A recorder node and a feeder node on one executor; yields (recorder, feeder, spin)."""
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    from recorder.node import RecorderNode

    def make(**params):
        args = ["--ros-args", "-p", f"out_path:={params.pop('out_path', tmp_path / 'd2s.hdf5')}"]
        for k, v in params.items():
            args += ["-p", f"{k}:={v}"]
        rclpy.init(args=args)
        rec = RecorderNode()
        # the messages the recorder's callbacks took, by topic: feed() waits for its own to be taken
        taken: Counter[str] = Counter()
        subs = {sub.topic_name: sub for sub in rec.subscriptions}
        for sub in subs.values():
            sub.callback = lambda msg, cb=sub.callback, topic=sub.topic_name: (cb(msg), taken.update([topic]))
        feeder = rclpy.create_node("feeder")
        pubs = {
            "state": feeder.create_publisher(JointState, Topics.ROBOT_STATE, qos(Qos.STATE)),
            "joints": feeder.create_publisher(JointState, Topics.JOINT_STATES, qos(Qos.STATE)),
            "action": feeder.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND)),
            "result": feeder.create_publisher(String, Topics.ACTION_RESULT, qos(Qos.COMMAND)),
            **{c: feeder.create_publisher(Image, Topics.image(c), qos(Qos.SENSOR)) for c in CAMERA_NAMES},
        }
        pubs = {name: Fed(pub, subs[pub.topic_name], taken) for name, pub in pubs.items()}
        ex = SingleThreadedExecutor()
        ex.add_node(rec)
        ex.add_node(feeder)

        def spin(seconds: float = 0.05) -> None:
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                ex.spin_once(timeout_sec=0.005)

        made.append((ex, rec, feeder))
        assert spin_until(spin, lambda: all(p.matched() for p in pubs.values()), 30)  # discovery
        return rec, pubs, spin

    made: list = []
    yield make
    for ex, rec, feeder in made:
        rec.shutdown()
        ex.shutdown()
        rec.destroy_node()
        feeder.destroy_node()
    rclpy.try_shutdown()


class Fed:
    """A feeder's publisher, counting what it published to the recorder's subscription ``sub``."""

    def __init__(self, pub, sub, taken: Counter[str]) -> None:
        self.pub, self.sub, self.taken, self.sent = pub, sub, taken, 0

    def publish(self, msg) -> None:
        self.pub.publish(msg)
        self.sent += 1

    def matched(self) -> bool:
        """Discovered both ways: published messages reach the recorder."""
        return self.pub.get_subscription_count() > 0 and self.sub.get_publisher_count() > 0

    def delivered(self) -> bool:
        return self.taken[self.sub.topic_name] >= self.sent


def settle(pubs, spin) -> None:
    """Spin until the recorder's callbacks have taken every message fed to it (a topic keeping the latest
    message only must not be published to twice in between)."""
    assert spin_until(spin, lambda: all(p.delivered() for p in pubs.values()), 10), {
        name: (p.sent, p.taken[p.sub.topic_name]) for name, p in pubs.items()}  # fmt: skip


APPLIED = np.array([0.05, 0, 0, 0, 0, 0, -1])  # what the arm driver reports it did with ACTION (clipped)
ACTION = [0.1, 0, 0, 0, 0, 0, -1]


def feed(pubs, spin, t: float, action_source: str = SOURCE_TELEOP, wrist_age: float = 0.0, state_age: float = 0.0,
         servo_tick: int | None = None, refused: bool = False, action=ACTION):  # fmt: skip
    """One control step as the graph makes it; ``servo_tick``: the arm driver's report on the action (applied
    APPLIED), ``refused``: its report that it refused the action."""
    state = np.array([0.3 + t * 0.01, 0.0, 0.3, np.pi, 0.0, 0.0, 0.2])
    pubs["state"].publish(ros_msgs.state_msg(state, t - state_age))
    pubs["joints"].publish(ros_msgs.joint_state_msg(ARM_JOINT_NAMES, np.full(6, 0.1), t))
    for cam in CAMERA_NAMES:
        img = np.full((256, 256, 3), 50 if cam == "external" else 150, np.uint8)
        img[int(t * 20) % 256] = 255
        pubs[cam].publish(ros_msgs.image_msg(img, t - (wrist_age if cam == "wrist" else 0.01), cam))
    settle(pubs, spin)  # the observation is in before its action comes
    msg = ros_msgs.action_msg(action, action_source, t + 0.005)
    pubs["action"].publish(msg)
    if servo_tick is not None:
        pubs["result"].publish(ros_msgs.action_result_msg(msg.header.stamp, action_source, True, "ok", servo_tick,
                                                          APPLIED))  # fmt: skip
    elif refused:
        pubs["result"].publish(ros_msgs.action_result_msg(msg.header.stamp, action_source, False, "not active", None,
                                                          None))  # fmt: skip
    settle(pubs, spin)  # the action is paired (or not) before the next observation comes


def wait_saved(rec, spin, n: int) -> None:
    end = time.monotonic() + 10
    while (len(rec.saved) < n or rec.saving) and time.monotonic() < end:
        spin(0.01)
    assert len(rec.saved) == n, rec.saved


def test_teleop_actions_are_paired_and_stale_frames_counted(graph, tmp_path) -> None:
    from std_srvs.srv import Trigger

    rec, pubs, spin = graph()
    assert rec._srv_start(Trigger.Request(), Trigger.Response()).success
    t0 = time.time()
    for i in range(10):
        feed(pubs, spin, t0 + i * 0.05, wrist_age=0.5 if i >= 6 else 0.0,  # the wrist camera stalls at step 6
             servo_tick=None if i in (3, 5) else 100 + 5 * i, refused=i == 5)  # fmt: skip
    feed(pubs, spin, t0 + 0.55, action_source=SOURCE_EXPERT, servo_tick=155)  # another source's: not recorded
    feed(pubs, spin, t0 + 0.60, state_age=0.5)  # no fresh state for this action: not recorded
    status = json_messages(rec, Topics.RECORDER_STATUS)  # what the operator's console shows of the open episode
    assert spin_until(spin, lambda: status and status[-1]["steps"] == 10, 5), status[-1:]
    assert status[-1]["stale_frames"] == {"agentview_rgb": 0, "eye_in_hand_rgb": 4}
    res = rec._srv_save(Trigger.Request(), Trigger.Response())
    assert res.success and "10 steps" in res.message
    assert not rec._srv_save(Trigger.Request(), Trigger.Response()).success  # nothing open any more
    wait_saved(rec, spin, 1)
    assert rec.saved[0].stale_frames == {"agentview_rgb": 0, "eye_in_hand_rgb": 4}
    d = read_demos(tmp_path / "d2s.hdf5", images=True).demos[0]
    assert d.num_samples == 10 and d.joint_states.shape == (10, 6)
    np.testing.assert_allclose(d.ee_pos[:, 0], [0.3 + (t0 + i * 0.05) * 0.01 for i in range(10)])
    assert d.images["agentview_rgb"][0, 0, 0, 0] == 50 and d.images["eye_in_hand_rgb"][0, 0, 0, 0] == 150
    assert json.loads(d.attrs["stale_frames"]) == {"agentview_rgb": 0, "eye_in_hand_rgb": 4}
    np.testing.assert_array_equal(d.servo_tick, [-1 if i in (3, 5) else 100 + 5 * i for i in range(10)])
    with h5py.File(tmp_path / "d2s.hdf5") as h:  # what the arm did with each action, beside what was asked
        accepted, applied = h["data/demo_0/action_accepted"][:], h["data/demo_0/applied_actions"][:]
    assert list(accepted) == [1, 1, 1, -1, 1, 0, 1, 1, 1, 1]
    np.testing.assert_array_equal(applied[[0, 1, 2, 4, 6, 7, 8, 9]], np.tile(APPLIED, (8, 1)))
    assert np.isnan(applied[[3, 5]]).all()
    np.testing.assert_array_equal(d.actions, np.tile(ACTION, (10, 1)))


def test_discard_and_a_second_start_while_recording(graph, tmp_path) -> None:
    from std_srvs.srv import Trigger

    rec, pubs, spin = graph()
    assert rec._srv_start(Trigger.Request(), Trigger.Response()).success
    again = rec._srv_start(Trigger.Request(), Trigger.Response())
    assert not again.success and "already recording" in again.message
    feed(pubs, spin, time.time())
    assert rec._srv_discard(Trigger.Request(), Trigger.Response()).success
    assert rec.session.num_demos == 0 and not list((tmp_path / "d2s_episodes").glob("*.partial"))
    status = json_messages(rec, Topics.RECORDER_STATUS)
    assert spin_until(spin, lambda: status, 5) and status[-1]["plan_next"] == ""  # no plan (plan_per_config 0)


def test_an_episode_recording_when_the_recorder_stops_is_kept_as_interrupted(graph, tmp_path) -> None:
    """Whatever stops the graph (Ctrl-C, bring-up stopping every node after one died), the episode being recorded
    is completed and kept as interrupted with the reason, outside the session (issue 35, item 5: it was deleted);
    an operator's discard still deletes."""
    from recorder.session_file import interrupted_episodes

    rec, pubs, spin = graph(plan_per_config=1)
    assert ok(rec._srv_start)
    t0 = time.time()
    for i in range(6):
        feed(pubs, spin, t0 + i * 0.05, servo_tick=100 + i)
    assert spin_until(spin, lambda: rec._writer is not None and len(rec._writer._reports) == 6), rec._writer
    assert rec._writer.steps == 6
    rec._stops.first = "SIGINT"  # (the signal the launcher sends: noted by the node's handler, tested below)
    rec.shutdown()
    (kept,) = interrupted_episodes(tmp_path / "d2s.hdf5")
    assert kept.name == "demo_0.hdf5.interrupted" and rec.session.num_demos == 0
    d = read_demos(kept).demos[0]
    assert d.num_samples == 6 and list(d.servo_tick) == [100 + i for i in range(6)]
    assert d.attrs["interrupted"] == "the recorder was stopped (SIGINT) before the episode was saved or discarded"
    assert json.loads(d.attrs["slot_permutation"]) == list(rec.plan.configurations[0].slot_permutation)  # its task
    assert rec.plan.next(rec.session.demo_attrs()) == rec.plan.configurations[0]  # not counted: record it again


def test_a_stop_signal_is_noted_and_held_off_while_the_recorder_shuts_down() -> None:
    """The node's stop handlers (node_main: SIGINT and SIGTERM raise KeyboardInterrupt) still act before the
    shutdown, and the first signal is noted; during it the launcher's SIGTERM (5 s after its SIGINT) or a second
    Ctrl-C waits, so it cannot cut the completion of the interrupted episode short; afterwards both are back."""
    from recorder.stop_signals import StopSignals

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stops = StopSignals()
        assert stops.first == ""
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # (handled before this ends)
        assert stops.first == "SIGINT"
        with stops.shutting_down():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # held: no KeyboardInterrupt here
            assert stops.held == 2
        assert signal.getsignal(signal.SIGINT) is interrupt and signal.getsignal(signal.SIGTERM) is interrupt
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert stops.first == "SIGINT"
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def test_with_the_plan_each_demo_records_the_configuration_to_set_up(graph, tmp_path) -> None:
    from std_srvs.srv import Trigger

    from recorder.collection_plan import CollectionPlan

    rec, pubs, spin = graph(plan_per_config=1)
    plan = CollectionPlan(1)
    status = json_messages(rec, Topics.RECORDER_STATUS)
    # /recorder/status's plan_next: the next configuration's setup, from start-up on (latched)
    assert spin_until(spin, lambda: status, 5)
    assert status[-1]["plan_next"] == plan.configurations[0].setup()
    for n in range(2):
        assert rec._srv_start(Trigger.Request(), Trigger.Response()).success
        current = plan.configurations[n].setup()
        assert spin_until(spin, lambda: status[-1]["recording"], 5)
        assert status[-1]["plan_next"] == current  # recording it: still the next until it is saved
        t0 = time.time()
        feed(pubs, spin, t0)
        feed(pubs, spin, t0 + 0.05)
        assert rec._srv_save(Trigger.Request(), Trigger.Response()).success
        wait_saved(rec, spin, n + 1)
        nxt = plan.configurations[n + 1].setup()
        assert spin_until(spin, lambda nxt=nxt: status[-1]["plan_next"] == nxt, 5), status[-1]
    assert ok(rec._srv_start)
    feed(pubs, spin, time.time())
    rec.plan.configurations = rec.plan.configurations[:2]  # a plan of the two configurations recorded: complete
    assert ok(rec._srv_discard)  # (a discard refreshes it too)
    assert spin_until(spin, lambda: status[-1]["plan_next"] == "complete", 5), status[-1]
    demos = read_demos(tmp_path / "d2s.hdf5").demos
    assert [json.loads(d.attrs["slot_permutation"]) for d in demos] == [
        list(c.slot_permutation) for c in plan.configurations[:2]
    ]
    assert demos[1].attrs["belt_speed"] == plan.configurations[1].belt_speed
    assert plan.next([d.attrs for d in demos]) == plan.configurations[2]


def test_a_demo_the_arm_refused_or_faulted_in_is_saved_and_not_counted_by_the_plan(graph, tmp_path) -> None:
    """Issue 35, item 12: a demo whose every action the arm refused was counted toward the plan (`3 of 80`). The
    recorder stores the arm's verdicts summed up and its first fault during the episode (/aubo/mode); the plan
    counts neither such demo, the log says why, and the plan asks for the same configuration again."""
    from std_msgs.msg import String

    from recorder.collection_plan import not_counted

    rec, pubs, spin = graph(plan_per_config=1)
    mode = rec.create_publisher(String, Topics.ARM_MODE, qos(Qos.LATCHED))
    first = rec.plan.configurations[0]
    t0 = time.time()
    for n, fault in enumerate(("", "ARM-PSTOP protective stop")):
        assert ok(rec._srv_start)
        for i in range(4):
            if fault and i == 2:  # the arm faults mid-episode: the rest are refused
                mode.publish(String(data=json.dumps({"mode": "fault", "fault": fault})))
                assert spin_until(spin, lambda fault=fault: rec._arm_fault == fault, 10)  # noted on this episode
            feed(pubs, spin, t0 + n + i * 0.05, refused=not fault or i >= 2, servo_tick=None if (not fault or i >= 2)
                 else 10 + i)  # fmt: skip
        assert spin_until(spin, lambda: len(rec._writer._reports) == 4)
        assert ok(rec._srv_save)
        wait_saved(rec, spin, n + 1)
        mode.publish(String(data=json.dumps({"mode": "disabled", "fault": ""})))  # reset: no fault any more
        assert spin_until(spin, lambda: rec._arm_fault == "", 10)
    refused, faulted = rec.session.demo_attrs()
    assert (refused["arm_accepted_steps"], refused["arm_refused_steps"]) == (0, 4) and "arm_fault" not in refused
    assert (faulted["arm_accepted_steps"], faulted["arm_refused_steps"]) == (2, 2)
    assert faulted["arm_fault"] == "ARM-PSTOP protective stop"
    assert "refused every action" in not_counted(refused) and "faulted" in not_counted(faulted)
    assert rec.plan.next(rec.session.demo_attrs()) == first and rec.plan_next == first.setup()
    assert json.loads(refused["slot_permutation"]) == json.loads(faulted["slot_permutation"]) == list(
        first.slot_permutation)  # fmt: skip
    assert ok(rec._srv_start)  # a fault that was reset is not the next episode's
    for i in range(3):
        feed(pubs, spin, t0 + 3 + i * 0.05, servo_tick=20 + i)
    assert spin_until(spin, lambda: len(rec._writer._reports) == 3)
    assert ok(rec._srv_save)
    wait_saved(rec, spin, 3)
    assert not_counted(rec.session.demo_attrs()[2]) is None
    assert spin_until(spin, lambda: rec.plan_next == rec.plan.configurations[1].setup())


def test_the_console_line_warns_when_steps_arrive_slower_than_declared() -> None:
    from recorder.node import console_line

    line, slow = console_line("demo_3", 12.34, 247, 1, 20, 20.0)
    assert line == "episode demo_3 |   12.3 s | 247 steps | 1 dropped" and not slow
    line, slow = console_line("demo_3", 13.3, 262, 1, 15, 20.0)
    assert slow and line.endswith("15 steps in the last second, below 20 Hz")
    assert not console_line("demo_4", 0.5, 10, 0, 10, 20.0)[1]  # the first second: not a whole second yet
    assert not console_line("demo_4", 5.0, 100, 0, 18, 20.0)[1]  # 18 of 20: within RATE_WARN


def test_the_console_can_switch_between_info_and_warning(graph) -> None:
    """rclpy refuses one call site logging at two severities: a slow second after a normal one must not kill
    the recorder (it did, once the world paused at done)."""
    from std_srvs.srv import Trigger

    rec, pubs, spin = graph()
    assert rec._srv_start(Trigger.Request(), Trigger.Response()).success
    t0 = time.time()
    for i in range(3):
        feed(pubs, spin, t0 + i * 0.05)
    rec._report()  # the first second: a normal line
    feed(pubs, spin, t0 + 0.15)
    rec._report()  # one step in a second, below 20 Hz: a warning from the same method
    rec._report()  # and back


def test_log_outcome_logs_success_and_failure_from_one_place(rclpy_node) -> None:
    from libero_workcell.node_main import log_outcome

    for ok in (True, False, True):
        log_outcome(rclpy_node.get_logger(), ok, "outcome")  # (one call site, two severities, raised before)


def spin_until(spin, condition, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        spin(0.005)  # (each spin_once waits for work: no busy loop)
    return True


def ok(service) -> bool:
    from std_srvs.srv import Trigger

    return service(Trigger.Request(), Trigger.Response()).success


def test_bad_messages_are_counted_and_dropped_and_the_episode_goes_on(graph, tmp_path) -> None:
    """A non-finite action (teleop publishes one when the robot state holds a NaN), an image whose data does
    not match its size, a frame of another size, a NaN state: each is counted, reported and dropped; the node
    and its open episode live on (the first two raised out of the callback and ended the process)."""
    rec, pubs, spin = graph()
    status = json_messages(rec, Topics.RECORDER_STATUS)
    assert ok(rec._srv_start)
    t0 = time.time()
    for i in range(3):
        feed(pubs, spin, t0 + i * 0.05)
    feed(pubs, spin, t0 + 0.15, action=[np.nan, 0, 0, 0, 0, 0, -1])  # dropped: no step for it
    torn = ros_msgs.image_msg(np.zeros((256, 256, 3), np.uint8), t0 + 0.2, "wrist")
    torn.data = bytes(100)
    for bad in ("wrist", torn), ("wrist", ros_msgs.image_msg(np.zeros((128, 128, 3), np.uint8), t0 + 0.2, "wrist")), \
               ("state", ros_msgs.state_msg(np.full(7, np.nan), t0 + 0.2)):  # fmt: skip
        pubs[bad[0]].publish(bad[1])
        settle(pubs, spin)  # (the camera topic keeps the latest frame only)
    for i in range(4, 7):
        feed(pubs, spin, t0 + i * 0.05)
    assert spin_until(spin, lambda: sum(rec.bad_messages.values()) == 4), rec.bad_messages
    assert rec.bad_messages == {"action": 1, "wrist": 2, "state": 1}
    assert ok(rec._srv_save)
    wait_saved(rec, spin, 1)
    assert status[-1]["bad_messages"] == {"action": 1, "wrist": 2, "state": 1}
    d = read_demos(tmp_path / "d2s.hdf5").demos[0]
    assert d.num_samples == 6 and np.isfinite(d.actions).all() and np.isfinite(d.ee_pos).all()


def test_a_full_disk_during_a_save_is_reported_and_recording_goes_on(graph, small_disk) -> None:
    """A real ENOSPC mid-save, with the next episode started meanwhile: the error is logged and on /diagnostics,
    the node stays up, the episode being recorded is kept and saves once there is space, and so does the next
    one (the h5py file whose close failed used to crash the whole recorder with SIGSEGV)."""
    from diagnostic_msgs.msg import DiagnosticArray

    rec, pubs, spin = graph(out_path=small_disk / "d2s.hdf5", min_free_mb=0)
    diags: list = []
    rec.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, diags.append, qos(Qos.DIAGNOSTICS))
    t0 = time.time()
    for n, steps in enumerate((3, 5)):
        assert ok(rec._srv_start)
        for i in range(steps):
            feed(pubs, spin, t0 + n + i * 0.05)
        if n == 0:
            assert ok(rec._srv_save)
            wait_saved(rec, spin, 1)
    saving = rec._writer
    assert spin_until(spin, lambda: saving.partial.stat().st_size > 0)  # its writer has the file open
    os.kill(saving.proc.pid, signal.SIGSTOP)  # its save is held in progress until the disk is full
    assert ok(rec._srv_save) and ok(rec._srv_start)  # the operator starts the next episode during the save
    following = rec._writer
    assert spin_until(spin, lambda: following.partial.stat().st_size > 0)  # its file is open
    ballast = fill_disk(small_disk)
    os.kill(saving.proc.pid, signal.SIGCONT)
    assert spin_until(spin, lambda: rec.save_failures == 1 and not rec.saving)
    assert "demo_1 could not be written" in rec._last_error and "No space left on device" in rec._last_error
    assert spin_until(spin, lambda: any(s.name == "recorder" and ros_msgs.diag_level(s) == ros_msgs.DIAG_ERROR
                                        and "No space left" in s.message for d in diags for s in d.status))
    assert rec._writer is following and following.name == "demo_2"  # still recording
    ballast.unlink()  # the operator frees space
    for n, steps in ((2, 4), (3, 3)):
        if n == 3:
            assert ok(rec._srv_start)
        for i in range(steps):
            feed(pubs, spin, t0 + n + i * 0.05)
        assert ok(rec._srv_save)
        wait_saved(rec, spin, n)
    assert [(d.name, d.num_samples) for d in read_demos(small_disk / "d2s.hdf5").demos] == [
        ("demo_0", 3), ("demo_2", 4), ("demo_3", 3)]  # fmt: skip
    assert ros_msgs.diag_level(diags[-1].status[0]) == ros_msgs.DIAG_WARN  # saving again; the error is history
