"""foxglove_bridge node: the graph's topics live on Foxglove's WebSocket protocol (docs/session_log.md, "Live in
Foxglove"), with foxglove-sdk's server: Foxglove (the desktop app, or app.foxglove.dev) opens
``ws://127.0.0.1:8765`` and sees the graph as it runs.

The topics are the session log's (``topics``: the same default set, the same following: :mod:`session_log.follow`),
each forwarded as it is received: its CDR bytes unchanged on a channel of message encoding ``cdr`` whose schema is
the type's ``ros2msg`` text (:mod:`session_log.definitions`, the log's schemas), with the node's clock at
reception as log time (the graph's: sim time on the simulated graph). Nothing is sent on a channel no client
subscribes to; camera frames go at most ``image_hz`` per wall second per camera. A latched topic's last message
(its publishers' QoS is transient local: the active source, the episode, the recorder's status) is sent again to
each client that subscribes to it, as ROS would send it to a late subscriber.

Read-only: the server advertises no capability (:data:`CAPABILITIES`), so a client can neither publish into
the graph, nor call a service, nor get or set a parameter; what it sends of those the server answers with an
error and never hands to this node. The server has no authentication (foxglove-sdk's ``start_server`` takes a
TLS certificate, no credentials): it binds a loopback address unless ``allow_remote`` is true. And since any web
page in the operator's browser may open a WebSocket to that address, foxglove-sdk's server listens on a private
one behind :class:`session_log.origin_gate.OriginGate`, which lets through only the origins ``allowed_origins``
names (Foxglove's app and pages served from loopback, by default) and clients that send none (no browser page).
"""

from __future__ import annotations

import errno
from typing import Any, Final

import foxglove
from foxglove.websocket import Capability, ChannelView, Client, ServerListener, WebSocketServer
from rclpy.clock import Clock, ClockType
from rclpy.node import Node

from libero_workcell.contract import Params
from libero_workcell.loopback import is_loopback
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, refuse_runtime_changes
from session_log.definitions import full_definition
from session_log.follow import DISCOVER_PERIOD, TopicFollower, absolute_topics
from session_log.mcap_writer import MESSAGE_ENCODING, SCHEMA_ENCODING
from session_log.origin_gate import DEFAULT_ORIGINS, OriginGate, private_loopback
from session_log.topics import DEFAULT_TOPICS, IMAGE_TYPE, RateGate

NAME: Final = "foxglove_bridge"
HOST: Final = "127.0.0.1"
PORT: Final = 8765  # Foxglove's usual WebSocket port
IMAGE_HZ: Final = 10.0  # camera frames sent per wall second, per camera (0: every frame): 3.8 MB/s for both
# None: no client publishing, no services, no parameters, no connection graph, no playback control or time
CAPABILITIES: Final[tuple[Capability, ...]] = ()
REPORT_PERIOD: Final = 10.0  # wall s between the node's lines on what it forwarded

# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    "host": HOST,  # the address the server binds: a loopback one unless allow_remote
    "port": PORT,  # foxglove_port:=N; 0: any free port (the node's log says which)
    "allow_remote": False,  # true: host may be any address: the graph is then readable by anyone reaching it
    "allowed_origins": list(DEFAULT_ORIGINS),  # web pages that may connect ("loopback": any page served from one)
    "topics": list(DEFAULT_TOPICS),
    "image_hz": IMAGE_HZ,
    "discover_period": DISCOVER_PERIOD,  # wall s between looks for the topics not yet followed
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.LOCKSTEP: False,
}


def bind_refusal(host: str, allow_remote: bool) -> str | None:
    """Why the server may not bind ``host`` (None: it may)."""
    if is_loopback(host) or allow_remote:
        return None
    return (f"host {host!r} is not a loopback address, and the Foxglove WebSocket server has no authentication: "
            f"anyone who reaches {host} would read the graph. View it from another machine through an SSH tunnel "
            "(docs/session_log.md, 'Live in Foxglove'), or set allow_remote:=true to serve it unauthenticated")


class _Subscriptions(ServerListener):
    """The server's listener: a client subscribing to a channel gets the latched topic's last message (the other
    events: ServerListener's, which do nothing). Called on the server's thread."""

    def __init__(self, node: FoxgloveBridgeNode) -> None:
        self._node = node

    def on_subscribe(self, client: Client, channel: ChannelView) -> None:
        self._node.resend_latched(channel.topic)


def start_server(host: str, port: int, context: foxglove.Context,
                 listener: ServerListener | None = None) -> WebSocketServer:  # fmt: skip
    """foxglove-sdk's server on ``host``:``port`` for ``context``'s channels, with no capability; a port in use
    is an OSError that says so."""
    try:
        return foxglove.start_server(name=NAME, host=host, port=port, capabilities=list(CAPABILITIES),
                                     supported_encodings=[], context=context, server_listener=listener)  # fmt: skip
    except RuntimeError as exc:
        if "in use" in str(exc):
            raise port_in_use(host, port, exc) from exc
        raise RuntimeError(f"cannot serve on {host}:{port}: {exc}") from exc


def port_in_use(host: str, port: int, exc: Exception) -> OSError:
    why = f"port {port} on {host} is in use (another foxglove_bridge, or another program): choose a free one"
    return OSError(errno.EADDRINUSE, f"{why} with foxglove_port:=N ({exc})")


