"""Issue 21's policy-server defects, reproduced with crafted frames on a real websocket on 127.0.0.1.

openpi-client's ``msgpack_numpy.unpackb`` built whatever array a reply declared: an object dtype made numpy read
the reply's bytes as pointers (SIGSEGV), a zero-itemsize dtype let an empty buffer declare (1e9, 7) (MemoryError
in validation, which ended the client thread for good while diagnostics still said connected), a metadata frame
that was not msgpack raised outside every handler, and replies had no size bound. Each is refused here with the
reason; the client thread reports it, reconnects and recovers when the server is good again.
"""

from __future__ import annotations

import re
import socket
import threading
import time

import numpy as np
import pytest
from conftest import wait_for
from crafted_policy_server import (
    CLOSE,
    GOOD_METADATA,
    SILENT,
    CraftedPolicyServer,
    array_map,
    crafted_reply,
    good_reply,
    packed,
)

from libero_workcell.faults import classify
from policy_node.clients.openpi_ws.client import TimedPolicyClient
from policy_node.config import PolicyConfig, PolicyConfigError
from policy_node.observation import Snapshot
from policy_node.protocol import (
    BACKOFF_MAX_PERIODS,
    MAX_CHUNK_ACTIONS,
    MalformedReply,
    PolicyServerError,
    ServerMetadataError,
    reconnect_delay,
)
from policy_node.runner import PolicyRunner, StepRecord

STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
IMG = np.zeros((256, 256, 3), np.uint8)
OBS = {"observation/image": np.zeros((224, 224, 3), np.uint8), "observation/wrist_image": np.zeros((224, 224, 3),
       np.uint8), "observation/state": STATE.astype(np.float32), "prompt": "pick up the parts"}  # fmt: skip
TASK = "pick up the parts"
WAIT = 10.0  # s: generous; every wait below ends as soon as its condition holds

# (the reply's actions, the reason it is refused): each declares an array openpi's unpackb would build as told
CRAFTED = {
    "object dtype": (array_map(b"\0" * 56, "|O", [1, 7]), "dtype '\\|O' is not numeric"),
    "zero itemsize (1e9, 7)": (array_map(b"", "|V0", [10**9, 7]), "dtype '\\|V0' is not numeric"),
    "float (1e9, 7), no data": (array_map(b"", "<f8", [10**9, 7]), "has 7000000000 elements \\(at most 8192\\)"),
    "data shorter than its shape": (array_map(b"\0" * 55, "<f8", [1, 7]), "55 bytes; shape \\(1, 7\\) of <f8 needs 56"),
    "five dimensions": (array_map(b"\0" * 56, "<f8", [1, 1, 1, 1, 7]), "has 5 dimensions \\(at most 4\\)"),
    "unicode dtype": (array_map(b"\0" * 112, "<U4", [1, 7]), "dtype '<U4' is not numeric"),
    "datetime dtype": (array_map(b"\0" * 56, "<M8[ns]", [1, 7]), "dtype '<M8\\[ns\\]' is not numeric"),
    "structured dtype": (array_map(b"\0" * 56, [["a", "<f8"]], [1, 7]), "is not numeric"),
    "negative shape": (array_map(b"", "<f8", [-1, 7]), "is not a list of non-negative integers"),
}


def snap() -> Snapshot:
    now = time.time()
    return Snapshot(STATE, now, IMG, now, IMG, now)


@pytest.fixture
def server():
    with CraftedPolicyServer() as srv:
        yield srv


def test_a_good_crafted_server_serves_a_chunk(server) -> None:
    """The helper itself: openpi's frames through it make a valid chunk (the baseline every refusal departs from)."""
    client = TimedPolicyClient(server.url, timeout=WAIT)
    assert client.get_server_metadata() == {"policy": "crafted"}
    reply = client.infer_reply(OBS)
    assert reply.actions.shape == (10, 7) and reply.server_infer_ms == 1.5 and server.requests == 1
    client.close()


