"""The session log on the simulated graph: the scripted teleop session (``workcell bringup --job
teleop_collect_sim record_mcap:=PATH``, the reference run of tests/fixtures/teleop_reference.py) is logged, the log
reads back with mcap's reader and every message decodes with mcap_ros2's decoder, its demo and the log name each
other; and a second session_log node in that run, killed with SIGKILL mid-session, leaves every chunk it closed
readable."""

from __future__ import annotations

import json
import signal

import h5py
import numpy as np
import pytest
from teleop_reference import STOP_S, teleop_reference

from libero_workcell import ros_msgs
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SOURCE_TELEOP, Topics
from session_log import review
from session_log.topics import DEFAULT_TOPICS

pytestmark = [pytest.mark.ros, pytest.mark.slow]
SESSION_S = 54.0  # the shipped scripted session's length, sim s
NS = 1_000_000_000
CONTROL_NS = round(NS / CONTROL_HZ_DEFAULT)  # the control period
# the default set minus what the teleop job does not publish (no policy)
TELEOP_TOPICS = set(DEFAULT_TOPICS) - {Topics.POLICY_STATUS, Topics.REPLAY_STATUS}


@pytest.fixture(scope="module")
def logged(tmp_path_factory, ros_env):
    """The scripted teleop session, recorded (demos) and logged (MCAP), then the graph stopped cleanly: the reference
    run of tests/fixtures/teleop_reference.py, shared with the teleop graph's, the console's and the source's tests."""
    reference = teleop_reference(tmp_path_factory, ros_env)
    summary = reference.summary
    # the demo is saved, and the log has its metadata record (written at once: readable while it records)
    assert summary["demo_in_log"], summary["recorder_tail"]
    assert summary["stop_codes"].get("session_log") == 0, (summary["stop_codes"], summary["session_log_tail"])
    log = reference.log
    print(f"session: {summary['wall_s']:.0f} s wall; log {log.stat().st_size / 2**20:.2f} MiB; session_log's last "
          "lines:\n" + "\n".join(summary["session_log_tail"][-3:]))  # fmt: skip
    return reference.demos, log, summary


def source_of(action) -> str:
    """An action message's source: its frame_id is SOURCE, or SOURCE#TURN (libero_workcell.ros_msgs)."""
    return ros_msgs.source_of(action.header.frame_id)


