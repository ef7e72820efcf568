"""The Foxglove bridge (``foxglove:=true``, docs/session_log.md "Live in Foxglove"): the node in its own process on
loopback DDS with a publisher here, a WebSocket client speaking Foxglove's protocol to it (serverInfo, advertise,
subscribe, MessageData frames whose CDR payload is what was published); read-only (no capability, a client's
publishing never reaches the graph); a topic it cannot take is skipped; a non-loopback host and a port in use are
refused at start-up; and the simulated graph with the expert, seen through the bridge as the documented command
starts it."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
import time
from typing import Any

import pytest
from conftest import TEST_OUTPUT, ros_probe, wait_for

from libero_workcell.contract import SOURCE_EXPERT, Qos, Topics
from libero_workcell.ros_qos import qos
from session_log import foxglove_node, origin_gate
from session_log.definitions import full_definition
from session_log.topics import DEFAULT_TOPICS
from workcell.bringup import Graph

pytestmark = pytest.mark.ros
websockets_sync = pytest.importorskip("websockets.sync.client")

SUBPROTOCOL = "foxglove.sdk.v1"  # what foxglove-sdk's server speaks (it answers 400 to foxglove.websocket.v1 alone)
MESSAGE_DATA = 0x01  # server binary opcode: subscription id (u32), log time (u64), payload
CLIENT_MESSAGE_DATA = 0x01  # client binary opcode: client channel id (u32), payload
SERVICE_CALL_REQUEST = 0x02
ODD = "/fox_test/odd"  # a topic of a service's event type: no .msg definition, refused with a warning
NODE_TOPICS = [Topics.ACTION, Topics.ACTIVE_SOURCE, Topics.image("wrist"), ODD]
SERVING = re.compile(r"serving \d+ topics at ws://127\.0\.0\.1:(\d+)")


def bridge_spec(**params: str) -> Any:
    """The foxglove_bridge node as the graph file resolves it with ``foxglove:=true`` (UNIX time: use_sim false),
    on any free port, with ``params`` as ``foxglove_bridge.NAME:=VALUE``."""
    overrides = {"foxglove": "true", "use_sim": "false", "foxglove_port": "0",
                 **{f"foxglove_bridge.{k}": v for k, v in params.items()}}  # fmt: skip
    (spec,) = [s for s in Graph.load().resolve(overrides) if s.name == "foxglove_bridge"]
    return spec


def served_port(graph: Any, timeout: float = 30.0) -> int:
    """The port the running bridge says it serves on (its log's start-up line)."""
    found: list[int] = []

    def look() -> bool:
        graph.check()  # a bridge that died says so here
        found.extend(int(m) for m in SERVING.findall(graph.log_text("foxglove_bridge")))
        return bool(found)

    assert wait_for(look, timeout=timeout, interval=0.1), graph.log_text("foxglove_bridge")[-2000:]
    return found[0]


class FoxgloveClient:
    """A Foxglove WebSocket client (the protocol Foxglove's app speaks), synchronous."""

    def __init__(self, port: int, origin: str | None = None) -> None:
        self.ws = websockets_sync.connect(f"ws://127.0.0.1:{port}", subprotocols=[SUBPROTOCOL], proxy=None,
                                          compression=None, open_timeout=10, legacy=True, origin=origin)  # fmt: skip
        self.server_info = json.loads(self.ws.recv(timeout=10))
        self.channels: dict[str, dict[str, Any]] = {}  # topic -> advertised channel
        self.statuses: list[dict[str, Any]] = []
        self.frames: list[tuple[int, int, bytes]] = []  # (subscription id, log time, payload)

    def pump(self, seconds: float) -> None:
        """Read what the server sends for ``seconds``."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                msg = self.ws.recv(timeout=left)
            except TimeoutError:
                return
            if isinstance(msg, bytes):
                assert msg[0] == MESSAGE_DATA, msg[:16]
                sub, log_time = struct.unpack_from("<IQ", msg, 1)
                self.frames.append((sub, log_time, msg[13:]))
                continue
            op = json.loads(msg)
            if op["op"] == "advertise":
                self.channels.update({c["topic"]: c for c in op["channels"]})
            elif op["op"] == "unadvertise":
                self.channels = {t: c for t, c in self.channels.items() if c["id"] not in op["channelIds"]}
            elif op["op"] == "status":
                self.statuses.append(op)

    def pump_until(self, done: Any, timeout: float = 30.0) -> bool:
        """Read what the server sends until ``done()`` is true (True) or ``timeout`` s pass (False)."""
        end = time.monotonic() + timeout
        while not done() and time.monotonic() < end:
            self.pump(0.05)
        return bool(done())

    def wait_advertised(self, topics: set[str], timeout: float = 15.0) -> None:
        self.pump_until(lambda: topics <= set(self.channels), timeout)
        assert topics <= set(self.channels), (topics - set(self.channels), sorted(self.channels))

    def subscribe(self, topic: str, sub_id: int) -> None:
        self.ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": sub_id, "channelId": self.channels[topic]["id"]}]}))  # fmt: skip

    def payloads(self, sub_id: int) -> list[bytes]:
        return [p for s, _, p in self.frames if s == sub_id]

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def publishers():
    """A node of this process with publishers of the node tests' topics (the odd one has a service's event type),
    for the module: the bridge below is the module's."""
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String
    from std_srvs.srv import Trigger

    with ros_probe("fox_test") as node:
        pubs = {
            Topics.ACTION: node.create_publisher(JointState, Topics.ACTION, qos(Qos.COMMAND)),
            Topics.ACTIVE_SOURCE: node.create_publisher(String, Topics.ACTIVE_SOURCE, qos(Qos.LATCHED)),
            Topics.image("wrist"): node.create_publisher(Image, Topics.image("wrist"), qos(Qos.SENSOR)),
            ODD: node.create_publisher(Trigger.Event, ODD, qos(Qos.COMMAND)),
        }
        yield node, pubs


