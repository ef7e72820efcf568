"""Loopback-only DDS: the env and profile, real cross-process pub/sub, socket addresses, domain isolation.

Sockets are attributed to processes through /proc/<pid>/fd -> socket inodes
-> /proc/net/{udp,udp6,tcp,tcp6}; no root or ss needed. What ss shows for
two talking processes (Fast DDS 3.2.3, domain D, participant index i):
127.0.0.1:7400+250D+10+2i (discovery), :...+11+2i (user data), one
ephemeral 127.0.0.1 send socket and 127.0.0.1:7000+i (a second metatraffic
receiver created in RTPSParticipantImpl::setup_meta_traffic; its port does
not depend on the domain). Nothing on 0.0.0.0, nothing on IPv6, no multicast.
"""

from __future__ import annotations

import os
import queue
import re
import socket
import struct
import subprocess
import sys
import textwrap
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import TEST_OUTPUT, wait_for

from libero_workcell import dds

# --------------------------------------------------------------------------
# The environment and the profile
# --------------------------------------------------------------------------


def test_this_run_uses_the_loopback_env():
    for key, value in dds.loopback_vars(int(os.environ["ROS_DOMAIN_ID"])).items():
        assert os.environ[key] == value
    assert dds.DOMAIN_ID_MIN <= int(os.environ["ROS_DOMAIN_ID"]) <= dds.DOMAIN_ID_MAX
    assert not set(dds.CONFLICTING_VARS) & set(os.environ)


def test_loopback_env_contents():
    base = {"PATH": "/bin", "ROS_LOCALHOST_ONLY": "1", "ROS_STATIC_PEERS": "10.0.0.9", "ROS_DOMAIN_ID": "0"}
    env = dds.loopback_env(domain_id=17, base=base)
    assert env == {
        "PATH": "/bin",
        "RMW_IMPLEMENTATION": "rmw_fastrtps_cpp",
        "FASTDDS_DEFAULT_PROFILES_FILE": str(dds.profile_path()),
        "ROS_DOMAIN_ID": "17",
        "ROS_AUTOMATIC_DISCOVERY_RANGE": "SYSTEM_DEFAULT",
    }
    assert dds.loopback_env(base=base)["ROS_DOMAIN_ID"] == str(dds.per_run_domain_id())  # not the inherited 0
    assert {dds.per_run_domain_id(pid) for pid in range(1000)} == set(range(1, 101))
    with pytest.raises(ValueError):
        dds.loopback_env(domain_id=233)
    assert dds.inherited_domain_id({"ROS_DOMAIN_ID": "5"}) == 5
    assert dds.inherited_domain_id({}) is None
    with pytest.raises(ValueError):
        dds.inherited_domain_id({"ROS_DOMAIN_ID": "five"})


def test_joining_another_domain_later_is_quiet_and_changing_process_wide_settings_warns(monkeypatch) -> None:
    """After rclpy is imported, a new context still takes a new domain id (the operator CLI joins graphs one after
    another); the RMW, the profile and the conflicting variables are the process's once: changing them warns."""
    import warnings

    import rclpy  # noqa: F401  (imported: the situation the warning is about)

    for key in (*dds.loopback_vars(int(os.environ["ROS_DOMAIN_ID"])), *dds.CONFLICTING_VARS):  # restored after
        monkeypatch.setenv(key, os.environ.get(key, "")) if key in os.environ else monkeypatch.delenv(key, False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dds.apply_loopback_env(7)["ROS_DOMAIN_ID"] == "7" and os.environ["ROS_DOMAIN_ID"] == "7"
    monkeypatch.setenv("ROS_STATIC_PEERS", "10.0.0.9")
    with pytest.warns(RuntimeWarning, match=r"changes \['ROS_STATIC_PEERS'\]"):
        dds.apply_loopback_env(8)
    assert "ROS_STATIC_PEERS" not in os.environ  # dropped all the same
    monkeypatch.setenv("FASTDDS_DEFAULT_PROFILES_FILE", "/elsewhere.xml")
    with pytest.warns(RuntimeWarning, match="FASTDDS_DEFAULT_PROFILES_FILE"):
        dds.apply_loopback_env(8)
    assert os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] == str(dds.profile_path())


def test_profile_is_loopback_only():
    path = dds.profile_path()
    assert path.is_file() and path.parent.name == "resources"
    ns = {"d": "http://www.eprosima.com"}
    root = ET.parse(path).getroot()
    transports = root.findall(".//d:transport_descriptor", ns)
    assert [t.findtext("d:type", namespaces=ns) for t in transports] == ["UDPv4"]
    assert [a.text for a in transports[0].findall("d:interfaceWhiteList/d:address", ns)] == ["127.0.0.1"]
    participant = root.find(".//d:participant[@is_default_profile='true']", ns)
    rtps = participant.find("d:rtps", ns)
    assert rtps.findtext("d:useBuiltinTransports", namespaces=ns) == "false"
    assert rtps.findtext("d:userTransports/d:transport_id", namespaces=ns) == transports[0].findtext(
        "d:transport_id", namespaces=ns)
    for where in ("d:builtin/d:metatrafficUnicastLocatorList", "d:builtin/d:initialPeersList",
                  "d:defaultUnicastLocatorList"):
        addresses = [a.text for a in rtps.findall(f"{where}/d:locator/d:udpv4/d:address", ns)]
        assert addresses == ["127.0.0.1"], where
    assert rtps.find("d:builtin/d:metatrafficMulticastLocatorList", ns) is None
    assert rtps.find("d:defaultMulticastLocatorList", ns) is None


