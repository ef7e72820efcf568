"""Following topics of the graph as raw CDR messages: how the session log and the Foxglove bridge subscribe
(one home for both; docs/session_log.md).

Each wanted topic is subscribed once a publisher of it is on the graph (looked for every ``discover_period`` s of
wall time), with the type the graph names and a QoS every publisher of it offers (reliable and transient local
only if all of them are: latched topics' last message comes too). Messages come raw (``raw=True``: the CDR
bytes, never decoded). A topic the node cannot take (two types on the graph, a type whose definition is not
installed, ...) is skipped with a warning, once; the others go on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any, Final

from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

from session_log.definitions import DefinitionError, split_type
from session_log.topics import IMAGE_TYPE

DEPTH: Final = 50  # a camera reader's queue (frames are large; the log keeps a few a second anyway)
# every other reader's: a long stall of the node (a chunk compressed on a loaded machine) drops nothing (one demo's
# log once missed 7 of its 1074 actions with 50); small messages, so the memory is small too
DEPTH_SMALL: Final = 1000
DISCOVER_PERIOD: Final = 0.5  # wall s between looks for the topics not yet subscribed
# What taking a topic on may raise for that topic alone (its type's module or definition missing, a sink's refusal):
# the topic is skipped, the node goes on.
TOPIC_ERRORS: Final = (DefinitionError, ImportError, AttributeError, ValueError, TypeError, RuntimeError)


def absolute_topics(topics: Iterable[Any]) -> list[str]:
    """``topics`` as names, refused (ValueError) unless each is absolute."""
    names = [str(t) for t in topics]
    bad = [t for t in names if not t.startswith("/")]
    if bad:
        raise ValueError(f"topics are absolute names (/...): {bad}")
    return names


def message_class(type_name: str) -> type:
    """The Python class of ``pkg/msg/Type``."""
    package, name = split_type(type_name)
    return getattr(importlib.import_module(f"{package}.msg"), name)


def starts_with_header(cls: type) -> bool:
    fields = list(cls.get_fields_and_field_types().items())  # type: ignore[attr-defined]
    return bool(fields) and fields[0][1] == "std_msgs/Header"


def offered(publishers: list[Any]) -> tuple[bool, bool]:
    """(reliable, transient local): what every one of ``publishers`` offers, so a reader asking it matches all."""
    reliable = all(p.qos_profile.reliability == ReliabilityPolicy.RELIABLE for p in publishers)
    latched = all(p.qos_profile.durability == DurabilityPolicy.TRANSIENT_LOCAL for p in publishers)
    return reliable, latched


def reader_qos(reliable: bool, latched: bool, depth: int = DEPTH) -> QoSProfile:
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE if reliable else ReliabilityPolicy.BEST_EFFORT,
        durability=DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE,
    )


class TopicFollower:
    """Subscribes ``node`` to each of ``wanted`` as its publishers appear. ``take(topic, type_name, cls)`` is
    called once per topic before its subscription (the node's channel for it; raising one of
    :data:`TOPIC_ERRORS` skips the topic), then ``deliver(topic, data)`` with each message's CDR bytes.
    ``verb`` names what the node does with a topic in its log lines ("logging /x", "not logging /x: why")."""

    def __init__(self, node: Node, wanted: list[str], take: Callable[[str, str, type], None],
                 deliver: Callable[[str, bytes], None], verb: str,
                 discover_period: float = DISCOVER_PERIOD) -> None:  # fmt: skip
        self.node, self.wanted, self.verb = node, list(wanted), verb
        self._take, self._deliver = take, deliver
        self.subscribed: dict[str, tuple[Any, tuple[bool, bool]]] = {}  # topic -> (subscription, its QoS)
        self.refused: dict[str, str] = {}  # topic -> why it is not followed (said once)
        self._large: set[str] = set()  # image topics: a shorter reader queue (DEPTH)
        steady = Clock(clock_type=ClockType.STEADY_TIME)  # the sim clock may stand still: discovery may not
        node.create_timer(float(discover_period), self.discover, clock=steady)
        self.discover()

    def discover(self) -> None:
        """Subscribe each wanted topic that has a publisher now (its type from the graph); ask less of a topic
        whose new publisher offers less (a volatile one beside latched ones: its messages would not match)."""
        types = dict(self.node.get_topic_names_and_types())
        for topic in self.wanted:
            if topic in self.refused or topic not in types:
                continue
            publishers = self.node.get_publishers_info_by_topic(topic)
            if not publishers:
                continue
            if topic in self.subscribed:
                self._downgrade(topic, offered(publishers))
                continue
            if len(types[topic]) != 1:
                self._refuse(topic, f"it has {len(types[topic])} types on the graph: {types[topic]}")
                continue
            type_name = types[topic][0]
            try:
                cls = message_class(type_name)
                self._take(topic, type_name, cls)
            except TOPIC_ERRORS as exc:
                self._refuse(topic, str(exc) if type_name in str(exc) else f"{type_name}: {exc}")
                continue
            if type_name == IMAGE_TYPE:
                self._large.add(topic)
            self._subscribe(topic, cls, offered(publishers))
            self.node.get_logger().info(f"{self.verb} {topic} ({type_name})")

    def matched(self) -> bool:
        """Whether each followed topic's subscription has matched every publisher of it on the graph now (one
        still being matched would miss what it publishes meanwhile)."""
        return all(sub.get_publisher_count() >= len(self.node.get_publishers_info_by_topic(topic))
                   for topic, (sub, _) in self.subscribed.items())  # fmt: skip

    def _subscribe(self, topic: str, cls: type, qos: tuple[bool, bool]) -> None:
        sub = self.node.create_subscription(cls, topic, lambda data, t=topic: self._deliver(t, data),
                                            reader_qos(*qos, depth=DEPTH if topic in self._large else DEPTH_SMALL),
                                            raw=True)  # fmt: skip
        self.subscribed[topic] = (sub, qos)

    def _downgrade(self, topic: str, now: tuple[bool, bool]) -> None:
        sub, had = self.subscribed[topic]
        less = (had[0] and now[0], had[1] and now[1])
        if less != had:
            cls = sub.msg_type
            self.node.destroy_subscription(sub)
            self._subscribe(topic, cls, less)
            self.node.get_logger().warning(f"{topic}: a publisher offers less (reliable, latched: {now}): "
                                           "resubscribed")  # fmt: skip

    def _refuse(self, topic: str, why: str) -> None:
        self.refused[topic] = why
        self.node.get_logger().warning(f"not {self.verb} {topic}: {why}")