@pytest.fixture(scope="module")
def bridge_graph(publishers, ros_env):
    """The bridge on NODE_TOPICS, one for the module's node tests (the publishers already up: the active source
    latched before it starts), and its port. When the module is done it stops cleanly: no callback of the node
    failed as the tests' clients came, subscribed and went."""
    from std_msgs.msg import String

    from workcell.launcher import launch

    _, pubs = publishers
    pubs[Topics.ACTIVE_SOURCE].publish(String(data=SOURCE_EXPERT))
    logs = TEST_OUTPUT / "test_foxglove_bridge"
    shutil.rmtree(logs, ignore_errors=True)
    graph = launch([bridge_spec(topics=json.dumps(NODE_TOPICS), image_hz="5.0")], env=ros_env, log_dir=logs)
    try:
        port = served_port(graph)
        yield graph, port
    finally:
        codes = graph.stop(timeout=20)
    log = graph.log_text("foxglove_bridge")
    assert codes == {"foxglove_bridge": 0} and "Callback failed" not in log, (codes, log[-2000:])


@pytest.fixture
def bridge(bridge_graph, publishers):
    """The module's bridge and a client of this test's connected to it."""
    graph, port = bridge_graph
    node, pubs = publishers
    graph.check()
    client = FoxgloveClient(port)
    yield graph, client, node, pubs
    client.close()


def action(i: int) -> Any:
    from libero_workcell import ros_msgs

    return ros_msgs.action_msg([0.01 * i, -0.5, 0.25, 0.0, 0.0, 1.0, -1.0], SOURCE_EXPERT, 100.0 + i / 20)


