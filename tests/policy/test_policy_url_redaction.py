"""The policy server's URL is published without its credentials (issue 35, item 13).

``policy.url: ws://user:pw@host`` reached the policy node's diagnostics as it is (``url``, and the last error
naming the server it could not reach), and through them the session's MCAP log.
"""

from __future__ import annotations

import socket
import time

import pytest

from libero_workcell.cell_file import REDACTED
from libero_workcell.loopback import LOOPBACK
from policy_node.clients.openpi_ws.client import TimedPolicyClient
from policy_node.protocol import PolicyServerError

WAIT = 20.0  # s: generous; every wait ends as soon as its condition holds


def closed_port() -> int:
    """A port on 127.0.0.1 nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return int(s.getsockname()[1])


def test_the_clients_connection_error_names_the_server_without_its_credentials() -> None:
    port = closed_port()
    with pytest.raises(PolicyServerError) as refused:
        TimedPolicyClient(f"ws://operator:hunter2@{LOOPBACK}:{port}", timeout=WAIT)
    text = str(refused.value)
    assert text.startswith(f"cannot connect to the policy server at ws://{REDACTED}@{LOOPBACK}:{port}: ")
    assert "hunter2" not in text and "operator" not in text


@pytest.mark.ros
def test_the_policy_nodes_diagnostics_name_the_server_without_its_credentials() -> None:
    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor

    from libero_workcell.contract import Qos, Topics
    from libero_workcell.ros_qos import qos
    from policy_node.node import PolicyNode

    port = closed_port()
    rclpy.init(args=["--ros-args", "-p", f"policy.url:=ws://operator:hunter2@{LOOPBACK}:{port}",
                     "-p", "policy.reconnect_period:=0.2"])  # fmt: skip
    node = PolicyNode()
    probe = rclpy.create_node("diagnostics_probe")
    seen: list[dict[str, str]] = []

    def on_diag(msg: DiagnosticArray) -> None:
        seen.extend({"message": st.message, **{kv.key: kv.value for kv in st.values}} for st in msg.status
                    if st.name == "policy_node")  # fmt: skip

    probe.create_subscription(DiagnosticArray, Topics.DIAGNOSTICS, on_diag, qos(Qos.DIAGNOSTICS))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    executor.add_node(probe)
    try:
        end = time.monotonic() + WAIT
        while time.monotonic() < end and not any("cannot connect" in d["message"] for d in seen):
            executor.spin_once(timeout_sec=0.05)
    finally:
        node.shutdown()
        executor.shutdown()
        node.destroy_node()
        probe.destroy_node()
        rclpy.try_shutdown()
    failed = [d for d in seen if "cannot connect" in d["message"]]
    assert failed, seen
    assert failed[-1]["url"] == f"ws://{REDACTED}@{LOOPBACK}:{port}"
    assert f"the policy server at ws://{REDACTED}@{LOOPBACK}:{port}: " in failed[-1]["message"]
    assert not [d for d in seen if "hunter2" in repr(d) or "operator" in repr(d)], seen


@pytest.mark.parametrize("url", [f"ws://operator:hunter2@{LOOPBACK}:{{port}}", "ftp://operator:hunter2@host:1",
                                 "ws://operator:hunter2@"])  # fmt: skip
def test_workcell_checks_report_names_the_server_without_its_credentials(url: str) -> None:
    """`workcell check` prints its report: the server it could not reach, a scheme it has no client for, a URL
    naming no server, each without the user information."""
    from libero_workcell.preflight import Context
    from policy_node.preflight import check

    url = url.format(port=closed_port())
    report = check("policy_node", {"policy.url": url, "policy.timeout": 0.5}, Context())
    text = " ".join(f"{c.what} {c.detail}" for c in report)
    assert report and "hunter2" not in text and "operator" not in text and REDACTED in text, text
