"""Delay-aware splicing and real-time chunking (policy_node.chunks, policy.rtc, builtin reach-rtc).

- No action whose step has passed is executed: against a server taking 150 ms, every chunk's executed indices
  start at or after the steps that elapsed while it was computed.
- The bounded splice's guarantee, as a property over random chunks and delays: at every splice, each pose
  component of the first new action executed differs from the last one executed before it by at most
  S_c = max(the largest step of component c within the old chunk, within the new chunk, min_splice_step).
- policy.rtc's fields (prev_actions (d, 7) float32, inference_delay d) reach openpi-server's
  WebsocketPolicyServer, a server that ignores them still works, and the RTC server's chunks start with the
  committed actions.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy_node.builtin_policies import ReachPolicy, SampledReachPolicy, inpaint, rtc_soft_mask
from policy_node.chunks import POSE, ChunkQueue, Joined, max_step
from policy_node.config import PolicyConfig, PolicyConfigError
from policy_node.observation import Snapshot
from policy_node.runner import PolicyRunner
from policy_node.serve import LocalPolicyServer, _parse, make_policy

HZ = 20.0
IMG = np.zeros((256, 256, 3), np.uint8)
STATE = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
TARGET = np.array([0.45, 0.0, 0.35])
FLOOR = 0.05

pose = st.floats(-1.0, 1.0, allow_nan=False)


@st.composite
def chunks(draw, n: int = 12):
    h = draw(st.integers(2, 10))
    rows = draw(st.lists(st.lists(pose, min_size=6, max_size=6), min_size=n * h, max_size=n * h))
    grip = draw(st.lists(st.sampled_from([-1.0, 1.0]), min_size=n * h, max_size=n * h))
    a = np.concatenate([np.array(rows), np.array(grip)[:, None]], axis=1)
    return [a[i * h : (i + 1) * h] for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(
    cs=chunks(),
    replan=st.integers(1, 8),
    delays=st.lists(st.integers(0, 6), min_size=12, max_size=12),
    prefetch=st.one_of(st.none(), st.integers(1, 7)),
    blend_old=st.sampled_from([0.0, 0.3]),
)
def test_the_jump_at_every_splice_is_within_the_largest_step_inside_the_chunks_involved(
        cs, replan, delays, prefetch, blend_old) -> None:  # fmt: skip
    q = ChunkQueue(replan, blend_old, bound_splice=True, min_splice_step=FLOOR)
    in_flight, sent, prev, splices = None, {}, None, 0
    for step in range(100):
        if in_flight is not None and step >= in_flight[2]:
            chunk, at, _ = in_flight
            q.join(chunk, cs[chunk], at)
            in_flight = None
        if in_flight is None and len(sent) < len(cs) and q.remaining <= (prefetch or 0):
            chunk, at = q.request()
            sent[chunk] = at
            in_flight = (chunk, at, step + delays[chunk])
        x = q.next()
        if x is None:
            continue
        assert x.index >= q.executed - 1 - sent[x.chunk]  # aligned: never an action for a step already past
        assert x.index == q.executed - 1 - sent[x.chunk]
        if prev is not None and prev.chunk != x.chunk:
            splices += 1
            bound = np.maximum(np.maximum(max_step(cs[prev.chunk]), max_step(cs[x.chunk])), FLOOR)
            jump = np.abs(x.action[POSE] - prev.action[POSE])
            assert np.all(jump <= bound + 1e-12), (jump, bound)
        if not x.limited and not x.blended:  # once reached, the chunk's action itself
            np.testing.assert_array_equal(x.action, cs[x.chunk][x.index])
        assert x.action[6] == cs[x.chunk][x.index][6]  # the gripper is never limited nor blended
        prev = x


def test_the_blend_alone_does_not_bound_the_jump_and_the_bounded_splice_does() -> None:
    old = np.tile([0.5, 0, 0, 0, 0, 0, -1.0], (10, 1))
    new = np.tile([-0.5, 0, 0, 0, 0, 0, -1.0], (10, 1))
    new[:, 1] = np.linspace(0, 0.9, 10)  # component 1 steps 0.1 per action
    for bounded, first in ((False, 0.3 * 0.5 - 0.7 * 0.5), (True, 0.5 - FLOOR)):
        q = ChunkQueue(5, bound_splice=bounded, min_splice_step=FLOOR)
        c0, at0 = q.request()
        q.join(c0, old, at0)
        q.next()
        c1, at1 = q.request()
        q.next()
        joined = q.join(c1, new, at1)
        x = q.next()
        assert x.action[0] == pytest.approx(first)  # component 0 steps 0 in both chunks: the floor bounds it
        assert joined.limited == (5 if bounded else 0)
    got = [x.action[0] for x in iter(q.next, None)]
    assert got == pytest.approx([0.5 - k * FLOOR for k in range(2, 6)])  # then on toward the new chunk


def _chunk(*pose0: float, hold: float = 0.0) -> np.ndarray:
    """A chunk whose component 0 takes the values ``pose0``, the other pose components ``hold``, gripper open."""
    a = np.full((len(pose0), 7), hold)
    a[:, 0] = pose0
    a[:, 6] = -1.0
    return a


def _executed(q: ChunkQueue) -> list[float]:
    return [x.action[0] for x in iter(q.next, None)]


def _joined(q: ChunkQueue, actions: np.ndarray):
    chunk, at = q.request()
    return q.join(chunk, actions, at)


def test_the_bound_is_the_larger_step_of_the_running_chunk_and_the_new_one() -> None:
    for running, new, step in ((_chunk(0.0, 0.2, 0.4), _chunk(-0.8, -0.8, -0.8, -0.8), 0.2),  # the running's
                               (_chunk(0.0, 0.0, 0.0), _chunk(-0.9, -0.6, -0.3, 0.0), 0.3)):  # the new one's
        q = ChunkQueue(4, bound_splice=True, min_splice_step=FLOOR)
        _joined(q, running)
        start = q.next().action[0]
        _joined(q, new)
        got = _executed(q)
        steps = np.abs(np.diff([start, *got]))
        assert steps.max() == pytest.approx(step), got  # not the floor, not the other chunk's
        assert got[-1] == pytest.approx(new[-1, 0]) or steps.min() == pytest.approx(step)


def test_a_one_action_chunk_has_no_step_and_meets_at_the_floor() -> None:
    np.testing.assert_array_equal(max_step(_chunk(0.7)), np.zeros(6))
    np.testing.assert_allclose(max_step(_chunk(0.1, 0.4)), [0.3, 0, 0, 0, 0, 0])  # two actions: one step
    q = ChunkQueue(1, bound_splice=True, min_splice_step=FLOOR)
    _joined(q, _chunk(0.0))
    q.next()
    _joined(q, _chunk(0.5))
    assert _executed(q) == pytest.approx([FLOOR])


def test_what_is_within_the_bound_is_the_chunks_own_and_not_marked() -> None:
    q = ChunkQueue(3, bound_splice=True, min_splice_step=FLOOR)
    _joined(q, _chunk(0.0, 0.1, 0.2, 0.3))
    q.next()
    joined = _joined(q, _chunk(0.1, 0.2, 0.3, 0.4))
    assert joined.limited == 0
    xs = list(iter(q.next, None))
    assert [x.action[0] for x in xs] == pytest.approx([0.1, 0.2, 0.3]) and not any(x.limited for x in xs)


def test_a_limited_action_keeps_its_blended_flag_and_a_join_before_anything_ran_keeps_the_running_bound() -> None:
    q = ChunkQueue(4, blend_old=0.3, bound_splice=True, min_splice_step=FLOOR)
    _joined(q, _chunk(0.0, 0.25, 0.5, 0.75))  # steps of 0.25
    q.next()
    _joined(q, _chunk(0.0, 0.0))  # nothing of it runs before the next chunk arrives
    _joined(q, _chunk(-1.0, -1.0, -1.0))  # blended with what is queued, bounded by the first chunk's 0.25
    xs = list(iter(q.next, None))
    assert [x.blended for x in xs] == [True, True, False] and all(x.limited for x in xs)
    assert [x.action[0] for x in xs] == pytest.approx([-0.25, -0.5, -0.75])


def test_after_the_queue_is_dropped_the_next_chunk_is_taken_as_it_is() -> None:
    q = ChunkQueue(3, bound_splice=True, min_splice_step=FLOOR)
    _joined(q, _chunk(0.0, 0.0, 0.0))
    q.next()
    assert q.clear() == 2
    assert _joined(q, _chunk(0.9, 0.9)).limited == 0
    assert _executed(q) == pytest.approx([0.9, 0.9])


def test_the_committed_prefix_is_empty_for_no_steps_and_refuses_a_bad_floor() -> None:
    q = ChunkQueue(3)
    _joined(q, _chunk(0.0, 0.1, 0.2))
    for steps in (0, -2):
        assert q.committed(steps).shape == (0, 7)
    np.testing.assert_array_equal(q.committed(2)[:, 0], [0.0, 0.1])
    with pytest.raises(ValueError, match=r"min_splice_step must be > 0, got 0\.0"):
        ChunkQueue(3, min_splice_step=0.0)


def _on_joins(runner: PolicyRunner, after: Callable[[int, Joined], None]) -> None:
    """Call ``after(chunk, joined)`` each time the runner's queue has joined a chunk."""
    real = runner.queue.join

    def spy(chunk, actions, at):
        j = real(chunk, actions, at)
        after(chunk, j)
        return j

    runner.queue.join = spy  # type: ignore[method-assign]