# --------------------------------------------------------------------------
# The node on its own, a publisher here
# --------------------------------------------------------------------------
def test_a_client_sees_the_topics_advertised_with_their_ros2_schemas_and_receives_the_published_cdr(bridge) -> None:
    from rclpy.serialization import deserialize_message, serialize_message
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    graph, client, node, pubs = bridge
    on_the_wire: list[bytes] = []  # what DDS delivers here, raw: the bridge gets the same
    node.create_subscription(JointState, Topics.ACTION, on_the_wire.append, qos(Qos.COMMAND), raw=True)
    assert client.ws.subprotocol == SUBPROTOCOL
    assert client.server_info["op"] == "serverInfo" and client.server_info["name"] == "foxglove_bridge"
    assert client.server_info["capabilities"] == []  # read-only: nothing a client may publish, call or set
    client.wait_advertised({Topics.ACTION, Topics.ACTIVE_SOURCE, Topics.image("wrist")})
    types = {Topics.ACTION: "sensor_msgs/msg/JointState", Topics.ACTIVE_SOURCE: "std_msgs/msg/String",
             Topics.image("wrist"): "sensor_msgs/msg/Image"}  # fmt: skip
    for topic, type_name in types.items():
        channel = client.channels[topic]
        described = (channel["encoding"], channel["schemaName"], channel["schemaEncoding"])
        assert described == ("cdr", type_name, "ros2msg"), channel
        assert channel["schema"] == full_definition(type_name)  # the session log's schema text
    # the odd topic: skipped with a warning, the others go on
    assert ODD not in client.channels
    assert wait_for(lambda: f"not forwarding {ODD}" in graph.log_text("foxglove_bridge"), timeout=5)
    assert "[WARN]" in next(line for line in graph.log_text("foxglove_bridge").splitlines() if ODD in line)

    client.subscribe(Topics.ACTIVE_SOURCE, 1)  # latched before the bridge started: sent on subscription
    client.subscribe(Topics.ACTION, 2)
    assert client.pump_until(lambda: client.payloads(1))
    assert [deserialize_message(p, String).data for p in client.payloads(1)] == [SOURCE_EXPERT]

    before = time.time_ns()
    for i in range(40):
        pubs[Topics.ACTION].publish(action(i))
        client.pump(0.02)
    assert client.pump_until(lambda: len(client.payloads(2)) >= 40) and wait_for(lambda: len(on_the_wire) >= 40, 30)
    after = time.time_ns()
    got = client.payloads(2)
    assert len(got) == 40 and got == on_the_wire  # every message, in order, its CDR bytes as DDS delivered them
    assert len(client.payloads(1)) == 1  # the latched message once, however long the client stayed subscribed
    decoded = [deserialize_message(p, JointState) for p in got]
    for i, m in enumerate(decoded):
        assert serialize_message(m) == serialize_message(action(i))  # what was published, every field
    assert all(m.header.frame_id == SOURCE_EXPERT and len(m.position) == 7 for m in decoded)
    times = [t for s, t, _ in client.frames if s == 2]
    assert times == sorted(times) and before <= times[0] and times[-1] <= after  # received, on the node's clock

    # camera frames: at most image_hz (5) per wall second while a client subscribes
    import numpy as np

    from libero_workcell import ros_msgs

    client.subscribe(Topics.image("wrist"), 3)
    client.pump(0.3)
    start = time.monotonic()
    for i in range(40):  # 40 Hz for 1 s: 8 times image_hz, so an ungated bridge would send 40, far past the bound
        rgb = np.full((256, 256, 3), i, np.uint8)
        pubs[Topics.image("wrist")].publish(ros_msgs.image_msg(rgb, 200.0 + i / 40, "wrist"))
        client.pump(0.025)
    client.pump(0.5)
    elapsed = time.monotonic() - start
    frames = [deserialize_message(p, Image) for p in client.payloads(3)]
    assert 2 <= len(frames) <= 5 * elapsed + 1, (len(frames), elapsed)
    for f in frames:
        assert (f.height, f.width, f.encoding) == (256, 256, "rgb8") and len(set(bytes(f.data))) == 1
    assert graph.exited() == []  # (no callback failed as the clients went: the module's bridge_graph holds it)


