"""The session log without a ROS graph: each type's schema text, the MCAP file read back with mcap's reader and
every message decoded with mcap_ros2's decoder, chunks closed by size and by time, a file cut short read up to
its last whole chunk, a writer killed with SIGKILL, the review, the default topics as documented, and the graph
argument that starts the node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, wait_for
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from geometry_msgs.msg import PoseStamped
from mcap.reader import make_reader
from mcap_ros2.decoder import DecoderFactory
from rclpy.serialization import serialize_message
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import String
from tqdm import tqdm

from session_log import review
from session_log.definitions import DefinitionError, full_definition, used_types
from session_log.mcap_writer import SessionLogWriter, header_stamp_ns
from session_log.topics import DEFAULT_TOPICS, RateGate
from workcell.bringup import Graph

NS = 1_000_000_000


class FakeClock:
    """The writer's wall clock, moved by the test: no test here waits for time to pass."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def joint_state(i: int) -> JointState:
    msg = JointState()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 100 + i // 20, (i % 20) * 50_000_000
    msg.header.frame_id = "teleop"
    msg.name = ["dx", "dy", "dz", "drx", "dry", "drz", "gripper"]
    msg.position = [0.01 * i, -0.5, 0.25, 0.0, 0.0, 1.0, -1.0]
    return msg


def image(i: int, size: int = 256) -> Image:
    msg = Image()
    msg.header.stamp.sec = 100 + i
    msg.height, msg.width, msg.encoding, msg.step = size, size, "rgb8", 3 * size
    msg.data = np.random.default_rng(i).integers(0, 255, (size, size, 3), dtype=np.uint8).tobytes()
    return msg


def diagnostics() -> DiagnosticArray:
    status = DiagnosticStatus(name="recorder", hardware_id="teleop", message="idle",
                              values=[KeyValue(key="steps", value="0")])  # fmt: skip
    status.level = b"\x00"
    return DiagnosticArray(status=[status])


