"""Properties of the policy client against whatever a server sends (hypothesis; issue 21).

Whatever bytes or msgpack structures a policy server sends, on a real websocket on 127.0.0.1: the client thread
never raises out of its loop, only validated chunks ((H, 7), finite, within [-1, 1]) ever yield an action, and
a frame that is not one is reported (``last_error``, a counter) while the arm holds. The decoder alone is checked
on many more inputs: it returns or raises WireError, and every array it builds is within its limits.
"""

from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
from conftest import wait_for
from crafted_policy_server import (
    GOOD_METADATA,
    CraftedPolicyServer,
    array_map,
    crafted_reply,
    good_reply,
    packed,
    values_in,
)
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from libero_workcell.contract import ACTION_DIM
from policy_node.clients.openpi_ws.wire import (
    MAX_ELEMENTS,
    MAX_NDIM,
    MAX_VALUES,
    NUMERIC_KINDS,
    WireError,
    unpack_frame,
)
from policy_node.config import MIN_REPLY_BYTES, PolicyConfig
from policy_node.observation import Snapshot
from policy_node.protocol import MAX_CHUNK_ACTIONS, MAX_REPLY_BYTES_DEFAULT, MalformedReply, reply_from
from policy_node.runner import PolicyRunner, StepRecord

STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
IMG = np.zeros((256, 256, 3), np.uint8)
WAIT = 10.0
POLL = 0.002  # s: each example waits on the client thread a few times; a coarser poll only adds to each wait

DTYPES = ["|b1", "|i1", "<i2", "<i4", "<i8", "|u1", "<u4", "<f2", "<f4", "<f8", ">f8", "|O", "|V0", "|V8", "<U4",
          "|S8", "<M8[ns]", "<c16", "<f16"]  # fmt: skip
leaves = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.floats() | st.text(max_size=8) | \
    st.binary(max_size=16)  # fmt: skip
keys = st.text(max_size=8) | st.binary(max_size=8) | st.sampled_from([b"__ndarray__", b"__npgeneric__", b"data"])
# maps declaring an array or a scalar with any dtype, shape and data: what openpi's unpackb would build as told
declared_arrays = st.builds(
    array_map,
    st.binary(max_size=128) | st.integers(0, 4).map(lambda n: b"\0" * 8 * n),
    st.sampled_from(DTYPES) | st.text(max_size=6),
    st.lists(st.integers(-2, 10**10), max_size=6) | st.lists(st.integers(0, 8), max_size=5) | leaves,
)
declared_scalars = st.fixed_dictionaries({b"__npgeneric__": st.just(True), b"data": leaves,
                                          b"dtype": st.sampled_from(DTYPES) | st.text(max_size=4)})  # fmt: skip
structures = st.recursive(
    leaves | declared_arrays | declared_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=12,
)
chunks = hnp.arrays(st.sampled_from([np.float64, np.float32, np.float16]),
                    st.tuples(st.integers(0, 12), st.sampled_from([ACTION_DIM, ACTION_DIM, 6, 8])),
                    elements=st.floats(-1.5, 1.5, width=16) | st.just(float("nan")))  # fmt: skip
valid_chunks = hnp.arrays(st.sampled_from([np.float64, np.float32]), st.tuples(st.integers(1, 12), st.just(ACTION_DIM)),
                          elements=st.floats(-1.0, 1.0, width=32))  # fmt: skip


@st.composite
def frames(draw) -> bytes | str:
    """Anything a server could send as a reply."""
    kind = draw(st.sampled_from(["bytes", "structure", "reply", "chunk", "valid", "text", "oversized"]))
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "structure":
        return msgpack.packb(draw(structures))
    if kind == "reply":  # a reply-shaped map whose actions are anything
        return crafted_reply(draw(structures | declared_arrays))
    if kind == "chunk":  # openpi's own packing of a chunk, sometimes valid
        return packed({"actions": draw(chunks), "server_timing": {"infer_ms": 1.0}})
    if kind == "valid":
        return packed({"actions": draw(valid_chunks), "policy_timing": {"infer_ms": 1.0}})
    if kind == "text":
        return draw(st.text(max_size=40))
    return draw(st.binary(min_size=MIN_REPLY_BYTES + 1, max_size=3 * MIN_REPLY_BYTES))