@pytest.mark.parametrize("actions, reason", CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_array_is_refused_before_numpy_builds_it(server, actions, reason) -> None:
    server.reply = crafted_reply(actions)
    client = TimedPolicyClient(server.url, timeout=WAIT)
    with pytest.raises(MalformedReply, match="the reply is not openpi's msgpack-numpy: .*" + reason):
        client.infer_reply(OBS)
    assert not client.is_open  # what follows a refused frame on the stream is in doubt: reconnect


@pytest.mark.parametrize(
    "frame, reason",
    [(b"\xc1not msgpack", "not openpi's msgpack-numpy: not msgpack"), (packed([1, 2]), "is a list, not a map"),
     ("a" * 300, "first frame is text, not its metadata: " + "a" * 200 + "$"),
     (packed({"a": 1}) + b"\x00", "not msgpack: ExtraData"), ("a text frame", "first frame is text"),
     (b"\xd4\x05\x00", "extension type 5")],
)  # fmt: skip
def test_metadata_that_is_not_openpis_is_an_error_not_an_escape(server, frame, reason) -> None:
    server.metadata = frame
    with pytest.raises(ServerMetadataError, match=reason) as refused:
        TimedPolicyClient(server.url, timeout=WAIT)
    assert classify(f"no policy server: {refused.value}").code == "POLICY-PROTOCOL"


def test_a_reply_over_max_reply_bytes_is_refused_unread_and_closes(server) -> None:
    server.reply = b"\x00" * (1 << 20)
    client = TimedPolicyClient(server.url, timeout=WAIT, max_reply_bytes=65536)
    with pytest.raises(MalformedReply, match=re.escape("the reply exceeds policy.max_reply_bytes (65536 bytes): "
                                                       "refused unread, the connection closed")):  # fmt: skip
        client.infer_reply(OBS)
    assert not client.is_open
    server.metadata = packed({"pad": b"\x00" * 70000})  # the metadata is bounded the same way
    with pytest.raises(ServerMetadataError, match=re.escape("metadata exceeds policy.max_reply_bytes")):
        TimedPolicyClient(server.url, timeout=WAIT, max_reply_bytes=65536)
    server.metadata = GOOD_METADATA
    server.reply = good_reply(50)  # a pi0 chunk is far below the default bound
    assert TimedPolicyClient(server.url, timeout=WAIT).infer_reply(OBS).actions.shape == (50, 7)


def test_the_bound_is_the_bound_down_to_one_byte(server) -> None:
    with pytest.raises(ServerMetadataError, match=re.escape("the server's metadata exceeds policy.max_reply_bytes "
                                                            "(1 bytes): refused unread")):  # fmt: skip
        TimedPolicyClient(server.url, timeout=WAIT, max_reply_bytes=1)  # a bound, not a refused setting


def test_a_server_that_closes_is_a_lost_server_not_an_oversized_frame(server) -> None:
    server.reply = CLOSE
    client = TimedPolicyClient(server.url, timeout=WAIT)
    with pytest.raises(PolicyServerError, match=r"the server closed the connection \(") as caught:
        client.infer_reply(OBS)
    assert not isinstance(caught.value, MalformedReply)
    server.metadata = CLOSE
    with pytest.raises(PolicyServerError, match=f"cannot connect to the policy server at {server.url}") as caught:
        TimedPolicyClient(server.url, timeout=WAIT)
    assert not isinstance(caught.value, ServerMetadataError)


def raised_within(call, seconds: float = 30.0) -> BaseException | None:
    """What ``call()`` raised, run on a thread the test waits for at most ``seconds`` (a hang fails the test
    instead of the suite)."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as exc:
            out.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"still waiting after {seconds} s: a deadline is missing"
    return out[0]


def test_a_server_that_never_answers_the_handshake_or_never_sends_metadata_is_a_timeout(server) -> None:
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts the TCP connection, never answers the upgrade
        url = f"ws://127.0.0.1:{mute.getsockname()[1]}"
        exc = raised_within(lambda: TimedPolicyClient(url, timeout=0.2))
    assert isinstance(exc, PolicyServerError) and "cannot connect" in str(exc)
    server.metadata = SILENT
    exc = raised_within(lambda: TimedPolicyClient(server.url, timeout=0.2))
    assert isinstance(exc, PolicyServerError) and "cannot connect" in str(exc)


def test_the_api_key_goes_as_openpis_authorization_header(server) -> None:
    TimedPolicyClient(server.url, timeout=WAIT, api_key="s3cret").close()
    TimedPolicyClient(server.url, timeout=WAIT).close()
    assert server.headers[0]["Authorization"] == "Api-Key s3cret" and "Authorization" not in server.headers[1]


@pytest.mark.parametrize(
    "reply, error, reason",
    [("", PolicyServerError, "the server failed: (empty traceback)"),
     ("Traceback ...\nRuntimeError: boom\n", PolicyServerError, "the server failed: RuntimeError: boom"),
     (packed([1, 2]), MalformedReply, "the reply is a list, not a dict")],
)  # fmt: skip
def test_a_reply_that_is_no_reply_map_says_what_it_was(server, reply, error, reason) -> None:
    server.reply = reply
    with pytest.raises(error, match=re.escape(reason) + "$"):
        TimedPolicyClient(server.url, timeout=WAIT).infer_reply(OBS)


# issue 35, item 13: actions as plain msgpack lists, not arrays (300,000 were accepted after 5-8 s of CPU), and
# chunks longer than any policy plans
LONG = {
    "300,000 actions as lists": (crafted_reply([[0] * 7] * 300_000), MalformedReply,
                                 "the reply is not openpi's msgpack-numpy: a list or map declares more than 16384 "
                                 "values"),
    "2,400 actions as lists": (crafted_reply([[0.0] * 7] * 2400), MalformedReply,
                               "the reply is not openpi's msgpack-numpy: the frame holds more than 16384 values"),
    "1,025 actions as an array": (packed({"actions": np.zeros((MAX_CHUNK_ACTIONS + 1, 7))}), MalformedReply,
                                  f"a chunk of {MAX_CHUNK_ACTIONS + 1} actions (at most {MAX_CHUNK_ACTIONS})"),
    "1,025 actions as lists": (crafted_reply([[0.0] * 7] * (MAX_CHUNK_ACTIONS + 1)), MalformedReply,
                               f"a chunk of {MAX_CHUNK_ACTIONS + 1} actions (at most {MAX_CHUNK_ACTIONS})"),
}  # fmt: skip


@pytest.mark.parametrize("reply, error, reason", LONG.values(), ids=LONG.keys())
def test_a_reply_of_too_many_actions_is_refused_however_it_is_encoded(server, reply, error, reason) -> None:
    assert len(reply) < 4 * 1024 * 1024  # within the default max_reply_bytes: that bound alone let it in
    server.reply = reply
    client = TimedPolicyClient(server.url, timeout=WAIT)
    with pytest.raises(error, match="^" + re.escape(reason)):
        client.infer_reply(OBS)
    server.reply = crafted_reply([[0.5] * 7] * MAX_CHUNK_ACTIONS)  # the longest chunk there is, as lists
    if client.is_open:  # a refused frame closes the connection; a refused chunk leaves it open
        assert client.infer_reply(OBS).actions.shape == (MAX_CHUNK_ACTIONS, 7)
    assert TimedPolicyClient(server.url, timeout=WAIT).infer_reply(OBS).actions.shape == (MAX_CHUNK_ACTIONS, 7)


def test_a_broken_socket_is_a_lost_connection_and_closes(server) -> None:
    client = TimedPolicyClient(server.url, timeout=WAIT)

    def broken(_data: bytes) -> None:
        raise OSError("broken pipe")

    client._ws.send = broken
    with pytest.raises(PolicyServerError, match=r"^connection lost: broken pipe$"):
        client.infer_reply(OBS)
    assert not client.is_open


def test_the_round_trip_is_the_time_the_call_took(server) -> None:
    client = TimedPolicyClient(server.url, timeout=WAIT)
    t0 = time.perf_counter()
    reply = client.infer_reply(OBS)
    outer_ms = (time.perf_counter() - t0) * 1e3
    assert 0 < reply.round_trip_ms <= outer_ms  # measured inside the call, in ms (one run, no threshold)
    client.close()


def test_max_reply_bytes_is_a_policy_parameter_with_a_sane_floor() -> None:
    assert PolicyConfig().max_reply_bytes == 4 * 1024 * 1024
    assert "max_reply_bytes" in PolicyConfig.parameter_defaults()
    for bad in (1023, 0, 2.5, True):
        with pytest.raises(PolicyConfigError, match="max_reply_bytes must be an integer >= 1024"):
            PolicyConfig(max_reply_bytes=bad)
    with pytest.raises(ValueError, match="max_reply_bytes must be > 0"):
        TimedPolicyClient("ws://127.0.0.1:9", timeout=1.0, max_reply_bytes=0)


def test_the_reconnect_backoff_doubles_per_fault_up_to_its_cap() -> None:
    assert [reconnect_delay(0.5, n) for n in range(6)] == [0.0, 0.5, 1.0, 2.0, 4.0, 4.0]
    assert reconnect_delay(0.1, 100) == pytest.approx(0.1 * BACKOFF_MAX_PERIODS) and BACKOFF_MAX_PERIODS == 8


# ---------------------------------------------------------------------- the client thread (PolicyRunner's worker)
# s: short, so the backoff a run of faults builds (up to BACKOFF_MAX_PERIODS periods) is not what the tests wait on;
# no wait below depends on its length
RECONNECT = 0.01


def runner_for(url: str, **kw) -> PolicyRunner:
    config = PolicyConfig(url=url, start_wait_steps=0, mode="sync", reconnect_period=RECONNECT, timeout=WAIT, **kw)
    return PolicyRunner(config)


def step_until(runner: PolicyRunner, done, records: list[StepRecord]) -> bool:
    """Control steps (each a fresh observation) until ``done()``; the records kept."""
    return wait_for(lambda: records.append(runner.step(snap(), TASK)) or done(), timeout=WAIT, interval=0.01)


def test_every_fault_of_the_client_thread_is_reported_and_reconnected_and_a_good_server_recovers(server) -> None:
    """Non-msgpack metadata, an object-dtype reply, a zero-itemsize (1e9, 7) reply, an oversized reply: each
    leaves the thread alive, says connected False with the reason, holds the arm and reconnects; then the good
    server drives again."""
    server.metadata = b"\xc1\xc1"
    runner = runner_for(server.url, max_reply_bytes=4096)
    records: list[StepRecord] = []
    try:
        assert wait_for(lambda: runner.counters["connect_failures"] >= 2, WAIT)  # a loop, not one attempt
        assert not runner.connected and "metadata is not openpi's msgpack-numpy" in runner.last_error
        # what `workcell status` shows: the diagnostics' "no policy server: <last_error>" with its code
        assert classify(f"no policy server: {runner.last_error}").code == "POLICY-PROTOCOL"
        server.metadata = GOOD_METADATA
        for reply, reason, code in [
            (crafted_reply(CRAFTED["object dtype"][0]), "dtype '|O' is not numeric", "POLICY-PROTOCOL"),
            (crafted_reply(CRAFTED["zero itemsize (1e9, 7)"][0]), "dtype '|V0' is not numeric", "POLICY-PROTOCOL"),
            (b"\x00" * 5000, "exceeds policy.max_reply_bytes (4096 bytes)", "POLICY-TOO-BIG"),
        ]:
            server.reply = reply
            connections, refused = server.connections, runner.counters["malformed_replies"]
            assert step_until(runner, lambda r=refused: runner.counters["malformed_replies"] > r, records)
            assert reason in runner.last_error and runner._worker.is_alive()
            assert classify(f"no policy server: {runner.last_error}").code == code
            held = runner.step(snap(), TASK)
            assert held.action is None and reason in held.reason  # the arm holds, and the record says why
            assert wait_for(lambda c=connections: server.connections > c and runner.connected, WAIT)  # reconnected
        assert all(r.action is None for r in records)  # no action came from any crafted reply
        server.reply = good_reply(value=0.2)
        assert step_until(runner, lambda: records[-1].action is not None, records)
        np.testing.assert_array_equal(records[-1].action, [0.2] * 6 + [-1.0])
        assert records[-1].reason == "" and runner.counters["client_faults"] == 0
    finally:
        runner.close()


class _BrokenClient(TimedPolicyClient):
    """A client with a bug: its first inference raises what no handler expects."""

    failures = 1

    def infer_reply(self, obs):
        if _BrokenClient.failures > 0:
            _BrokenClient.failures -= 1
            raise MemoryError("a bug in the client")
        return super().infer_reply(obs)


def test_an_unexpected_exception_in_the_client_thread_is_caught_reported_and_reconnected(server) -> None:
    """The catch-all at the thread's top: the request it was answering is answered with the error (the loop
    never waits for it), the connection is dropped, the thread reconnects and the policy drives again."""
    _BrokenClient.failures = 1
    connects: list[str] = []

    def connect(url: str, timeout: float, **kw) -> TimedPolicyClient:
        connects.append(url)
        if len(connects) == 1:
            raise RuntimeError("a bug while connecting")  # not a PolicyServerError: the catch-all's
        return _BrokenClient(url, timeout, **kw)

    runner = PolicyRunner(PolicyConfig(url=server.url, start_wait_steps=0, mode="sync", reconnect_period=RECONNECT),
                          connect=connect)  # fmt: skip
    records: list[StepRecord] = []
    try:
        assert step_until(runner, lambda: runner.counters["client_faults"] >= 2, records)
        assert "the policy client failed: MemoryError: a bug in the client" in runner.last_error
        assert classify(f"no policy server: {runner.last_error}").code == "POLICY-CLIENT"
        assert runner._worker.is_alive() and runner.counters["server_errors"] == 0  # counted once, as the client's
        assert step_until(runner, lambda: records[-1].action is not None, records)
        held = [r for r in records if r.action is None]
        assert any("MemoryError" in r.reason for r in held) and len(connects) >= 3
    finally:
        runner.close()


def test_a_refused_server_is_retried_every_period_without_backoff() -> None:
    """A server that is away (refused) costs nothing to retry: the backoff is for servers that answer badly."""
    with CraftedPolicyServer() as srv:
        url = srv.url
    runner = runner_for(url)
    try:
        assert wait_for(lambda: runner.counters["connect_failures"] >= 3, WAIT)
        assert runner._faults == 0 and "cannot connect" in runner.last_error and not runner.connected
    finally:
        runner.close()