def _spy_joins(runner: PolicyRunner, joins: dict[int, int]) -> None:
    """Record each chunk's dropped_past (its measured delay) in ``joins`` as the runner's queue joins it."""
    _on_joins(runner, lambda chunk, joined: joins.__setitem__(chunk, joined.dropped_past))


def _run(runner: PolicyRunner, steps: int, joins: dict[int, int] | None = None) -> list:
    if joins is not None:
        _spy_joins(runner, joins)
    deadline = time.monotonic() + 5.0
    while not runner.connected:
        assert time.monotonic() < deadline, runner.last_error
        time.sleep(0.01)
    t = [0.0]
    runner._clock = lambda: t[0]
    out = []
    for k in range(steps):
        t[0] = k / HZ
        out.append(runner.step(Snapshot(STATE.copy(), t[0], IMG, t[0], IMG, t[0]), "reach"))
    return out


def test_the_step_record_names_the_actions_the_splice_bound_moved() -> None:
    """A server whose chunks disagree (a fresh sampled offset each): the bound moves some actions short of their
    chunk's, and the step record says which: exactly the queue's limited actions, none when unbounded."""
    for bounded in (True, False):
        with LocalPolicyServer(SampledReachPolicy(TARGET, 10, noise=0.4, seed=3)) as srv:
            runner = PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=0, latency="100",
                                               splice="bounded" if bounded else "blend"), sim=True)  # fmt: skip
            marked: dict[tuple[int, int], bool] = {}  # (chunk, index) -> limited, as the queue holds it after a join
            _on_joins(runner, lambda _c, _j, m=marked, q=runner.queue: m.update(
                {(x.chunk, x.index): x.limited for x in q._queue}))
            try:
                records = [r for r in _run(runner, 60) if r.kind == "chunk"]
            finally:
                runner.close()
        assert len(records) >= 40
        assert [r.limited for r in records] == [marked[(r.chunk, r.index)] for r in records]
        assert all(r.as_dict()["limited"] is r.limited for r in records)
        assert any(r.limited for r in records) == bounded, sum(r.limited for r in records)