def valid_chunk(frame: bytes | str) -> np.ndarray | None:
    """The chunk a frame carries if the contract accepts it and it is within the bound; None otherwise (read
    with the decoder, whose own properties are checked above)."""
    try:
        actions = np.asarray(unpack_frame(frame)["actions"], dtype=np.float64)
    except Exception:
        return None
    ok = actions.ndim == 2 and actions.shape[0] >= 1 and actions.shape[1] == ACTION_DIM
    ok = ok and len(frame) <= MIN_REPLY_BYTES and np.all(np.isfinite(actions)) and np.all(np.abs(actions) <= 1.0)
    return actions if ok else None


# ---------------------------------------------------------------------- the decoder alone
def _arrays(obj: object):
    if isinstance(obj, (np.ndarray, np.generic)):
        yield obj
    elif isinstance(obj, list):
        for x in obj:
            yield from _arrays(x)
    elif isinstance(obj, dict):
        for x in obj.values():
            yield from _arrays(x)


def _check_decoded(frame: bytes) -> None:
    try:
        decoded = unpack_frame(frame)
    except WireError:
        return
    for a in _arrays(decoded):
        assert a.dtype.kind in NUMERIC_KINDS and a.dtype.itemsize in (1, 2, 4, 8)
        assert a.ndim <= MAX_NDIM and a.size <= MAX_ELEMENTS


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_decode_or_are_a_wire_error(frame) -> None:
    _check_decoded(frame)


@settings(max_examples=100, deadline=None)
@given(structures)
def test_any_msgpack_structure_decodes_to_bounded_numeric_arrays_or_is_a_wire_error(obj) -> None:
    _check_decoded(msgpack.packb(obj))


SIZES = [0, 1, 50, 1024, 1025, 2048, 2400, 16384, 16385, 300_000]


@st.composite
def wide_frames(draw) -> bytes:
    """Replies within the default max_reply_bytes shaped as a hostile server could shape them: lists nested up to
    hundreds of thousands of values (issue 35: 300,000 actions as lists passed), maps, arrays among them; a third
    of them reply-shaped chunks of valid actions as plain lists, up to and past every bound."""
    if draw(st.integers(0, 2)) == 0:
        horizon, value = draw(st.sampled_from(SIZES[1:])), draw(st.floats(-1.0, 1.0, width=32))
        return msgpack.packb({"actions": [[value] * ACTION_DIM] * horizon, "server_timing": {"infer_ms": 1.0}})
    leaf = draw(st.sampled_from([0, 0.5, -0.25, 1.5, "a", None]) | declared_arrays)
    outer = draw(st.lists(st.sampled_from(SIZES), max_size=2))
    dims = [*outer, *draw(st.sampled_from([[7], [7], [7], [8], []]))]  # an action is 7 values
    assume(int(np.prod(dims)) <= 2_500_000)
    obj = leaf
    for n in reversed(dims):
        obj = [obj] * n
    frame = msgpack.packb({"actions": obj, "server_timing": {"infer_ms": 1.0}} if draw(st.booleans()) else obj)
    assume(len(frame) <= MAX_REPLY_BYTES_DEFAULT)
    return frame


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(wide_frames())
def test_any_reply_within_the_byte_limit_decodes_within_bounded_counts_or_is_refused(frame) -> None:
    """Decoded, a frame holds at most MAX_VALUES values (else WireError); its actions are a chunk of at most
    MAX_CHUNK_ACTIONS actions (else MalformedReply, the protocol's error)."""
    try:
        decoded = unpack_frame(frame)
    except WireError:
        event("refused by the decoder")
        return
    assert values_in(decoded) <= MAX_VALUES
    if isinstance(decoded, dict):
        try:
            reply = reply_from(decoded["actions"], 1.0)
        except MalformedReply:
            event("refused as a chunk")
            return
        event("a chunk")
        assert 1 <= len(reply.actions) <= MAX_CHUNK_ACTIONS


