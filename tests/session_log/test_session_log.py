"""The session log on the simulated graph: the scripted teleop session (``workcell bringup --job
teleop_collect_sim record_mcap:=PATH``) is logged, the log reads back with mcap's reader and every message
decodes with mcap_ros2's decoder, its demo and the log name each other; and a session_log node killed with
SIGKILL mid-session leaves every chunk it closed readable."""

from __future__ import annotations

import json
import os
import signal
import time

import h5py
import numpy as np
import pytest
from conftest import wait_for

from libero_workcell import ros_msgs
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SOURCE_TELEOP, Topics
from session_log import review
from session_log.topics import DEFAULT_TOPICS
from workcell import launch_presets
from workcell.bringup import Graph
from workcell.launcher import NodeDiedError, launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]
SESSION_S = 54.0  # the shipped scripted session's length, sim s
NS = 1_000_000_000
CONTROL_NS = round(NS / CONTROL_HZ_DEFAULT)  # the control period
# the default set minus what the teleop job does not publish (no policy)
TELEOP_TOPICS = set(DEFAULT_TOPICS) - {Topics.POLICY_STATUS, Topics.REPLAY_STATUS}


@pytest.fixture(scope="module")
def logged(tmp_path_factory, ros_env):
    """The scripted teleop session, recorded (demos) and logged (MCAP), then the graph stopped cleanly."""
    out = tmp_path_factory.mktemp("session_log")
    demos, log = out / "d2s.hdf5", out / "logs" / "teleop.mcap"
    overrides = {**{k: str(v) for k, v in launch_presets.TELEOP_COLLECT_SIM.items()}, "record_path": str(demos),
                 "record_mcap": str(log), "sim_link": f"mcap_{os.getpid()}", "teleop_pico.exit_when_done": "true",
                 "real_time_factor": "0"}  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=out / "logs")
    started = time.monotonic()
    try:
        deadline = started + SESSION_S * 3 + 90  # wall s: a loaded machine runs sim time slowly
        while time.monotonic() < deadline:
            if exits := graph.exited():
                if [(e.name, e.returncode) for e in exits] != [("teleop_pico", 0)]:
                    raise NodeDiedError(exits)
                break
            time.sleep(0.5)
        else:
            raise TimeoutError(f"the scripted collection did not finish; logs in {out / 'logs'}")
        wall = time.monotonic() - started
        # the demo is saved, and the log has its metadata record (written at once: readable while it records)
        assert wait_for(lambda: any(name == "demo" for name, _ in review.metadata(log)), timeout=120), \
            graph.log_text("recorder")[-2000:]  # fmt: skip
    finally:
        codes = graph.stop(timeout=20)  # the recorder finishes its save; the session log closes its file
    assert codes.get("session_log") == 0, (codes, graph.log_text("session_log")[-2000:])
    print(f"session: {wall:.0f} s wall; log {log.stat().st_size / 2**20:.2f} MiB; session_log's last lines:\n"
          + "\n".join(graph.log_text("session_log").splitlines()[-3:]))  # fmt: skip
    return demos, log


def source_of(action) -> str:
    """An action message's source: its frame_id is SOURCE, or SOURCE#TURN (libero_workcell.ros_msgs)."""
    return action.header.frame_id.partition(ros_msgs.TURN_SEPARATOR)[0]


def test_the_session_log_reads_back_and_every_message_decodes(logged) -> None:
    from mcap.reader import make_reader
    from mcap_ros2.decoder import DecoderFactory

    _, log = logged
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
    assert SESSION_S <= span < SESSION_S + 30, span  # sim s: the session, and the start and end around it
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
    demos, log = logged
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


def test_a_session_log_killed_mid_session_leaves_its_closed_chunks_readable(tmp_path, ros_env) -> None:
    log = tmp_path / "expert.mcap"
    overrides = {"expert": "true", "record_mcap": str(log), "sim_link": f"mcap_kill_{os.getpid()}",
                 "real_time_factor": "0", "session_log.image_hz": "0",  # every frame (docs/session_log.md)
                 # the log's own looks for topics come late (as on a loaded machine, worse): the world still waits
                 # until the log follows the loop's topics, so it has the episode from its first step
                 "session_log.discover_period": "60"}  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=tmp_path / "logs")
    try:
        # a few chunks written (every camera frame: ~7.5 MiB per sim s before compression)
        grown = lambda: log.exists() and review.whole_records_end(log) > 4_000_000  # noqa: E731
        assert wait_for(grown, timeout=240, interval=0.5), graph.log_text("session_log")[-2000:]
        written = review.whole_records_end(log)  # each of these bytes belongs to a chunk closed before the kill
        os.kill(graph.pids["session_log"], signal.SIGKILL)
        assert wait_for(lambda: any(e.name == "session_log" for e in graph.exited()), timeout=30)
        (killed,) = [e for e in graph.exited() if e.name == "session_log"]
        assert killed.returncode == -signal.SIGKILL
        assert graph.pids.keys() - {e.name for e in graph.exited()} >= {"sim_world", "aubo_bridge"}  # rest runs
    finally:
        graph.stop(timeout=20)
    size = log.stat().st_size
    assert not review.has_summary(log) and review.whole_records_end(log) >= written
    read = list(review.messages(log))  # every message of every closed chunk, decoded
    assert all(m.decoded_message is not None for m in read) and len(read) > 100
    topics = {m.channel.topic for m in read}
    assert {Topics.ACTION, Topics.ROBOT_STATE, Topics.image("wrist")} <= topics, topics
    stamps = [m.message.publish_time for m in read if m.channel.topic == Topics.ACTION]  # the expert's, stamped
    steps = np.diff(stamps)  # with the step whose observation each answers
    assert stamps[0] <= 2 * CONTROL_NS and len(steps) > 20 and (steps == CONTROL_NS).all(), (stamps[:3], steps.max())
    info = review.info(log)
    assert not info.closed and info.count == len(read)
    print(f"killed log: {size} bytes, whole records to {review.whole_records_end(log)}, {len(read)} messages "
          f"over {info.duration:.1f} sim s; written before the kill: {written}")  # fmt: skip