def write_session(path: Path, clock: FakeClock | None = None, chunk_size: int = 1 << 20, close: bool = True):
    """A little session: 100 actions, 4 camera frames, a TCP pose, a status, diagnostics, a metadata record."""
    log = SessionLogWriter(path, chunk_size=chunk_size, clock=clock or FakeClock())
    log.add_topic("/workcell/action", "sensor_msgs/msg/JointState")
    log.add_topic("/cameras/external/image_raw", "sensor_msgs/msg/Image")
    log.add_topic("/aubo/tcp_pose", "geometry_msgs/msg/PoseStamped")
    log.add_topic("/recorder/status", "std_msgs/msg/String")
    log.add_topic("/diagnostics", "diagnostic_msgs/msg/DiagnosticArray")
    log.add_metadata("session_log", {"topics": ["/workcell/action"], "image_hz": 2.0})
    for i in range(100):
        data = serialize_message(joint_state(i))
        log.write("/workcell/action", data, (100 * NS) + i * NS // 20 + 1000, header_stamp_ns(data))
        if i % 25 == 0:
            log.write("/cameras/external/image_raw", serialize_message(image(i // 25)), (100 + i // 20) * NS + 2000)
    pose = PoseStamped()
    pose.pose.position.x, pose.pose.orientation.w = 0.4, 1.0
    log.write("/aubo/tcp_pose", serialize_message(pose), 106 * NS)
    log.write("/recorder/status", serialize_message(String(data='{"recording": true}')), 106 * NS)
    log.write("/diagnostics", serialize_message(diagnostics()), 106 * NS)
    if close:
        log.close()
    return log


# --------------------------------------------------------------------------
# Schemas
# --------------------------------------------------------------------------
def test_a_types_schema_is_its_msg_text_then_each_type_it_uses_once() -> None:
    text = full_definition("sensor_msgs/msg/Image")
    assert text.startswith("# This message contains an uncompressed image")
    assert re.findall(r"^MSG: (\S+)$", text, re.M) == ["std_msgs/Header", "builtin_interfaces/Time"]
    assert text.count("=" * 80) == 2
    deps = re.findall(r"^MSG: (\S+)$", full_definition("diagnostic_msgs/msg/DiagnosticArray"), re.M)
    assert deps == ["std_msgs/Header", "builtin_interfaces/Time", "diagnostic_msgs/DiagnosticStatus",
                    "diagnostic_msgs/KeyValue"]  # fmt: skip
    assert used_types("pkg", "Foo[] a\nstring<=8 s\nuint8[<=3] b\nother_pkg/Bar[4] c  # Baz d\nint32 X=3\n") == [
        "pkg/Foo", "other_pkg/Bar"]  # fmt: skip
    with pytest.raises(DefinitionError, match="no definition of no_such_msgs/msg/Thing"):
        full_definition("no_such_msgs/msg/Thing")


def test_a_header_stamp_is_read_from_the_cdr_bytes() -> None:
    data = serialize_message(joint_state(45))
    assert header_stamp_ns(data) == 102 * NS + 5 * 50_000_000
    assert header_stamp_ns(b"\x00\x01\x00\x00") is None


def test_the_rate_gate_keeps_one_message_per_period_of_log_time() -> None:
    gate = RateGate(2.0)
    kept = [t for t in range(0, 3 * NS, NS // 20) if gate.admit(t)]  # 20 Hz frames for 3 s
    assert kept == [0, NS // 2, NS, 3 * NS // 2, 2 * NS, 5 * NS // 2]
    assert gate.admit(0)  # the clock went back: kept, and counted from there
    assert all(RateGate(0).admit(t) for t in (0, 0, 1))
    with pytest.raises(ValueError):
        RateGate(-1)


# --------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------
def test_every_message_reads_back_with_mcaps_reader_and_decodes_with_the_ros2_decoder(tmp_path) -> None:
    path = tmp_path / "s.mcap"
    write_session(path)
    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        header, summary = reader.get_header(), reader.get_summary()
        got = list(reader.iter_decoded_messages(log_time_order=False))
    assert header.profile == "ros2" and "session_log" in header.library
    assert summary is not None and summary.statistics.message_count == 107 == len(got)
    assert {s.name: s.encoding for s in summary.schemas.values()} == {
        "sensor_msgs/msg/JointState": "ros2msg", "sensor_msgs/msg/Image": "ros2msg",
        "geometry_msgs/msg/PoseStamped": "ros2msg", "std_msgs/msg/String": "ros2msg",
        "diagnostic_msgs/msg/DiagnosticArray": "ros2msg"}  # fmt: skip
    assert {c.message_encoding for c in summary.channels.values()} == {"cdr"}
    assert {ci.compression for ci in summary.chunk_indexes} == {"zstd"}
    actions = [m for m in got if m.channel.topic == "/workcell/action"]
    assert len(actions) == 100
    for i, m in enumerate(actions):
        assert list(m.decoded_message.position) == pytest.approx(joint_state(i).position)
        assert m.decoded_message.header.frame_id == "teleop" and m.decoded_message.name[6] == "gripper"
        assert m.message.publish_time == header_stamp_ns(serialize_message(joint_state(i)))
        assert m.message.log_time == 100 * NS + i * NS // 20 + 1000
    frames = [m for m in got if m.channel.topic == "/cameras/external/image_raw"]
    for i, m in enumerate(frames):
        msg = m.decoded_message
        rgb = np.frombuffer(msg.data, np.uint8).reshape(msg.height, msg.width, 3)
        assert rgb.shape == (256, 256, 3) and msg.encoding == "rgb8"
        assert rgb.tobytes() == bytes(image(i).data)
    (pose,) = [m.decoded_message for m in got if m.channel.topic == "/aubo/tcp_pose"]
    assert pose.pose.position.x == 0.4 and pose.pose.orientation.w == 1.0
    (diag,) = [m.decoded_message for m in got if m.channel.topic == "/diagnostics"]
    assert diag.status[0].name == "recorder" and diag.status[0].values[0].value == "0"
    with open(path, "rb") as f:
        assert [(m.name, m.metadata) for m in make_reader(f).iter_metadata()] == [
            ("session_log", {"topics": '["/workcell/action"]', "image_hz": "2.0"})]  # fmt: skip


def test_chunks_close_by_size_and_by_time_and_a_closed_chunk_is_in_the_file_at_once(tmp_path) -> None:
    clock = FakeClock()
    path = tmp_path / "s.mcap"
    small = write_session(path, clock, chunk_size=20_000)  # each camera frame fills a chunk
    with open(path, "rb") as f:
        assert len(make_reader(f).get_summary().chunk_indexes) == small.chunks >= 4

    log = SessionLogWriter(tmp_path / "t.mcap", clock=clock, chunk_seconds=1.0)
    log.add_topic("/workcell/action", "sensor_msgs/msg/JointState")
    log.write("/workcell/action", serialize_message(joint_state(0)), 1)
    size = log.size
    clock.t = 0.99
    assert not log.tick() and log.size == size and log.chunks == 0
    assert list(review.messages(log.path)) == []  # still in the open chunk: not in the file yet
    clock.t = 1.0
    assert log.tick() and log.size > size and log.chunks == 1
    assert not log.tick()  # nothing open: nothing to close
    read = list(review.messages(log.path))  # the file as a crash now would leave it: no summary, no footer
    assert [m.decoded_message.position[0] for m in read] == [0.0] and not review.has_summary(log.path)
    clock.t = 5.0
    log.write("/workcell/action", serialize_message(joint_state(1)), 2)  # opens a chunk at 5.0
    clock.t = 5.5
    log.write("/workcell/action", serialize_message(joint_state(2)), 3)
    assert log.chunks == 1
    clock.t = 6.0
    log.write("/workcell/action", serialize_message(joint_state(3)), 4)  # open 1 s: closed after this message
    assert log.chunks == 2 and len(list(review.messages(log.path))) == 4
    log.close()
    assert review.has_summary(log.path) and review.whole_records_end(log.path) == log.path.stat().st_size


def test_a_file_cut_short_reads_up_to_its_last_whole_chunk(tmp_path) -> None:
    path = tmp_path / "s.mcap"
    write_session(path, chunk_size=20_000)
    whole = [(m.channel.topic, m.message.log_time) for m in review.messages(path)]
    with open(path, "rb") as f:
        chunks = sorted((c.chunk_start_offset, c.chunk_start_offset + c.chunk_length)
                        for c in make_reader(f).get_summary().chunk_indexes)  # fmt: skip
    data = path.read_bytes()
    counts = []
    for start, end in chunks[1:]:  # cut in the middle of each chunk but the first: what a kill mid-write leaves
        cut = tmp_path / f"cut{start}.mcap"
        cut.write_bytes(data[: (start + end) // 2])
        read = list(review.messages(cut))
        assert [(m.channel.topic, m.message.log_time) for m in read] == whole[: len(read)]
        assert all(m.decoded_message is not None for m in read)
        assert not review.has_summary(cut) and start <= review.whole_records_end(cut) < cut.stat().st_size
        assert review.info(cut).closed is False
        counts.append(len(read))
    assert counts == sorted(counts) and counts[0] > 0 and counts[-1] < len(whole)  # each cut keeps the chunks before


KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import Image, JointState
    from session_log.mcap_writer import SessionLogWriter
    log = SessionLogWriter(sys.argv[1], chunk_seconds=0.02)
    log.add_topic("/workcell/action", "sensor_msgs/msg/JointState")
    log.add_topic("/cameras/wrist/image_raw", "sensor_msgs/msg/Image")
    frame = serialize_message(Image(height=64, width=64, encoding="rgb8", step=192, data=bytes(range(64)) * 192))
    i = 0
    while True:  # until killed
        action = JointState(name=["dx"], position=[float(i)])
        log.write("/workcell/action", serialize_message(action), i, sequence=i)
        if i % 10 == 0:
            log.write("/cameras/wrist/image_raw", frame, i, sequence=i)
        i += 1
    """
)


def test_a_writer_killed_with_sigkill_leaves_every_closed_chunk_readable(tmp_path) -> None:
    path = tmp_path / "killed.mcap"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)], env=env, cwd=REPO)
    try:
        # half a MB: twenty-odd closed chunks, by size and by time (more only lengthens the read-back)
        assert wait_for(lambda: path.exists() and path.stat().st_size > 500_000, timeout=120), "no chunks written"
        written = path.stat().st_size  # every byte here was a closed chunk's (or the header's) when the kill came
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        proc.kill()
    assert not review.has_summary(path)
    assert review.whole_records_end(path) >= written
    read = list(review.messages(path))
    actions = [m for m in read if m.channel.topic == "/workcell/action"]
    # what was read is what was written, from the first message on, none missing, each decoded
    assert [m.message.sequence for m in actions] == list(range(len(actions))) and len(actions) > 100
    assert all(list(m.decoded_message.position) == [m.message.sequence] for m in actions)
    frames = [m.decoded_message for m in read if m.channel.topic == "/cameras/wrist/image_raw"]
    assert frames and all((f.height, f.width, len(f.data)) == (64, 64, 64 * 64 * 3) for f in frames)


def test_a_full_disk_stops_the_log_not_its_caller_and_what_was_written_reads_back(small_disk) -> None:
    """A real ENOSPC (a small tmpfs, filled by the log itself): the write that meets it raised OSError out of the
    node's callback and ended the node, and bring-up then stopped the graph (issue 35, item 5). Now the log stops,
    says why, every later call is a no-op, close() closes only, and every chunk written before reads back."""
    path = small_disk / "full.mcap"
    clock = FakeClock()
    log = SessionLogWriter(path, chunk_size=50_000, clock=clock)
    log.add_topic("/workcell/action", "sensor_msgs/msg/JointState")
    log.add_topic("/cameras/wrist/image_raw", "sensor_msgs/msg/Image")
    frame = serialize_message(image(0))  # random pixels: zstd cannot shrink them, the disk fills
    i = 0
    while log.stopped is None:  # 4 MiB: about 20 frames
        log.write("/workcell/action", serialize_message(joint_state(i)), i * NS // 20, sequence=i)
        log.write("/cameras/wrist/image_raw", frame, i * NS // 20, sequence=i)
        i += 1
        assert i < 1000, "the disk never filled"
    assert log.stopped.startswith("No space left on device"), log.stopped
    written, stopped_at = path.stat().st_size, log.messages
    log.write("/workcell/action", serialize_message(joint_state(i)), i * NS // 20)  # no-ops, no error
    log.add_topic("/aubo/mode", "std_msgs/msg/String")
    log.add_metadata("demo", {"name": "demo_0"})
    clock.t += 10
    assert not log.tick()
    log.close()
    log.close()
    assert log.messages == stopped_at and path.stat().st_size == written and "/aubo/mode" not in log.topics
    assert not review.has_summary(path)
    read = [m for m in review.messages(path) if m.channel.topic == "/workcell/action"]
    assert len(read) > 5 and [m.message.sequence for m in read] == list(range(len(read)))  # in order, from the 1st
    assert all(list(m.decoded_message.position) == list(joint_state(m.message.sequence).position) for m in read)


# --------------------------------------------------------------------------
# The review
# --------------------------------------------------------------------------
def test_the_review_prints_topics_counts_and_whether_the_log_was_closed(tmp_path, capsys) -> None:
    path = tmp_path / "s.mcap"
    write_session(path)
    assert review.main([str(path), "--decode"]) == 0
    out, err = capsys.readouterr()
    size = re.escape(tqdm.format_sizeof(path.stat().st_size))  # a closed log is read whole: its bytes, on stderr
    assert re.search(rf"^reading: 100%.* {size}/{size} ", err, re.M), err
    assert "reading" not in out and out.startswith("Files:")
    assert "Closed:            yes" in out and "Messages:          107" in out
    assert re.search(r"Topic: /workcell/action\s+\| Type: sensor_msgs/msg/JointState \| Count: 100 \|", out)
    assert "Duration:          6.000 s" in out  # 100 s + 1 us .. 106 s of log time
    open_log = write_session(tmp_path / "open.mcap", chunk_size=20_000, close=False)
    log = review.info(open_log.path)
    assert not log.closed and 0 < log.count < 107


# --------------------------------------------------------------------------
# The documented defaults and the graph argument
# --------------------------------------------------------------------------
def test_the_default_topics_are_the_documented_ones() -> None:
    doc = (REPO / "docs" / "session_log.md").read_text()
    table = doc.split("### The default topics", 1)[1].split("\n\n", 2)[2].split("\n\n", 1)[0]
    assert re.findall(r"^\| `(/[^`]+)` \|", table, re.M) == list(DEFAULT_TOPICS)


def test_record_mcap_starts_the_session_log_on_any_job_and_names_the_log_in_the_recorders() -> None:
    graph = Graph.load()
    assert "session_log" not in [s.name for s in graph.resolve({})]
    specs = {s.name: s for s in graph.resolve({"record_mcap": "logs/s.mcap", "teleop": "true",
                                                "session_log.image_hz": "0", "session_log.topics":
                                                "[/workcell/action, /aubo/tcp_pose]"})}  # fmt: skip
    log = specs["session_log"].parameters
    assert log["path"] == "logs/s.mcap" and log["image_hz"] == 0.0 and log["topics"] == ["/workcell/action",
                                                                                          "/aubo/tcp_pose"]  # fmt: skip
    assert specs["recorder"].parameters["mcap_log"] == "logs/s.mcap"
    rollouts = {s.name: s for s in graph.resolve({"record_mcap": "x.mcap", "policy": "true",
                                                  "record_rollouts": "true"})}  # fmt: skip
    assert rollouts["rollout_recorder"].parameters["mcap_log"] == "x.mcap" and "session_log" in rollouts