def test_the_session_log_reads_back_and_every_message_decodes(logged) -> None:
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    _, log, run = logged
    with open(log, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        summary = reader.get_summary()
        got = list(reader.iter_decoded_messages())  # every message decoded (log time order)
    assert summary is not None and summary.statistics.message_count == len(got)
    assert {ci.compression for ci in summary.chunk_indexes} == {"zstd"} and len(summary.chunk_indexes) > 5
    by_topic: dict[str, list] = {}
    for m in got:
        by_topic.setdefault(m.channel.topic, []).append(m)
    assert set(by_topic) == TELEOP_TOPICS, set(by_topic) ^ TELEOP_TOPICS
    span = (got[-1].message.log_time - got[0].message.log_time) / NS
    # sim s: the graph's clock from its start (log times are on it), the session and what came after, to the stop
    assert got[0].message.log_time / NS < 30 and SESSION_S <= span <= run["sim_end_s"] + STOP_S, (span, run)
    for topic, msgs in by_topic.items():  # each topic's log times and (stamped) publish times go forward
        logs = [m.message.log_time for m in msgs]
        assert logs == sorted(logs), topic
        if hasattr(msgs[0].decoded_message, "header") and topic != Topics.DIAGNOSTICS:
            stamps = [m.message.publish_time for m in msgs]
            assert stamps == sorted(stamps) and stamps[-1] > 0, topic
    actions = [m.decoded_message for m in by_topic[Topics.ACTION] if source_of(m.decoded_message) == SOURCE_TELEOP]
    assert len(actions) > 0.9 * SESSION_S * 20 and all(len(a.position) == 7 for a in actions)
    assert all(abs(v) <= 1 for a in actions for v in a.position)
    states = by_topic[Topics.ROBOT_STATE]
    assert len(states) > 0.9 * SESSION_S * 20 and all(len(m.decoded_message.position) == 7 for m in states)
    for camera in ("external", "wrist"):
        frames = [m.decoded_message for m in by_topic[Topics.image(camera)]]
        assert SESSION_S * 2 * 0.9 <= len(frames) <= span * 2 + 2, (camera, len(frames))  # image_hz 2 of 20 Hz
        for msg in frames:
            rgb = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)
            assert rgb.shape == (256, 256, 3) and msg.encoding == "rgb8"
        assert np.frombuffer(frames[len(frames) // 2].data, np.uint8).std() > 10  # a rendered scene
    assert [m.decoded_message.data for m in by_topic[Topics.ACTIVE_SOURCE]][-1] == SOURCE_TELEOP  # latched, too
    modes = [json.loads(m.decoded_message.data)["mode"] for m in by_topic[Topics.ARM_MODE]]
    assert "enabled" in modes, modes
    assert any(s.name == "aubo_bridge" for m in by_topic[Topics.DIAGNOSTICS] for s in m.decoded_message.status)
    assert review.has_summary(log)


def test_the_demo_and_the_log_name_each_other(logged) -> None:
    demos, log, _ = logged
    with h5py.File(demos) as f:
        attrs = dict(f["data/demo_0"].attrs)
        stamps = f["data/demo_0/timing/obs_stamp"][:]
    assert attrs["mcap_log"] == str(log.absolute())
    assert attrs["start_time"] == stamps[0] and attrs["end_time"] == stamps[-1]
    meta = dict(review.metadata(log))
    assert json.loads(meta["session_log"]["topics"]) == list(DEFAULT_TOPICS)
    demo = meta["demo"]
    assert demo["session_file"] == str(demos.absolute()) and demo["name"] == "demo_0"
    assert float(demo["start_time"]) == attrs["start_time"] and float(demo["end_time"]) == attrs["end_time"]
    assert int(demo["num_samples"]) == attrs["num_samples"]
    # the demo's stretch of the log: its source's actions stamped from its first step to its last, one per step
    start, end = round(attrs["start_time"] * NS), round(attrs["end_time"] * NS)
    in_demo = [m for m in review.messages(log, decode=True) if m.channel.topic == Topics.ACTION
               and source_of(m.decoded_message) == SOURCE_TELEOP and start <= m.message.publish_time <= end]
    assert len(in_demo) == attrs["num_samples"]


def test_a_session_log_killed_mid_session_leaves_its_closed_chunks_readable(logged) -> None:
    """A second session log in the reference run (tests/fixtures/teleop_reference.py: every camera frame, its own
    looks for topics late), SIGKILLed once a few chunks were written: every chunk it closed reads back, and holds
    what the reference's own log holds of the session from its first step on; the graph ran on to the session's
    end without it."""
    _, reference_log, run = logged
    killed = run["killed"]
    log = reference_log.parent / "killed.mcap"
    assert killed.get("returncode") == -signal.SIGKILL, killed
    assert run["exits"] == [["teleop_pico", 0]] and review.has_summary(reference_log)  # the rest ran on, to the end
    size = log.stat().st_size
    assert not review.has_summary(log) and review.whole_records_end(log) >= killed["written"]
    read = list(review.messages(log))  # every message of every closed chunk, decoded
    assert all(m.decoded_message is not None for m in read) and len(read) > 100
    topics = {m.channel.topic for m in read}
    assert {Topics.ACTION, Topics.ROBOT_STATE, Topics.image("wrist")} <= topics, topics
    kept = [(m.message.publish_time, m.message.data) for m in read if m.channel.topic == Topics.ACTION]
    steps = np.diff([t for t, _ in kept])  # the teleop's actions, stamped with the step whose observation each answers
    assert len(steps) > 20 and (steps == CONTROL_NS).all(), steps.max()
    # the same actions, byte for byte, as the reference's log from its first: nothing of the session's start lost
    whole = [(m.message.publish_time, m.message.data) for m in review.messages(reference_log)
             if m.channel.topic == Topics.ACTION][: len(kept)]  # fmt: skip
    assert kept == whole
    info = review.info(log)
    assert not info.closed and info.count == len(read)
    print(f"killed log: {size} bytes, whole records to {review.whole_records_end(log)}, {len(read)} messages "
          f"over {info.duration:.1f} sim s; written before the kill: {killed['written']}")  # fmt: skip