@pytest.mark.parametrize("rtc", [False, True])
def test_with_150_ms_inference_no_action_whose_step_has_passed_is_executed(rtc) -> None:
    """Lockstep at a fixed 150 ms latency on a server that really takes 150 ms: each chunk arrives 3 steps
    after its observation, and its executed indices start at those 3 elapsed steps (never 0, 1, 2)."""
    with LocalPolicyServer(ReachPolicy(TARGET, 10, delay_ms=150)) as srv:
        runner = PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=2, latency="150", rtc=rtc), sim=True)
        joins: dict[int, int] = {}
        try:
            records = _run(runner, 50, joins)
        finally:
            runner.close()
    executed = [r for r in records if r.kind == "chunk"]
    assert len(executed) >= 40 and len(joins) >= 6
    first: dict[int, int] = {}
    for r in executed:
        first.setdefault(r.chunk, r.index)
        assert r.index >= joins[r.chunk]
    assert joins[0] == 0  # requested during the start's hold steps: nothing executed meanwhile
    assert all(joins[c] == 3 for c in joins if c > 0), joins  # 150 ms at 20 Hz
    assert all(first[c] == joins[c] for c in first)


def test_rtc_fields_reach_openpi_server_and_the_rtc_server_starts_its_chunks_with_the_committed_actions() -> None:
    policy = SampledReachPolicy(TARGET, 20, seed=1)
    with LocalPolicyServer(policy) as srv:
        cfg = PolicyConfig(url=srv.url, start_wait_steps=2, latency="150", rtc=True, replan_steps=10)
        runner = PolicyRunner(cfg, sim=True)
        committed: dict[int, np.ndarray] = {}
        real = runner.queue.committed

        def spy(steps):
            c = real(steps)
            committed[runner.queue._next_chunk] = c
            return c

        runner.queue.committed = spy  # type: ignore[method-assign]
        try:
            records = _run(runner, 60)
        finally:
            runner.close()
    assert {"prev_actions", "inference_delay"} <= policy.keys_seen
    assert len(policy.received) >= 5 and all(dtype == "float32" for _, _, dtype in policy.received)
    assert all(shape == (d, 7) for d, shape, _ in policy.received)
    assert policy.received[0][0] == 0 and max(d for d, _, _ in policy.received) == 3  # cold, then measured
    # what was committed for a chunk is what ran meanwhile, and that chunk picks up exactly there
    by_chunk: dict[int, list] = {}
    checked = 0
    for r in records:
        if r.kind == "chunk":
            by_chunk.setdefault(r.chunk, []).append(r)
    for chunk, c in committed.items():
        if chunk in by_chunk and len(c) == 3 and chunk - 1 in by_chunk:
            ran = [r.action for r in by_chunk[chunk - 1]][-3:]
            np.testing.assert_allclose(np.array(ran), c, atol=1e-6)
            # the RTC server's chunk starts with them: its first action executed continues from them
            assert by_chunk[chunk][0].index == 3
            checked += 1
    assert checked >= 4