def test_qos_mapping():
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, ReliabilityPolicy

    from libero_workcell.contract import Qos, QosSpec
    from libero_workcell.ros_qos import qos

    sensor = qos(Qos.SENSOR)
    assert (sensor.reliability, sensor.durability, sensor.history, sensor.depth) == (
        ReliabilityPolicy.BEST_EFFORT, DurabilityPolicy.VOLATILE, HistoryPolicy.KEEP_LAST, Qos.SENSOR.depth)
    latched = qos(Qos.LATCHED)
    assert (latched.reliability, latched.durability, latched.depth) == (
        ReliabilityPolicy.RELIABLE, DurabilityPolicy.TRANSIENT_LOCAL, 1)
    assert qos(Qos.COMMAND) is not qos(Qos.COMMAND)  # fresh objects: callers may modify them
    with pytest.raises(ValueError):
        qos(QosSpec(reliable=True, depth=0))


# --------------------------------------------------------------------------
# Two processes talking, and their sockets
# --------------------------------------------------------------------------
TALKER = textwrap.dedent(
    """
    import sys, threading, rclpy
    from std_msgs.msg import String
    rclpy.init()
    node = rclpy.create_node("loopback_talker")
    pub = node.create_publisher(String, sys.argv[1], 10)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    print("TALKING", flush=True)
    count = 0
    while not done.wait(0.05):
        count += 1
        pub.publish(String(data=f"hello {count}"))
    node.destroy_node()
    rclpy.shutdown()
    """
)

LISTENER = textwrap.dedent(
    """
    import sys, threading, rclpy
    from std_msgs.msg import String
    rclpy.init()
    node = rclpy.create_node("loopback_listener")
    got = []
    def on_msg(msg):
        if not got:
            print("RECEIVED", msg.data, flush=True)
        got.append(msg.data)
    node.create_subscription(String, sys.argv[1], on_msg, 10)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    while not done.is_set():
        rclpy.spin_once(node, timeout_sec=0.05)
    node.destroy_node()
    rclpy.shutdown()
    """
)


class Script:
    """A ``python -c`` child whose stdout lines arrive on a queue; closing stdin ends it."""

    def __init__(self, source: str, args: list[str], env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-c", source, *args], env=env, text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: queue.Queue[str] = queue.Queue()
        self.output: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.output.append(line.rstrip())
            self.lines.put(line.rstrip())

    def expect(self, prefix: str, timeout: float) -> str | None:
        """The first line starting with ``prefix`` within ``timeout`` s, else None."""
        try:
            while True:
                line = self.lines.get(timeout=timeout)
                if line.startswith(prefix):
                    return line
        except queue.Empty:
            return None

    def finish(self, timeout: float = 15.0) -> int:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def _decode(address: str, v6: bool) -> tuple[str, int]:
    host, port = address.split(":")
    raw = bytes.fromhex(host)
    if v6:
        raw = b"".join(struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, 16, 4))
        return socket.inet_ntop(socket.AF_INET6, raw), int(port, 16)
    return socket.inet_ntoa(struct.pack("<I", int(host, 16))), int(port, 16)