# ---------------------------------------------------------------------- the client thread on a real websocket
@pytest.fixture(scope="module")
def rig():
    """One crafted server and one runner for every example: the thread must survive them all in a row."""
    with CraftedPolicyServer() as server:
        # reconnect_period: the backoff a run of refused frames builds (up to 8 periods) is what most examples wait
        config = PolicyConfig(url=server.url, start_wait_steps=0, mode="sync", reconnect_period=0.005, timeout=WAIT,
                              max_reply_bytes=MIN_REPLY_BYTES)  # fmt: skip
        runner = PolicyRunner(config)
        yield server, runner
        runner.close()


def _handled(runner: PolicyRunner) -> int:
    c = runner.counters
    return c["chunks"] + c["malformed_replies"] + c["server_errors"] + c["client_faults"]


def _step(runner: PolicyRunner, fresh: bool) -> StepRecord:
    now = time.time()
    return runner.step(Snapshot(STATE, now, IMG, now, IMG, now) if fresh else None, "pick up the parts")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frame=frames())
def test_whatever_the_server_replies_the_thread_lives_only_valid_chunks_act_and_faults_are_reported(rig, frame):
    server, runner = rig
    server.metadata, server.reply = GOOD_METADATA, frame
    assert wait_for(lambda: runner.connected, WAIT, POLL), runner.last_error
    runner.restart_episode()  # nothing queued: this example's reply is the only source of actions
    before, errors = _handled(runner), runner.counters["malformed_replies"] + runner.counters["server_errors"]
    records = [_step(runner, fresh=True)]  # the one request of this example (sync: the queue is empty) ...
    assert runner._in_flight is not None
    # ... then steps with no observation, which send nothing more, until its reply is handled
    assert wait_for(lambda: records.append(_step(runner, fresh=False)) or _handled(runner) > before, WAIT, 0.005)
    assert runner._worker.is_alive() and _handled(runner) == before + 1
    acted = [r.action for r in records if r.action is not None]
    for a in acted:
        assert a.shape == (ACTION_DIM,) and np.all(np.isfinite(a)) and np.all(np.abs(a) <= 1.0)
    chunk = valid_chunk(frame)
    event("a valid chunk" if chunk is not None else "refused")
    if chunk is not None:
        assert runner.counters["chunks"] > 0 and len(acted) == 1, records
        np.testing.assert_array_equal(acted[0], chunk[0])  # sync, nothing queued before: the chunk's first action
    else:
        assert not acted, records
        assert runner.counters["malformed_replies"] + runner.counters["server_errors"] == errors + 1
        assert runner.last_error and runner._refused == runner.last_error  # reported; held steps carry it


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(metadata=st.binary(max_size=64) | structures.map(msgpack.packb) | st.text(max_size=20))
def test_whatever_the_metadata_the_client_connects_or_reports_and_retries(rig, metadata) -> None:
    server, runner = rig
    server.reply = good_reply()
    assert wait_for(lambda: runner.connected, WAIT, POLL), runner.last_error
    connections, failures = server.connections, runner.counters["connect_failures"]
    server.metadata = metadata
    server.drop()  # the client reconnects and gets this metadata
    assert wait_for(lambda: server.connections > connections and (
        runner.connected or runner.counters["connect_failures"] > failures), WAIT, POLL)  # fmt: skip
    assert runner._worker.is_alive()
    if runner.counters["connect_failures"] > failures:
        assert not runner.connected and ("metadata" in runner.last_error or "first frame" in runner.last_error)
    else:
        assert isinstance(runner.metadata, dict)
    server.metadata = GOOD_METADATA
    assert wait_for(lambda: runner.connected, WAIT, POLL), runner.last_error