def test_the_bridge_is_read_only_a_clients_publishing_never_reaches_the_graph(bridge) -> None:
    from rclpy.serialization import serialize_message
    from sensor_msgs.msg import JointState

    graph, client, node, _ = bridge
    heard: list[JointState] = []
    node.create_subscription(JointState, Topics.ACTION, heard.append, qos(Qos.COMMAND))
    node.create_subscription(JointState, "/fox_test/injected", heard.append, qos(Qos.COMMAND))
    client.wait_advertised({Topics.ACTION})
    # what a client with publishing rights would send: advertise a channel, then a message on it
    for topic in (Topics.ACTION, "/fox_test/injected"):
        client.ws.send(json.dumps({"op": "advertise", "channels": [
            {"id": 7, "topic": topic, "encoding": "cdr", "schemaName": "sensor_msgs/msg/JointState"}]}))  # fmt: skip
        client.ws.send(bytes([CLIENT_MESSAGE_DATA]) + struct.pack("<I", 7) + serialize_message(action(1)))
    client.ws.send(bytes([SERVICE_CALL_REQUEST]) + struct.pack("<III", 1, 1, 3) + b"cdr" + b"\x00")
    client.ws.send(json.dumps({"op": "setParameters", "parameters": [{"name": "/foxglove_bridge/port", "value": 1}]}))
    refused = ("does not support clientPublish", "does not support parameters")
    client.pump_until(lambda: all(any(r in s["message"] for s in client.statuses) for r in refused))
    refusals = " | ".join(s["message"] for s in client.statuses)
    assert "does not support clientPublish" in refusals and "does not support parameters" in refusals, refusals
    assert heard == []  # nothing reached the graph
    publishers = {t for t, _ in node.get_publisher_names_and_types_by_node("foxglove_bridge", "/")}
    assert publishers <= {"/rosout", "/parameter_events"}, publishers  # the bridge publishes nothing of its own
    assert node.get_publishers_info_by_topic("/fox_test/injected") == []
    assert graph.exited() == []  # and it goes on


FOREIGN = ("https://evil.example", "http://127.0.0.1.evil.example", "https://app.foxglove.dev.evil.example",
           "http://app.foxglove.dev", "null", "file://")


def refusal(port: int, origin: str) -> tuple[int, bytes]:
    """The status and body a WebSocket handshake from a page of ``origin`` gets."""
    from websockets.exceptions import InvalidStatus

    with pytest.raises(InvalidStatus) as refused:
        FoxgloveClient(port, origin=origin)
    return refused.value.response.status_code, refused.value.response.body or b""


def test_a_page_of_a_foreign_origin_is_refused_before_the_handshake(bridge) -> None:
    """What a web page open in the operator's browser gets when its script opens a WebSocket to the bridge: 403,
    no channel list; Foxglove's app, pages served from loopback, and clients that send no Origin (no browser page:
    a browser always sends one on a WebSocket) see the graph."""
    graph, client, _, _ = bridge
    port = client.ws.remote_address[1]
    client.wait_advertised({Topics.ACTION})  # no Origin (this client): the graph, as before
    for origin in FOREIGN:
        status, body = refusal(port, origin)
        assert status == 403 and b"serverInfo" not in body and b"advertise" not in body, (origin, status, body)
    for origin in ("https://app.foxglove.dev", "http://localhost:8080", "http://127.0.0.1:5173", "https://[::1]"):
        page = FoxgloveClient(port, origin=origin)
        try:
            assert page.server_info["op"] == "serverInfo", origin
            page.wait_advertised({Topics.ACTION, Topics.ACTIVE_SOURCE})
        finally:
            page.close()
    log = graph.log_text("foxglove_bridge")
    assert "refused a connection from origin 'https://evil.example'" in log, log[-2000:]
    assert graph.exited() == []