def inet_sockets(pid: int) -> list[tuple[str, str, int]]:
    """(protocol, local address, local port) of every IP socket that process ``pid`` holds."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if m := re.fullmatch(r"socket:\[(\d+)\]", target):
            inodes.add(m.group(1))
    found = []
    for proto in ("udp", "udp6", "tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{proto}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                found.append((proto, *_decode(fields[1], proto.endswith("6"))))
    return sorted(found)


def _record(name: str, text: str) -> None:
    out = TEST_OUTPUT / name
    out.mkdir(exist_ok=True)
    (out / "sockets.txt").write_text(text)


@pytest.mark.ros
def test_two_processes_talk_over_loopback_only(ros_env):
    topic = "/loopback_check"
    listener = Script(LISTENER, [topic], ros_env)
    talker = Script(TALKER, [topic], ros_env)
    try:
        received = listener.expect("RECEIVED", timeout=30)
        assert received, "no message crossed processes:\n" + "\n".join(listener.output + talker.output)
        report = []
        for who, script in (("listener", listener), ("talker", talker)):
            sockets = inet_sockets(script.proc.pid)
            report.append(f"{who} pid {script.proc.pid}: {sockets}")
            assert len(sockets) >= 3, sockets  # discovery, user data, send
            assert all(proto in ("udp", "tcp") for proto, _, _ in sockets), f"IPv6 socket: {sockets}"
            assert all(addr == "127.0.0.1" for _, addr, _ in sockets), f"{who} has a non-loopback socket: {sockets}"
        ss = subprocess.run(["ss", "-tunap"], capture_output=True, text=True).stdout if _has_ss() else "(no ss)"
        _record("test_two_processes_talk_over_loopback_only", "\n".join(report) + "\n\nss -tunap:\n" + ss)
    finally:
        assert listener.finish() == 0, "\n".join(listener.output)
        assert talker.finish() == 0, "\n".join(talker.output)


def _has_ss() -> bool:
    return any((Path(d) / "ss").is_file() for d in os.environ.get("PATH", "").split(os.pathsep))


@pytest.mark.ros
def test_probe_node_hears_a_process_on_its_domain_only(ros_env, rclpy_node):
    """The in-process fixture node hears a talker on this run's domain, and not one on another domain."""
    from std_msgs.msg import String

    own_sockets = inet_sockets(os.getpid())
    assert own_sockets and all(addr == "127.0.0.1" for _, addr, _ in own_sockets), own_sockets

    heard: dict[str, list[str]] = {"/same_domain": [], "/other_domain": []}
    for topic, box in heard.items():
        rclpy_node.create_subscription(String, topic, lambda m, box=box: box.append(m.data), 10)

    domain = int(ros_env["ROS_DOMAIN_ID"])
    other = dds.DOMAIN_ID_MIN + (domain - dds.DOMAIN_ID_MIN + 1) % (dds.DOMAIN_ID_MAX - dds.DOMAIN_ID_MIN + 1)
    outsider = Script(TALKER, ["/other_domain"], dds.loopback_env(other, base=ros_env))
    insider = Script(TALKER, ["/same_domain"], ros_env)
    try:
        assert outsider.expect("TALKING", 30) and insider.expect("TALKING", 30)
        assert wait_for(lambda: heard["/same_domain"], 30), "\n".join(insider.output)
        # the outsider started first and publishes every 0.05 s: leaked, it would be heard as soon as the insider,
        # and certainly within three of the profile's 0.5 s discovery announcements after that
        assert not wait_for(lambda: heard["/other_domain"], 1.5), f"domain {other} leaked into domain {domain}"
    finally:
        assert insider.finish() == 0 and outsider.finish() == 0


def test_a_claimed_domain_is_nobody_elses_until_released_or_its_process_dies(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(dds, "claims_dir", lambda: tmp_path)
    first = dds.claim_domain(dds.DOMAIN_ID_MAX)
    second = dds.claim_domain(dds.DOMAIN_ID_MAX)  # held: the next id, wrapping round to the lowest
    assert (first.domain_id, second.domain_id) == (dds.DOMAIN_ID_MAX, dds.DOMAIN_ID_MIN)
    first.release()
    with dds.claim_domain(dds.DOMAIN_ID_MAX) as again:
        assert again.domain_id == dds.DOMAIN_ID_MAX
    second.release()
    # Another process's claim holds until that process is killed (the kernel drops its lock)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; h = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
         "fcntl.flock(h, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()", str(tmp_path / "5.lock")],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held"
        with dds.claim_domain(5) as taken:
            assert taken.domain_id == 6
    finally:
        holder.kill()
        holder.wait()
    with dds.claim_domain(5) as freed:
        assert freed.domain_id == 5
    held = [dds.claim_domain(1) for _ in range(dds.DOMAIN_ID_MAX - dds.DOMAIN_ID_MIN + 1)]
    with pytest.raises(RuntimeError, match="every DDS domain id"):
        dds.claim_domain()
    for claim in held:
        claim.release()


def test_a_held_domain_is_joined_only_by_the_processes_its_holder_handed_it_to(tmp_path) -> None:
    """A test run holds its domain and hands it to what it starts (conftest: a graph on the inherited domain joins
    it); any other process asking for that domain is refused, a stale hand-down too."""
    import subprocess
    import sys

    ask = "from libero_workcell import dds; c = dds.claim_exact({d}); print('joined' if c.token else '?')"
    with dds.claim_domain() as held:
        handed = {**os.environ, **held.delegated_env()}
        other = {k: v for k, v in os.environ.items() if k != dds.DELEGATED_VAR}
        stale = {**handed, dds.DELEGATED_VAR: f"{held.domain_id}:{'0' * 16}"}
        runs = [subprocess.run([sys.executable, "-c", ask.format(d=held.domain_id)], env=env, capture_output=True,
                               text=True, timeout=60) for env in (handed, other, stale)]  # fmt: skip
    assert runs[0].returncode == 0 and runs[0].stdout.strip() == "joined", runs[0].stderr
    for refused in runs[1:]:
        assert refused.returncode != 0 and "DomainHeldError" in refused.stderr, refused.stdout + refused.stderr