def open_gate(host: str, port: int, origins: list[str], on_refused: Any) -> OriginGate:
    """The gate on the public ``host:port`` (a port in use: an OSError that says so; an allow-list entry that is
    no origin: a ValueError)."""
    try:
        return OriginGate(host, port, origins, on_refused)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise port_in_use(host, port, exc) from exc
        raise


class FoxgloveBridgeNode(Node):
    def __init__(self) -> None:
        super().__init__(NAME)
        declare_all(self, PARAMETERS)
        refuse_runtime_changes(self)
        p = lambda name: self.get_parameter(name).value  # noqa: E731
        self.wanted = absolute_topics(p("topics"))
        self.image_hz = float(p("image_hz"))
        RateGate(self.image_hz)  # refused at start if negative
        host, port = str(p("host")), int(p("port"))
        if not 0 <= port <= 65535:
            raise ValueError(f"port is 0 (any free one) to 65535, got {port}")
        if why := bind_refusal(host, bool(p("allow_remote"))):
            raise ValueError(why)
        self.channels: dict[str, foxglove.Channel] = {}
        self._latched: dict[str, tuple[bytes, int]] = {}  # latched topic -> its last message and its log time
        self.fox = foxglove.Context()  # this node's channels, served by this node's server only
        self.gate = open_gate(host, port, list(p("allowed_origins")), self._refused)
        private = private_loopback()  # the server behind the gate, where no page would find it
        self.server = start_server(private, 0, self.fox, _Subscriptions(self))
        self.gate.start((private, self.server.port))
        if not is_loopback(host):
            self.get_logger().warning(f"allow_remote: serving the graph on {host}, unauthenticated")
        self._schemas: dict[str, foxglove.Schema] = {}  # type name -> its schema (read once per type)
        self._gates: dict[str, RateGate] = {}
        self._wall = Clock(clock_type=ClockType.STEADY_TIME)
        self.forwarded = 0
        self.kept_out = 0  # camera frames not sent (image_hz)
        self.create_timer(REPORT_PERIOD, self._report, clock=self._wall)
        self.url = f"ws://{host}:{self.gate.port}"
        self.get_logger().info(f"serving {len(self.wanted)} topics at {self.url}: in Foxglove, Open connection > "
                               f"Foxglove WebSocket > {self.url}")  # fmt: skip
        self.follower = TopicFollower(self, self.wanted, self._take, self._forward, "forwarding",
                                      float(p("discover_period")))  # fmt: skip

    def _take(self, topic: str, type_name: str, cls: type) -> None:
        """A channel for ``topic``: ``cdr`` messages, the type's ``ros2msg`` schema (a DefinitionError if its
        definition is not installed)."""
        if type_name not in self._schemas:
            text = full_definition(type_name)
            self._schemas[type_name] = foxglove.Schema(name=type_name, encoding=SCHEMA_ENCODING, data=text.encode())
        self.channels[topic] = foxglove.Channel(topic, schema=self._schemas[type_name],
                                                message_encoding=MESSAGE_ENCODING, context=self.fox)  # fmt: skip
        if type_name == IMAGE_TYPE and self.image_hz > 0:
            self._gates[topic] = RateGate(self.image_hz)

    def _forward(self, topic: str, data: bytes) -> None:
        channel = self.channels[topic]
        log_time = self.get_clock().now().nanoseconds
        if self.follower.subscribed[topic][1][1]:  # latched: kept for the clients that subscribe later
            self._latched[topic] = (data, log_time)
        if not channel.has_sinks():  # no client subscribed to it: nothing to send
            return
        gate = self._gates.get(topic)
        if gate is not None and not gate.admit(self._wall.now().nanoseconds):
            self.kept_out += 1
            return
        channel.log(data, log_time=log_time)
        self.forwarded += 1

    def resend_latched(self, topic: str) -> None:
        """Send a latched topic's last message again (a client has just subscribed to it)."""
        last, channel = self._latched.get(topic), self.channels.get(topic)
        if last is not None and channel is not None:
            channel.log(last[0], log_time=last[1])

    def _refused(self, origin: str | None, why: str) -> None:
        """Say who was turned away: a page of a foreign origin (or the Foxglove app at an origin the allow-list
        misses: add it), or what was no WebSocket handshake."""
        self.get_logger().warning(f"refused a connection from origin {origin!r}: {why} (allowed_origins: "
                                  f"{self.get_parameter('allowed_origins').value})",
                                  throttle_duration_sec=REPORT_PERIOD)  # fmt: skip

    def _report(self) -> None:
        self.get_logger().info(f"{self.forwarded} messages forwarded on {len(self.channels)} topics at {self.url} "
                               f"({self.kept_out} camera frames thinned out; {self.gate.refused} connections "
                               f"refused at the gate)")  # fmt: skip

    def shutdown(self) -> None:
        self.gate.stop()
        self.server.stop()
        for channel in self.channels.values():
            channel.close()
        missing = [t for t in self.wanted if t not in self.channels]
        self.get_logger().info(f"stopped: {self.forwarded} messages forwarded; not seen: {missing or 'none'}")


def main(args: list[str] | None = None) -> None:
    run_node(FoxgloveBridgeNode, NAME, args, startup_errors=(ValueError, RuntimeError, OSError))


if __name__ == "__main__":
    main()
