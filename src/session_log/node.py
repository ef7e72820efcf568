"""session_log node: records the graph's topics into an MCAP file as they are received (docs/session_log.md).

Each topic of ``topics`` is subscribed once a publisher of it is on the graph (looked for every
``discover_period`` s of wall time), with the type the graph names and a QoS every publisher of it offers
(reliable and transient local only if all of them are: latched topics' last message comes too). Messages come
raw (``raw=True``: the CDR bytes, never decoded) and go to :class:`~session_log.mcap_writer.SessionLogWriter`
with the node's clock as log time (the graph's: sim time on the simulated graph, as demos' stamps are) and the
message's own ``header.stamp`` as publish time where it has one. Camera frames are kept at most ``image_hz``
times a second. The recorder's ``/recorder/status`` is also read: each demo it saves becomes a ``demo`` metadata
record (its session file, name, first and last step's times).

A write the OS refuses (the log's disk full: ENOSPC) stops the log and nothing else: the node says so once (an
error line, and ``/diagnostics`` at ERROR from then on), stops following the topics, and runs on with the graph;
the file keeps every chunk written before (readable as a log cut short: session_log.review).

On the simulated graph in lockstep the log is a lockstep observer (``transports.sim_lockstep.OBSERVER``): it
has no part in any tick, but it registers only once every other participant is up and it has matched every
publisher of the topics it follows, and the world's first tick waits for that. A session that starts at once (the
scripted teleop session, an evaluation) is logged from its first step: a late subscription lost its first actions
(all but the 10 a latched writer keeps).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from typing import Any, Final

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.clock import Clock, ClockType
from rclpy.node import Node, NodeNameNonExistentError
from rclpy.serialization import deserialize_message
from std_msgs.msg import String

from libero_workcell import ros_msgs
from libero_workcell.contract import Params, Qos, Topics
from libero_workcell.json_topics import JsonTopicReader, RecorderStatus
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from libero_workcell.ros_qos import qos
from session_log.follow import DISCOVER_PERIOD, TopicFollower, absolute_topics, starts_with_header
from session_log.mcap_writer import CHUNK_SECONDS, CHUNK_SIZE, SessionLogWriter, header_stamp_ns
from session_log.topics import DEFAULT_TOPICS, IMAGE_HZ, IMAGE_TYPE, RateGate
from transports import sim_lockstep

JOIN_POLL: Final = 0.1  # wall s between looks at whether the log may join the lockstep
DIAGNOSTICS_PERIOD: Final = 1.0  # wall s between the node's diagnostics

# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    "path": "",  # the MCAP file (record_mcap:=PATH); required
    "topics": list(DEFAULT_TOPICS),
    "image_hz": IMAGE_HZ,  # camera frames kept per second of log time, per camera (0: every frame)
    "chunk_size": CHUNK_SIZE,  # bytes
    "chunk_seconds": CHUNK_SECONDS,  # wall s a chunk may stay open (what a crash may lose)
    "discover_period": DISCOVER_PERIOD,  # wall s between looks for the topics not yet subscribed
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
    # the lockstep's nodes ($(participants)): in lockstep the log joins them once every other one is up and the
    # log follows their topics, so the world's first tick waits for the log and it misses no step
    "participants": "",
}


class StopsBetweenWrites:
    """SIGINT and SIGTERM wait for the write in progress. run_node's handlers raise KeyboardInterrupt wherever
    the main thread is; raised inside mcap's writer, it would leave a torn record in the chunk that the stop then
    closes. A signal during a write is handled right after it; one during the closing write is not needed."""

    def __init__(self) -> None:
        self._busy = self.closing = False
        self._pending: tuple[Callable[[int, Any], Any], int, Any] | None = None
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if callable(handler):
                signal.signal(sig, lambda signum, frame, h=handler: self._handle(h, signum, frame))

    def _handle(self, handler: Callable[[int, Any], Any], signum: int, frame: Any) -> None:
        if self._busy:
            self._pending = (handler, signum, frame)
        elif not self.closing:
            handler(signum, frame)

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        self._busy = True
        try:
            yield
        finally:
            self._busy = False
            pending, self._pending = self._pending, None
            if pending is not None and not self.closing:
                pending[0](pending[1], pending[2])


class SessionLogNode(Node):
    def __init__(self) -> None:
        super().__init__("session_log")
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        path = str(p("path"))
        if not path:
            raise ValueError("session_log needs a file: path (the graph's record_mcap:=PATH)")
        self.wanted = absolute_topics(p("topics"))
        self.image_hz = float(p("image_hz"))
        RateGate(self.image_hz)  # refused at start if negative
        self.log = SessionLogWriter(path, int(p("chunk_size")), float(p("chunk_seconds")))
        clock = "sim time (/clock)" if self.get_parameter("use_sim_time").value else "UNIX time"
        self.log.add_metadata("session_log", {"topics": self.wanted, "image_hz": self.image_hz, "clock": clock})
        self._stops = StopsBetweenWrites()
        self._gates: dict[str, RateGate] = {}
        self._stamped: set[str] = set()  # topics whose type starts with a header: its stamp is the publish time
        self._demos: set[tuple[str, str]] = set()  # (session file, demo) already in the metadata
        self._recorder_reader = JsonTopicReader(RecorderStatus, Topics.RECORDER_STATUS, self.get_logger())
        self.kept_out = 0  # camera frames not kept (image_hz)
        steady = Clock(clock_type=ClockType.STEADY_TIME)  # the sim clock may stand still: the file's chunks may not
        self._diag_pub = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        self._said_stopped = False
        self.create_timer(0.1, self._tick, clock=steady)
        self.create_timer(10.0, self._report, clock=steady)
        self.create_timer(DIAGNOSTICS_PERIOD, self._publish_diagnostics, clock=steady)
        self.follower = TopicFollower(self, self.wanted, self._take, self._on_message, "logging",
                                      float(p("discover_period")))  # fmt: skip
        self.get_logger().info(f"logging {len(self.wanted)} topics into {self.log.path}")
        self._observer: sim_lockstep.LockstepParticipant | None = None
        if p(Params.LOCKSTEP):
            self._sim_link = str(p(Params.SIM_LINK))
            others = {n.strip() for n in str(p("participants")).split(",") if n.strip()} - {self.get_name()}
            self._join = self.create_timer(JOIN_POLL, lambda: self._join_lockstep(others), clock=steady)

    def _join_lockstep(self, others: set[str]) -> None:
        """Register as the lockstep's observer once ``others`` are all up (each registers once its topics are
        matched: its publishers exist), this node's graph shows them with their publishers (discovery reaches
        each process at its own pace), and the log follows every wanted topic they publish, each publisher of it
        matched."""
        if not others <= sim_lockstep.registered(self._sim_link) or not sim_lockstep.available(self._sim_link):
            return
        published: set[str] = set()
        for name in others:
            try:
                published |= {topic for topic, _ in self.get_publisher_names_and_types_by_node(name, "/")}
            except NodeNameNonExistentError:  # not on this node's graph yet
                return
        self.follower.discover()  # their topics, now, not at the next look
        needed = published & set(self.wanted) - set(self.follower.refused)
        if not needed <= set(self.follower.subscribed) or not self.follower.matched():
            return
        self._join.cancel()
        self._observer = sim_lockstep.LockstepParticipant(self._sim_link, self.get_name(), sim_lockstep.OBSERVER)
        self.get_logger().info(f"lockstep: following {len(self.follower.subscribed)} topics ({len(needed)} of "
                               f"the loop's); the world may start")  # fmt: skip

    def _take(self, topic: str, type_name: str, cls: type) -> None:
        """A channel in the log for ``topic`` (a DefinitionError if its type's definition is not installed)."""
        self.log.add_topic(topic, type_name)
        self._check_stopped()
        if type_name == IMAGE_TYPE and self.image_hz > 0:
            self._gates[topic] = RateGate(self.image_hz)
        if starts_with_header(cls):
            self._stamped.add(topic)

    def _on_message(self, topic: str, data: bytes) -> None:
        now = self.get_clock().now().nanoseconds
        gate = self._gates.get(topic)
        if gate is not None and not gate.admit(now):
            self.kept_out += 1
            return
        with self._stops.writing():
            self.log.write(topic, data, now, header_stamp_ns(data) if topic in self._stamped else None)
            if topic == Topics.RECORDER_STATUS:
                self._on_recorder_status(data)
        self._check_stopped()

    def _tick(self) -> None:
        with self._stops.writing():
            self.log.tick()
        self._check_stopped()

    def _check_stopped(self) -> None:
        """Once the log has stopped (the OS refused a write): say so, and follow no topic any more."""
        if self.log.stopped is None or self._said_stopped:
            return
        self._said_stopped = True
        self.follower.wanted = []  # nothing more is taken
        for sub, _ in self.follower.subscribed.values():
            self.destroy_subscription(sub)
        self.get_logger().error(f"logging stopped: {self.log.path}: {self.log.stopped}; the graph runs on without "
                                f"its log; the file holds what was logged before ({self.log.messages} messages), "
                                "readable as a log cut short (docs/session_log.md)")  # fmt: skip
        self._publish_diagnostics()

    def _publish_diagnostics(self) -> None:
        """OK while logging, ERROR once the log has stopped (what ``workcell status`` and the console show)."""
        stopped = self.log.stopped
        level = ros_msgs.DIAG_ERROR if stopped else ros_msgs.DIAG_OK
        message = f"logging stopped: {stopped}" if stopped else "logging"
        values = {"path": str(self.log.path), "messages": self.log.messages, "bytes": self.log.size,
                  "topics": len(self.log.topics), "stopped": stopped or ""}  # fmt: skip
        self._diag_pub.publish(ros_msgs.diagnostics_msg("session_log", str(self.log.path), level, message, values,
                                                        self.get_clock().now().to_msg()))  # fmt: skip

    def _on_recorder_status(self, data: bytes) -> None:
        """A demo the recorder saved (``last_saved`` of its status) becomes a ``demo`` metadata record."""
        try:
            text = deserialize_message(data, String).data
        except Exception:  # not a String's CDR: nothing to read (rclpy raises what the C layer gives)
            self._recorder_reader.dropped += 1
            return
        status = self._recorder_reader(text)  # checked in one place (libero_workcell.json_topics); bad: dropped
        if status is None:
            return
        saved = status.last_saved or {}
        key = (status.session_file, str(saved.get("name", "")))
        if key[1] and key not in self._demos:
            self._demos.add(key)
            self.log.add_metadata("demo", {"session_file": key[0], **saved})
            self._check_stopped()

    def _report(self) -> None:
        self.get_logger().info(f"{self.log.messages} messages on {len(self.log.topics)} topics, "
                               f"{self.log.size / 2**20:.1f} MiB in {self.log.chunks} chunks")  # fmt: skip

    def shutdown(self) -> None:
        if self._observer is not None:
            self._observer.close()
        self._stops.closing = True
        with self._stops.writing():
            self.log.close()
        missing = [t for t in self.wanted if t not in self.log.topics]
        stopped = f"; it had stopped: {self.log.stopped}" if self.log.stopped else ""
        self.get_logger().info(f"closed {self.log.path}: {self.log.messages} messages on {len(self.log.topics)} "
                               f"topics, {self.log.size / 2**20:.1f} MiB; not seen: {missing or 'none'}"
                               f"{stopped}")  # fmt: skip


def main(args: list[str] | None = None) -> None:
    run_node(SessionLogNode, "session_log", args, startup_errors=(ValueError, RuntimeError, OSError))


if __name__ == "__main__":
    main()