def test_on_the_wall_clock_with_150_ms_inference_no_action_whose_step_has_passed_is_executed() -> None:
    """Paced at 20 Hz on the wall clock, the server really taking 150 ms: each chunk's delay is 3 steps or more
    (a loaded machine adds some), and its executed indices start at the delay."""
    with LocalPolicyServer(ReachPolicy(TARGET, 10, delay_ms=150)) as srv:
        runner = PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=2, timeout=2.0))
        joins: dict[int, int] = {}
        _spy_joins(runner, joins)
        try:
            deadline = time.monotonic() + 5.0
            while not runner.connected:
                assert time.monotonic() < deadline, runner.last_error
                time.sleep(0.01)
            records, t0 = [], time.perf_counter()
            for k in range(60):
                now = time.time()
                records.append(runner.step(Snapshot(STATE.copy(), now, IMG, now, IMG, now), "reach"))
                time.sleep(max(0.0, t0 + (k + 1) / HZ - time.perf_counter()))
        finally:
            runner.close()
    executed = [r for r in records if r.kind == "chunk"]
    assert len(executed) >= 30 and len(joins) >= 4
    assert all(joins[c] >= 3 for c in joins if c > 0), joins
    for r in executed:
        assert r.index >= joins[r.chunk]


def test_a_server_that_ignores_the_rtc_fields_still_works() -> None:
    policy = ReachPolicy(TARGET, 10)
    with LocalPolicyServer(policy) as srv:
        runner = PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=2, latency="100", rtc=True), sim=True)
        try:
            records = _run(runner, 40)
        finally:
            runner.close()
    assert sum(r.kind == "chunk" for r in records) >= 35 and runner.counters["server_errors"] == 0


def test_inpainting_keeps_the_committed_prefix_and_leaves_it_through_rtcs_soft_mask() -> None:
    w = rtc_soft_mask(10, 3)
    assert np.all(w[:3] == 1.0) and np.all(np.diff(w[3:]) < 0) and 0 < w[3] < 1 and w[-1] > 0
    rng = np.random.default_rng(0)
    sample = rng.uniform(-0.5, 0.5, (10, 7))
    prev = rng.uniform(-0.5, 0.5, (3, 7))
    out = inpaint(sample, prev)
    np.testing.assert_array_equal(out[:3], prev)
    np.testing.assert_allclose(out[3:, :6], sample[3:, :6] + w[3:, None] * (prev[2, :6] - sample[2, :6]))
    np.testing.assert_array_equal(inpaint(sample, prev[:0]), sample)


def test_config_refuses_a_bad_splice_or_rtc() -> None:
    with pytest.raises(PolicyConfigError, match="splice must be one of"):
        PolicyConfig(splice="crossfade")
    with pytest.raises(PolicyConfigError, match="rtc must be true or false"):
        PolicyConfig(rtc="yes")
    with pytest.raises(PolicyConfigError, match="min_splice_step"):
        PolicyConfig(min_splice_step=0.0)


def test_the_local_server_selects_reach_rtc_like_the_other_builtins() -> None:
    policy = make_policy(_parse(["--policy", "reach-rtc", "--noise", "0.2", "--delay-ms", "100"]))
    assert isinstance(policy, SampledReachPolicy) and (policy.noise, policy.delay_ms) == (0.2, 100.0)
    assert type(make_policy(_parse([]))) is ReachPolicy
