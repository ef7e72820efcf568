"""openpi-client against a real openpi-server on loopback: replies, deadlines, tracebacks, malformed chunks."""

from __future__ import annotations

import time

import numpy as np
import pytest

from libero_workcell.loopback import free_port
from policy_node.builtin_policies import FaultyPolicy, ReachPolicy
from policy_node.clients.openpi_ws.client import TimedPolicyClient
from policy_node.protocol import MalformedReply, PolicyClient, PolicyServerError
from policy_node.serve import LocalPolicyServer, healthy

TARGET = np.array([0.45, 0.0, 0.35])


def obs(state=(0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0)) -> dict:
    return {
        "observation/image": np.zeros((224, 224, 3), np.uint8),
        "observation/wrist_image": np.zeros((224, 224, 3), np.uint8),
        "observation/state": np.asarray(state, np.float32),
        "prompt": "pick up the parts",
    }


@pytest.fixture
def serve():
    servers = []

    def start(policy, **kw) -> LocalPolicyServer:
        servers.append(LocalPolicyServer(policy, **kw).start())
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


def test_a_reply_is_a_validated_chunk_with_the_servers_timing(serve) -> None:
    srv = serve(ReachPolicy(TARGET), metadata={"policy": "reach"})
    assert srv.host == "127.0.0.1" and healthy(srv.host, srv.port)  # openpi-server's GET /healthz
    client = TimedPolicyClient(srv.url, timeout=2.0)
    assert client.metadata == client.get_server_metadata() == {"policy": "reach"}  # the first frame
    assert isinstance(client, PolicyClient) and client.url == srv.url and client.is_open  # policy_node.protocol's
    first, second = client.infer_reply(obs()), client.infer_reply(obs())
    assert first.actions.shape == (10, 7) and first.actions.dtype == np.float64
    assert first.server_infer_ms is not None and first.policy_infer_ms is not None
    assert first.round_trip_ms >= first.server_infer_ms
    assert first.server_prev_total_ms is None and second.server_prev_total_ms is not None
    # the policy closes the loop through the state: toward the target from where the TCP is
    assert first.actions[0, 0] > 0 and first.actions[0, 1] < 0 and first.actions[0, 2] > 0
    away = client.infer_reply(obs((0.50, -0.05, 0.40, np.pi, 0.0, 0.0, 0.0)))
    assert away.actions[0, 0] < 0 and away.actions[0, 1] > 0 and away.actions[0, 2] < 0
    client.close()


def test_no_reply_within_the_timeout_is_an_error_and_the_connection_is_closed(serve) -> None:
    srv = serve(ReachPolicy(TARGET, delay_ms=400))
    client = TimedPolicyClient(srv.url, timeout=0.1)
    t0 = time.monotonic()
    with pytest.raises(PolicyServerError, match="no reply within 100 ms"):
        client.infer_reply(obs())
    assert time.monotonic() - t0 < 0.35  # the deadline, not the server's 400 ms
    assert not client.is_open  # a late reply must never answer the next request


def test_a_server_side_exception_arrives_as_its_traceback_and_closes(serve) -> None:
    srv = serve(FaultyPolicy(ReachPolicy(TARGET), "raise", after=1))
    client = TimedPolicyClient(srv.url, timeout=2.0)
    client.infer_reply(obs())
    with pytest.raises(PolicyServerError, match="the server failed: RuntimeError: the policy failed on purpose"):
        client.infer_reply(obs())
    assert not client.is_open


@pytest.mark.parametrize(
    "fault, reason",
    [("nan", "action 1 of the chunk: action has non-finite values in \\['dz'\\]"),
     ("shape", "actions must be \\(H >= 1, 7\\), got shape \\(10, 6\\)"), ("missing", "the reply has no 'actions'")],
)  # fmt: skip
def test_a_malformed_reply_is_refused_with_the_reason(serve, fault, reason) -> None:
    srv = serve(FaultyPolicy(ReachPolicy(TARGET), fault))
    client = TimedPolicyClient(srv.url, timeout=2.0)
    with pytest.raises(MalformedReply, match=reason):
        client.infer_reply(obs())
    client.close()


def test_an_observation_msgpack_cannot_carry_is_refused_before_sending(serve) -> None:
    srv = serve(ReachPolicy(TARGET))
    client = TimedPolicyClient(srv.url, timeout=2.0)
    bad = {**obs(), "observation/state": np.array([object()] * 7)}  # msgpack-numpy refuses object dtypes
    with pytest.raises(MalformedReply, match="cannot be sent"):
        client.infer_reply(bad)
    client.close()


def test_no_server_is_an_error_at_once_not_a_hang() -> None:
    port = free_port()
    t0 = time.monotonic()
    with pytest.raises(PolicyServerError, match=f"cannot connect to the policy server at ws://127.0.0.1:{port}"):
        TimedPolicyClient(f"ws://127.0.0.1:{port}", timeout=0.5)
    assert time.monotonic() - t0 < 2.0
    with pytest.raises(ValueError, match="timeout"):
        TimedPolicyClient(f"ws://127.0.0.1:{port}", timeout=0.0)
