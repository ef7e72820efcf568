"""The policy client seam (policy_node.protocol, policy_node.clients): the URL's scheme picks the client and its
observation adapter; a scheme no client speaks is refused naming the ones that exist; and a second protocol,
a toy one defined here, drives the runner end to end through the protocol alone (its own request, its own
faults, the same holds and reconnects as openpi's)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from conftest import wait_for

from policy_node import clients
from policy_node.clients import client_for, kind_for, local_url, scheme_of, schemes
from policy_node.config import PolicyConfig, PolicyConfigError
from policy_node.observation import Snapshot, state_vector
from policy_node.protocol import ClientKind, MalformedReply, PolicyClient, PolicyServerError, Reply, reply_from
from policy_node.runner import PolicyRunner, StepRecord

TOY = "toy"
TOY_URL = f"{TOY}://policy-host:9000"
STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
IMG = np.zeros((64, 64, 3), np.uint8)
ACTION = [0.2] * 6 + [-1.0]
SRC = Path(__file__).resolve().parents[2] / "src"


# ---------------------------------------------------------------------- the registry
def test_a_scheme_no_client_speaks_is_refused_naming_the_supported_ones() -> None:
    for url in ("grpc://gpu:8080", "http://gpu:8000", "gpu:8000", ""):
        with pytest.raises(ValueError, match="must be one of ws://, wss://"):
            kind_for(url)
        with pytest.raises(PolicyConfigError, match=r"url: .*must be one of ws://, wss://"):
            PolicyConfig(url=url)
    with pytest.raises(ValueError, match="names no server"):
        scheme_of("ws://")
    with pytest.raises(ValueError, match="must be one of ws://, wss://"):
        client_for("grpc://gpu:8080", timeout=0.5)  # refused before any connection is tried


def test_ws_and_wss_select_openpis_websocket_client_and_its_observation() -> None:
    from policy_node.clients.openpi_ws.adapter import openpi_observation
    from policy_node.clients.openpi_ws.client import TimedPolicyClient

    assert {"ws", "wss"} <= set(schemes())
    for url, health in (("ws://gpu:8000", "http://gpu:8000/healthz"), ("WSS://gpu:8443", "https://gpu:8443/healthz")):
        kind = kind_for(url)
        assert kind.name == "openpi websocket" and kind.connect is TimedPolicyClient
        assert kind.observation is openpi_observation and kind.health_url(url) == health
        assert PolicyConfig(url=url).url == url


def test_the_local_servers_url_is_one_the_registry_sends_to_openpi() -> None:
    from policy_node.serve import LocalPolicyServer

    assert local_url(8123) == "ws://127.0.0.1:8123" and kind_for(local_url(8123)).name == "openpi websocket"
    server = LocalPolicyServer(policy=None, port=8123)  # not started: only its address
    assert server.url == local_url(8123)


def test_choosing_a_protocol_loads_only_that_one() -> None:
    """Validating a URL and building the runner import no protocol's libraries; a URL of a scheme loads its own."""
    code = ("import sys\nfrom policy_node.config import PolicyConfig\nfrom policy_node.runner import PolicyRunner\n"
            "PolicyConfig(url='wss://gpu:8443')\n"
            "assert not [m for m in sys.modules if m.startswith(('openpi', 'websockets'))], sorted(sys.modules)\n"
            "from policy_node.clients import kind_for\nkind_for('ws://gpu:8000')\n"
            "assert 'policy_node.clients.openpi_ws.client' in sys.modules\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------- a second protocol, through the seam only
def toy_observation(snap: Snapshot, view: str, state_format: str, task: str, preference: str = "", *,
                    sim_clock_ns: int | None = None) -> dict[str, Any]:  # fmt: skip
    """The toy protocol's request: keys of its own, no images (it is not openpi's)."""
    return {"joints": state_vector(snap.state7, state_format).tolist(), "instruction": task, "view": view,
            "clock": sim_clock_ns}  # fmt: skip


class ToyClient:
    """A PolicyClient in a few lines: answers each request with a constant chunk, or with the fault it is told."""

    connections: ClassVar[list[ToyClient]] = []
    refuse_connect: ClassVar[int] = 0  # the next n connections fail
    fault: ClassVar[PolicyServerError | None] = None  # the next request's answer, then the connection is gone

    def __init__(self, url: str, timeout: float, *, max_reply_bytes: int = 0) -> None:
        if ToyClient.refuse_connect > 0:
            ToyClient.refuse_connect -= 1
            raise PolicyServerError(f"cannot connect to the toy server at {url}")
        self._url, self.timeout, self.open = url, timeout, True
        self.requests: list[Any] = []
        ToyClient.connections.append(self)

    @property
    def url(self) -> str:
        return self._url

    @property
    def metadata(self) -> dict[str, Any]:
        return {"policy": "toy", "horizon": 8}

    @property
    def is_open(self) -> bool:
        return self.open

    def infer_reply(self, obs: Any) -> Reply:
        self.requests.append(obs)
        if (fault := ToyClient.fault) is not None:
            ToyClient.fault = None
            self.open = False
            raise fault
        return reply_from(np.tile(ACTION, (8, 1)), round_trip_ms=1.0)

    def close(self) -> None:
        self.open = False


@pytest.fixture
def toy() -> Iterator[type[ToyClient]]:
    ToyClient.connections, ToyClient.refuse_connect, ToyClient.fault = [], 0, None
    clients.register((TOY,), lambda: ClientKind("toy", ToyClient, toy_observation))
    try:
        yield ToyClient
    finally:
        clients.unregister((TOY,))


def snap() -> Snapshot:
    now = time.time()
    return Snapshot(STATE, now, IMG, now, IMG, now)


def step_until(runner: PolicyRunner, done, records: list[StepRecord], timeout: float = 10.0) -> bool:
    return wait_for(lambda: records.append(runner.step(snap(), "sort the parts")) or done(), timeout, 0.005)


def test_a_second_protocol_registered_for_its_scheme_drives_the_runner_end_to_end(toy) -> None:
    """Config, connection, request, reply, a refused reply, a lost server and a refused connection: the runner
    meets the toy protocol only through PolicyClient and its adapter, and treats its faults as openpi's."""
    with pytest.raises(ValueError, match=f"must be one of {TOY}://, ws://, wss://"):  # the list is the registry's
        kind_for("grpc://gpu:8080")
    config = PolicyConfig(url=TOY_URL, start_wait_steps=0, mode="sync", reconnect_period=0.05, state_format="libero")
    runner = PolicyRunner(config)
    records: list[StepRecord] = []
    try:
        assert step_until(runner, lambda: records[-1].action is not None, records)
        (conn,) = toy.connections
        assert isinstance(conn, PolicyClient) and conn.url == TOY_URL and conn.timeout == config.timeout
        assert runner.metadata == {"policy": "toy", "horizon": 8} and runner.connected
        np.testing.assert_array_equal(records[-1].action, ACTION)
        request = conn.requests[0]  # the toy adapter's request, never openpi's keys
        assert set(request) == {"joints", "instruction", "view", "clock"} and request["instruction"] == "sort the parts"
        assert len(request["joints"]) == 8 and request["view"] == config.image_view and request["clock"] is None
        assert records[-1].round_trip_ms == 1.0

        toy.fault = MalformedReply("actions must be (H >= 1, 7), got shape (3,)")  # a refused reply: hold, reconnect
        assert step_until(runner, lambda: runner.counters["malformed_replies"] == 1, records)
        held = runner.step(snap(), "sort the parts")
        assert held.action is None and "got shape (3,)" in held.reason
        assert step_until(runner, lambda: records[-1].action is not None, records) and len(toy.connections) == 2

        toy.refuse_connect, toy.fault = 2, PolicyServerError("the toy server closed the connection")  # a lost server
        assert step_until(runner, lambda: "cannot connect to the toy server" in records[-1].reason, records)
        assert records[-1].kind == "server_lost" and runner.counters["server_errors"] == 1
        assert step_until(runner, lambda: records[-1].action is not None, records)
        assert runner.counters["connect_failures"] == 2 and runner.counters["connects"] == 3
    finally:
        runner.close()
    assert not any(c.is_open for c in toy.connections)  # every connection closed, the last by runner.close()


def test_a_second_protocol_in_sim_lockstep_gets_the_observations_sim_clock(toy) -> None:
    now = [12.5]
    runner = PolicyRunner(PolicyConfig(url=TOY_URL, start_wait_steps=0, mode="sync", latency="0"),
                          clock=lambda: now[0], sim=True)  # fmt: skip
    try:
        assert wait_for(lambda: runner.connected, 10.0)
        s = Snapshot(STATE, now[0], IMG, now[0], IMG, now[0])
        record = runner.step(s, "sort the parts")  # latency 0: the step waits for its own reply
        assert record.action is not None and toy.connections[0].requests[0]["clock"] == 12_500_000_000
    finally:
        runner.close()


def test_what_the_policy_is_shown_of_a_frame_is_its_protocols_own(toy) -> None:
    """The console shows what the policy is shown (policy_node.clients.frame_transform): the local server's
    protocol's per-frame transform, a protocol's own for its URL, and none for a protocol without one."""
    from policy_node.clients.openpi_ws.adapter import camera_input

    frame = np.random.default_rng(0).integers(0, 255, (120, 160, 3), np.uint8)
    for url in (None, "ws://gpu:8000"):
        shown = clients.frame_transform("libero", url)
        assert shown is not None
        np.testing.assert_array_equal(shown(frame), camera_input(frame, "libero"))
    assert clients.frame_transform("libero", TOY_URL) is None  # the toy's adapter does it all


def test_a_served_policy_reads_a_request_by_its_parts_not_the_wires_keys() -> None:
    """What a policy served by the local server reads (policy_node.served): the state, the sim clock, the
    committed actions of real-time chunking, from a request as openpi_observation makes it."""
    from policy_node.clients.openpi_ws.adapter import openpi_observation
    from policy_node.served import read_request

    now = snap()
    committed = np.tile(ACTION, (3, 1))
    wire = openpi_observation(now, "libero", "contract", "sort", sim_clock_ns=123, committed=committed)
    request = read_request(wire)
    np.testing.assert_array_equal(request.state, state_vector(STATE, "contract"))
    assert request.sim_clock_ns == 123 and request.prompt is not None and "sort" in request.prompt
    assert request.inference_delay == 3
    np.testing.assert_array_equal(request.committed, committed.astype(np.float32))
    plain = read_request(openpi_observation(now, "libero", "contract", "sort"))
    assert (plain.sim_clock_ns, plain.committed, plain.inference_delay) == (None, None, None)
    with pytest.raises(ValueError, match="no state"):
        read_request({k: v for k, v in wire.items() if "state" not in k})


def test_a_reply_is_a_validated_chunk_whatever_the_protocol() -> None:
    reply = reply_from([ACTION] * 3, 2.5, server_infer_ms=1.0)
    assert reply.actions.shape == (3, 7) and reply.actions.dtype == np.float64 and reply.server_infer_ms == 1.0
    for bad, reason in (([[0.0] * 6], "got shape"), ([[2.0] * 7], "action 0 of the chunk"), ("x", "not numeric")):
        with pytest.raises(MalformedReply, match=reason):
            reply_from(bad, 1.0)


def test_the_evaluation_refuses_a_policy_url_no_client_speaks_before_any_trial(tmp_path, capsys) -> None:
    from evaluation.__main__ import main

    assert main(["sim", "--out", str(tmp_path / "eval"), "--policy-url", "grpc://gpu:8080"]) == 2
    assert "--policy-url: no policy client for 'grpc://gpu:8080'" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()
