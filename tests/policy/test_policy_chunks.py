"""The chunk rule (policy_node.chunks): time alignment, overlap blending, synchronous and prefetching modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from libero_workcell.contract import ContractError
from policy_node.chunks import ChunkQueue, Joined, prefetch_steps, validate_chunk

H = 10  # pi05_libero's chunk length


def chunk_for(step: int, chunk: int, length: int = H) -> np.ndarray:
    """A chunk whose action j encodes the step it is for (step + j) and the chunk; gripper alternates."""
    a = np.zeros((length, 7))
    for j in range(length):
        a[j, 0] = ((step + j) % 100) / 100.0
        a[j, 1] = (chunk % 10) / 10.0
        a[j, 6] = 1.0 if (step + j) % 2 else -1.0
    return a


def run(replan: int, delays: list[int], prefetch: int | None, steps: int = 60):
    """Drive a queue for ``steps`` control steps; one request in flight, answered ``delays[i]`` steps later.
    ``prefetch`` None: synchronous (request when empty). Returns (executed, chunks sent, queue)."""
    q = ChunkQueue(replan)
    in_flight = None  # (chunk, requested_at, due step)
    sent: dict[int, tuple[int, np.ndarray]] = {}
    executed = []
    d = iter(delays)
    for step in range(steps):
        if in_flight is not None and step >= in_flight[2]:
            chunk, at, _ = in_flight
            before = [x.action.copy() for x in q._queue]
            joined = q.join(chunk, sent[chunk][1], at)
            assert joined.blended == min(len(before), joined.queued)
            in_flight = None
        threshold = 0 if prefetch is None else prefetch
        if in_flight is None and q.remaining <= threshold:
            chunk, at = q.request()
            sent[chunk] = (at, chunk_for(at, chunk))
            in_flight = (chunk, at, step + next(d, 1))
        x = q.next()
        executed.append((step, q.executed - 1 if x is not None else None, x))
    return executed, sent, q


@settings(max_examples=200, deadline=None)
@given(
    replan=st.integers(1, 8),
    delays=st.lists(st.integers(0, 6), min_size=1, max_size=40),
    prefetch=st.one_of(st.none(), st.integers(1, 7)),
)
def test_every_executed_action_is_its_chunks_action_for_that_step_or_a_blend_of_two(replan, delays, prefetch) -> None:
    executed, sent, _ = run(replan, delays, prefetch)
    last = (-1, -1)
    used: dict[int, int] = {}
    for _, e, x in executed:
        if x is None:
            continue
        at, actions = sent[x.chunk]
        assert x.index == e - at and 0 <= x.index < H  # aligned: the chunk's action for this very step
        used[x.chunk] = used.get(x.chunk, 0) + 1
        assert used[x.chunk] <= replan  # at most replan_steps of each chunk
        assert (x.chunk, x.index) > last and x.chunk >= last[0]  # chunks in order, each index once
        last = (x.chunk, x.index)
        mine = actions[x.index]
        assert x.action[6] == mine[6]  # the gripper command is never blended
        if not x.blended:
            np.testing.assert_array_equal(x.action, mine)
        else:  # 0.3 x what was queued for this step + 0.7 x the new chunk's
            assert x.action[0] == pytest.approx(mine[0], abs=1e-12)  # both encode the same step
            assert np.all(np.abs(x.action[:6]) <= 1.0)


@settings(max_examples=100, deadline=None)
@given(replan=st.integers(1, 8), delays=st.lists(st.integers(0, 6), min_size=1, max_size=40))
def test_synchronous_mode_executes_exactly_the_first_replan_steps_of_each_chunk_never_blended(replan, delays) -> None:
    executed, _, _ = run(replan, delays, prefetch=None)
    by_chunk: dict[int, list[int]] = {}
    for _, _, x in executed:
        if x is not None:
            assert not x.blended
            by_chunk.setdefault(x.chunk, []).append(x.index)
    for chunk, idx in list(by_chunk.items())[:-1]:  # every complete chunk
        assert idx == list(range(replan)), (chunk, idx)


def test_prefetching_keeps_the_stream_gap_free_when_the_round_trip_fits_and_sync_pauses() -> None:
    """100 ms inference at 20 Hz = 2 steps: with prefetch at round trip + 1 queued actions, an action every
    step; synchronous, the arm stands still while each chunk is computed."""
    delays = [2] * 40
    executed, _, _ = run(5, delays, prefetch=prefetch_steps(5, 2.0), steps=80)
    assert all(x is not None for _, _, x in executed[2:])  # after the first chunk's round trip
    executed, _, _ = run(5, delays, prefetch=None, steps=80)
    idle = [s for s, _, x in executed[2:] if x is None]
    assert len(idle) >= 20  # 2 steps of standing still per 5 executed


def test_a_chunk_answering_an_observation_too_old_is_dropped_whole_and_a_late_one_is_aligned() -> None:
    q = ChunkQueue(5)
    chunk0, at0 = q.request()
    q.join(chunk0, chunk_for(at0, chunk0), at0)
    chunk1, at1 = q.request()
    for _ in range(5):
        assert q.next() is not None
    joined = q.join(chunk1, chunk_for(at1, chunk1, length=5), at1)  # all 5 of its steps are past
    assert (joined.queued, joined.dropped_past) == (0, 5) and q.next() is None
    chunk2, at2 = q.request()
    joined = q.join(chunk2, chunk_for(at2, chunk2), at2)
    chunk3, at3 = q.request()
    for _ in range(3):
        q.next()
    joined = q.join(chunk3, chunk_for(at3, chunk3), at3)  # 3 steps late: its actions 3 .. 7
    assert (joined.dropped_past, joined.queued) == (3, 5)
    assert [q.next().index for _ in range(5)] == [3, 4, 5, 6, 7] and q.next() is None
    with pytest.raises(ValueError, match=f"only {q.executed} ran"):
        q.join(7, chunk_for(99, 7), 99)  # answers a count not reached: a bug in the caller


def test_the_overlap_blends_pose_03_old_07_new_and_keeps_the_new_gripper() -> None:
    q = ChunkQueue(5)
    c0, at0 = q.request()
    q.join(c0, np.tile([1.0, 0, 0, 0, 0, 0, -1.0], (10, 1)), at0)
    q.next()
    c1, at1 = q.request()
    q.next()  # one step passes while c1 is computed
    joined = q.join(c1, np.tile([0.0, 1.0, 0, 0, 0, 0, 1.0], (10, 1)), at1)
    assert (joined.dropped_past, joined.blended, joined.queued) == (1, 3, 5)  # its actions 1 .. 5
    x = q.next()
    np.testing.assert_allclose(x.action, [0.3, 0.7, 0, 0, 0, 0, 1.0])
    assert x.blended and (x.chunk, x.index) == (c1, 1)
    assert [q.next().blended for _ in range(4)] == [True, True, False, False]
    assert q.next() is None and q.clear() == 0


def test_clear_drops_what_is_queued() -> None:
    q = ChunkQueue(5)
    c, at = q.request()
    q.join(c, chunk_for(at, c), at)
    assert q.clear() == 5 and q.remaining == 0 and q.next() is None


@pytest.mark.parametrize(
    "bad, match",
    [([[0.0] * 7] * 0, r"\(H >= 1, 7\)"), ([[0.0] * 6] * 3, r"shape \(3, 6\)"), ([0.0] * 7, r"shape \(7,\)"),
     ([[0.0] * 7, [np.nan] + [0.0] * 6], "action 1 of the chunk: .*non-finite"),
     ([[0.0] * 6 + [1.5]], "action 0 of the chunk: .*out of range"), ("abc", "not numeric"),
     ([["a"] * 7], "not numeric")],
)  # fmt: skip
def test_a_malformed_chunk_is_refused_with_the_reason(bad, match) -> None:
    with pytest.raises(ContractError, match=match):
        validate_chunk(bad)


def test_validate_chunk_passes_a_good_chunk_as_floats() -> None:
    a = validate_chunk(np.zeros((10, 7), np.float32))
    assert a.dtype == np.float64 and a.shape == (10, 7)


@pytest.mark.parametrize(
    "replan, rtt, share, expected",
    [(5, 0.0, 0.5, 3), (5, 2.0, 0.5, 3), (5, 2.5, 0.5, 4), (5, 9.0, 0.5, 4), (10, 1.0, 0.5, 5), (1, 3.0, 0.5, 1),
     (8, 0.5, 0.0, 2)],
)  # fmt: skip
def test_prefetch_covers_the_round_trip_within_the_window(replan, rtt, share, expected) -> None:
    assert prefetch_steps(replan, rtt, share) == expected


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="replan_steps"):
        ChunkQueue(0)
    with pytest.raises(ValueError, match="blend_old"):
        ChunkQueue(5, blend_old=1.0)


def test_the_queue_counts_from_zero_and_numbers_chunks_one_by_one() -> None:
    q = ChunkQueue(5)
    assert (q.executed, q.remaining) == (0, 0) and q.request() == (0, 0) and q.request() == (1, 0)


def test_a_chunk_with_one_action_left_queues_it_and_its_fields_say_so() -> None:
    q = ChunkQueue(5)
    c0, at0 = q.request()
    assert q.join(c0, chunk_for(at0, c0), at0) == Joined(c0, 0, 0, 5)
    c1, at1 = q.request()
    for _ in range(5):
        q.next()
    assert q.join(c1, chunk_for(at1, c1, length=6), at1) == Joined(c1, 5, 0, 1)  # one left: action 5
    assert q.next().index == 5
    c2, at2 = q.request()
    q.next()  # (nothing queued: no action)
    assert q.join(c2, np.zeros((0, 7)), at2) == Joined(c2, 0, 0, 0)  # nothing in it: stale


def test_joined_actions_are_float64_copies_and_no_blend_replaces() -> None:
    q = ChunkQueue(5, blend_old=0.0)
    c0, at0 = q.request()
    src = np.full((10, 7), 0.5, np.float32)
    q.join(c0, src, at0)
    c1, at1 = q.request()
    q.join(c1, np.zeros((10, 7)), at1)  # blend_old 0: the new chunk replaces the old outright
    x = q.next()
    assert x.action.dtype == np.float64 and np.all(x.action == 0.0) and x.blended
    q2 = ChunkQueue(5)
    c, at = q2.request()
    q2.join(c, src, at)
    x2 = q2.next()
    assert x2.action.dtype == np.float64  # whatever the server's dtype (validate_chunk makes it float64 too)
    x2.action[0] = 9.0
    assert src[0, 0] == np.float32(0.5)  # the queue holds copies


def test_prefetch_defaults_to_half_a_window_and_never_below_one() -> None:
    assert prefetch_steps(10, 0.0) == 5  # LeRobot's 0.5 of a window
    assert prefetch_steps(8, 0.0, share=0.0) == 1  # no round trip measured yet: one step ahead
    assert prefetch_steps(2, 0.0) == 1 and prefetch_steps(1, 0.0) == 1


def test_a_chunk_shorter_than_asked_for_is_refused() -> None:
    with pytest.raises(ContractError, match=r"\(H >= 3, 7\), got shape \(2, 7\)"):
        validate_chunk(np.zeros((2, 7)), min_length=3)