def test_what_is_no_websocket_handshake_is_answered_by_the_gate(bridge) -> None:
    """A plain HTTP request, an overlong one, bytes that are no HTTP, a connection that closes at once and one that
    says nothing: each is answered or closed by the gate, none reaches the server behind it, and the gate goes
    on."""
    _, client, _, _ = bridge
    port = client.ws.remote_address[1]

    def answer(request: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(request)
            got = b""
            while chunk := s.recv(4096):
                got += chunk
            return got

    assert answer(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").startswith(b"HTTP/1.1 426 ")  # no upgrade
    assert answer(b"GET /" + b"x" * 9000 + b" HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 414 ")
    assert answer(b"\x16\x03\x01 no http at all\r\n\r\n") == b""  # dropped
    socket.create_connection(("127.0.0.1", port), timeout=10).close()  # gone before a word
    FoxgloveClient(port, origin="https://app.foxglove.dev").close()


def test_a_connection_that_says_nothing_is_closed_once_its_time_to_send_a_handshake_is_up() -> None:
    """The gate on its own (its bound is the node's, shortened here): a silent connection holds nothing for
    longer, and one that is let through meanwhile is not held up by it."""
    with socket.socket() as backend:
        backend.bind(("127.0.0.1", 0))
        backend.listen()
        gate = origin_gate.OriginGate("127.0.0.1", 0, ["loopback"], handshake_timeout_s=0.5)
        gate.start(backend.getsockname())
        try:
            with socket.create_connection(("127.0.0.1", gate.port), timeout=30) as silent:
                start = time.monotonic()
                with socket.create_connection(("127.0.0.1", gate.port), timeout=30) as other:
                    other.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    assert other.recv(4096).startswith(b"HTTP/1.1 426 ")  # answered while the silent one waits
                assert silent.recv(1) == b""  # closed by the gate, not by our timeout
                assert time.monotonic() - start >= 0.45
        finally:
            gate.stop()


def test_allowed_origins_is_a_parameter(graph_runner, publishers) -> None:
    """``foxglove_bridge.allowed_origins:=[...]`` replaces the defaults: the origin named is let through, the
    Foxglove app and loopback pages are not then; an entry that is no origin is refused at start-up."""
    graph = graph_runner([bridge_spec(topics=json.dumps(NODE_TOPICS), allowed_origins='["https://studio.example"]')])
    port = served_port(graph)
    FoxgloveClient(port, origin="https://studio.example").close()
    FoxgloveClient(port).close()  # no Origin: no browser page
    for origin in ("https://app.foxglove.dev", "http://localhost:8080", "https://studio.example.evil"):
        assert refusal(port, origin)[0] == 403, origin
    with pytest.raises(ValueError, match="is not an origin"):
        origin_gate.allowed_origins(["https://app.foxglove.dev/"])
    for entry in ("app.foxglove.dev", "ws://app.foxglove.dev", "https://app.foxglove.dev/layout"):
        with pytest.raises(ValueError, match="is not an origin"):
            origin_gate.allowed_origins([entry])
    assert origin_gate.allowed_origins(["HTTPS://Studio.Example"])[1] == "https://studio.example"
    assert foxglove_node.PARAMETERS["allowed_origins"] == ["https://app.foxglove.dev", "loopback"]


def test_a_host_that_is_not_loopback_is_refused_unless_allow_remote() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert foxglove_node.bind_refusal(host, allow_remote=False) is None, host
    for host in ("0.0.0.0", "::", "192.168.1.10", "lab-pc", ""):
        why = foxglove_node.bind_refusal(host, allow_remote=False)
        assert why and "not a loopback address" in why and "SSH tunnel" in why and "allow_remote" in why, host
        assert foxglove_node.bind_refusal(host, allow_remote=True) is None, host
    assert foxglove_node.PARAMETERS["host"] == "127.0.0.1" and foxglove_node.PARAMETERS["allow_remote"] is False
    assert foxglove_node.CAPABILITIES == ()


def test_the_node_refuses_a_remote_host_at_start_up_and_binds_nothing(graph_runner) -> None:
    graph = graph_runner([bridge_spec(host="0.0.0.0")])
    exits = graph.wait(30)
    assert [(e.name, e.returncode) for e in exits] == [("foxglove_bridge", 2)]
    log = graph.log_text("foxglove_bridge")
    assert "foxglove_bridge: cannot start: host '0.0.0.0' is not a loopback address" in log, log[-2000:]
    assert "serving" not in log


def test_a_port_in_use_is_a_clear_error_at_start_up(graph_runner) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        graph = graph_runner([bridge_spec(port=str(port))])
        exits = graph.wait(30)
    assert [(e.name, e.returncode) for e in exits] == [("foxglove_bridge", 2)]
    log = graph.log_text("foxglove_bridge")
    assert f"foxglove_bridge: cannot start: [Errno 98] port {port} on 127.0.0.1 is in use" in log, log[-2000:]
    assert "foxglove_port:=N" in log


def test_foxglove_starts_the_bridge_on_its_port_with_the_default_topics() -> None:
    graph = Graph.load()
    assert "foxglove_bridge" not in [s.name for s in graph.resolve({})]
    assert graph.arguments["foxglove"].default is False and graph.arguments["foxglove_port"].default == 8765
    (spec,) = [s for s in graph.resolve({"foxglove": "true"}) if s.name == "foxglove_bridge"]
    assert (spec.executable, spec.module) == ("foxglove_bridge", "session_log.foxglove_node")
    assert spec.parameters["host"] == "127.0.0.1" and spec.parameters["port"] == 8765
    assert spec.parameters["image_hz"] == foxglove_node.IMAGE_HZ and "topics" not in spec.parameters  # the default
    assert foxglove_node.PARAMETERS["topics"] == list(DEFAULT_TOPICS)
    specs = {s.name: s for s in graph.resolve({"foxglove": "true", "foxglove_port": "9100",
                                               "foxglove_bridge.topics": "[/workcell/action]"})}  # fmt: skip
    assert specs["foxglove_bridge"].parameters["port"] == 9100
    assert specs["foxglove_bridge"].parameters["topics"] == ["/workcell/action"]


# --------------------------------------------------------------------------
# The simulated graph with the expert, through the bridge (the documented command)
# --------------------------------------------------------------------------
@pytest.mark.slow
def test_the_simulated_graph_is_live_through_the_bridge(tmp_path, ros_env) -> None:
    """``workcell bringup expert:=true foxglove:=true`` (on a free port): the default topics the graph publishes
    are advertised; the expert's actions and a camera's frames arrive and decode with mcap_ros2's decoder from the
    advertised schema (as Foxglove decodes them), on the graph's clock (sim time)."""
    from mcap.records import Schema
    from mcap_ros2.decoder import DecoderFactory

    from workcell.launcher import launch

    overrides = {"expert": "true", "foxglove": "true", "foxglove_port": "0", "sim_link": f"fox_{os.getpid()}"}
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=tmp_path / "logs")
    try:
        client = FoxgloveClient(served_port(graph, timeout=60))
        published = set(DEFAULT_TOPICS) - {Topics.TELEOP_STATUS, Topics.RECORDER_STATUS, Topics.POLICY_STATUS,
                                           Topics.REPLAY_STATUS}
        client.wait_advertised(published, timeout=90)
        client.subscribe(Topics.ACTION, 1)
        client.subscribe(Topics.image("wrist"), 2)
        client.subscribe(Topics.SIM_EPISODE, 3)  # latched
        assert wait_for(lambda: client.pump(0.5) or len(client.payloads(1)) >= 40, timeout=120), \
            graph.log_text("foxglove_bridge")[-2000:]  # fmt: skip
        start = time.monotonic()
        before = len(client.payloads(1))
        client.frames = [f for f in client.frames if f[0] != 2]
        client.pump(3.0)
        in_window = len(client.payloads(1)) - before
        elapsed = time.monotonic() - start
    finally:
        codes = graph.stop(timeout=20)
    log = graph.log_text("foxglove_bridge")
    assert codes.get("foxglove_bridge") == 0 and "Callback failed" not in log, (codes, log[-2000:])
    print(f"through the bridge in {elapsed:.1f} s: {len(client.payloads(2))} wrist frames, {in_window} actions; "
          f"advertised: {len(client.channels)} topics: {sorted(client.channels)}")  # fmt: skip
    factory = DecoderFactory()

    def decoder(topic: str) -> Any:
        c = client.channels[topic]
        schema = Schema(id=c["id"], name=c["schemaName"], encoding=c["schemaEncoding"], data=c["schema"].encode())
        return factory.decoder_for(c["encoding"], schema)  # (the factory keeps a decoder per schema id)

    actions = [decoder(Topics.ACTION)(p) for p in client.payloads(1)]
    from libero_workcell.ros_msgs import source_and_turn

    assert len(actions) >= 40 and all(source_and_turn(a.header.frame_id)[0] == SOURCE_EXPERT and len(a.position) == 7
                                      for a in actions)  # fmt: skip
    assert all(abs(v) <= 1 for a in actions for v in a.position)
    times = [t for s, t, _ in client.frames if s == 1]
    assert times == sorted(times) and 0 < times[-1] < 3600 * 10**9  # sim time, not UNIX time
    frames = [decoder(Topics.image("wrist"))(p) for p in client.payloads(2)]
    assert 1 <= len(frames) <= foxglove_node.IMAGE_HZ * elapsed + 2, (len(frames), elapsed)
    assert all((f.height, f.width, f.encoding, len(f.data)) == (256, 256, "rgb8", 256 * 256 * 3) for f in frames)
    (episode, *_) = [decoder(Topics.SIM_EPISODE)(p) for p in client.payloads(3)]
    assert json.loads(episode.data)["episode"] >= 1
