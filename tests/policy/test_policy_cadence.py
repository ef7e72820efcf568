"""policy_node.cadence: the operator's log of a policy episode (transitions once, rate-limited; the report)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from policy_node.cadence import INFO, WARNING, Cadence, EpisodeStats, Transitions, fault_kind
from policy_node.runner import StepRecord

ACT = np.zeros(7)


def acted(t: float, chunk: int = 0, rtt: float | None = 100.0, kind: str = "chunk") -> StepRecord:
    return StepRecord(t, ACT, kind, chunk=chunk, round_trip_ms=rtt)


def held(t: float, kind: str = "server_lost", reason: str = "the server closed the connection") -> StepRecord:
    return StepRecord(t, None, kind, reason=reason)


def test_a_fault_is_a_held_step_with_a_reason_and_waiting_for_a_chunk_is_none() -> None:
    assert fault_kind(held(0.0)) == "server_lost"
    assert fault_kind(held(0.0, "no_chunk", "")) is None  # sync: standing still during inference, no fault
    assert fault_kind(acted(0.0)) is None and fault_kind(StepRecord(0.0, ACT, "wait", reason="x")) is None


def test_each_transition_is_logged_once_with_its_reason_and_the_recovery_counts_the_held_steps() -> None:
    log = Transitions(min_interval=2.0)
    out = [log.update(acted(0.0), 0.0)]
    out += [log.update(held(0.05 * k, reason=f"lost {k}"), 10.0 + k) for k in range(1, 6)]
    out += [log.update(acted(1.0), 20.0), log.update(acted(1.05), 21.0)]
    assert [o for o in out if o] == [(WARNING, "holding (server_lost): lost 1"),
                                     (INFO, "recovered: acting again after 5 steps held")]  # fmt: skip
    assert out[0] is None and out[2:6] == [None] * 4 and out[-1] is None


def test_a_new_fault_kind_is_a_new_transition() -> None:
    log = Transitions(min_interval=0.0)
    assert log.update(held(0.0), 0.0) == (WARNING, "holding (server_lost): the server closed the connection")
    assert log.update(held(0.0, "stale_obs", "observation 300 ms old"), 1.0) == (
        WARNING, "holding (stale_obs): observation 300 ms old")  # fmt: skip
    assert log.update(held(0.0, "no_chunk", "the reply is not openpi's"), 2.0) == (
        WARNING, "holding (no_chunk): the reply is not openpi's")  # fmt: skip


def test_a_flapping_fault_is_rate_limited_and_summarised_not_lost() -> None:
    log = Transitions(min_interval=2.0)
    msgs = [log.update(held(0.0), 0.0)]  # logged at once
    for k in range(1, 8):  # acting, holding, ... every 0.1 s: within the interval, nothing logged
        msgs.append(log.update(acted(0.0) if k % 2 else held(0.0), k * 0.1))
    assert msgs[0] is not None and msgs[1:] == [None] * 7
    assert log.update(acted(0.0), 1.9) is None  # still within 2 s of the last message
    assert log.update(acted(0.0), 2.0) == (INFO, "recovered: acting again after 4 steps held (6 more changes since "
                                                 "the last message)")  # fmt: skip
    assert log.update(acted(0.0), 10.0) is None  # nothing changed: nothing to say


def test_a_change_back_to_what_was_last_logged_says_nothing() -> None:
    log = Transitions(min_interval=2.0)
    assert log.update(held(0.0), 0.0) is not None
    assert log.update(acted(0.0), 0.5) is None and log.update(held(0.0), 0.6) is None
    assert log.update(held(0.0), 5.0) is None  # holding, as the last message said
    assert log.update(acted(0.0), 6.0) == (INFO, "recovered: acting again after 3 steps held (2 more changes since "
                                                 "the last message)")  # fmt: skip


def test_the_episode_report_gives_rate_held_steps_and_round_trips() -> None:
    stats = EpisodeStats(control_hz=20.0)
    assert stats.line("episode 1") is None and stats.rate_hz is None
    t = 0.0
    for _ in range(10):  # the start wait
        stats.add(StepRecord(t, ACT, "wait"))
        t += 0.05
    for k in range(100):  # 20 chunks of 5 actions, round trips 1 .. 20 ms (each chunk counted once)
        stats.add(acted(t, chunk=k // 5, rtt=float(k // 5 + 1)))
        t += 0.05
    for reason in ("the server closed the connection", "cannot connect"):
        stats.add(held(t, reason=reason))
        t += 0.05
    stats.add(held(t, "no_chunk", ""))
    assert stats.steps == 113 and stats.rate_hz == pytest.approx(20.0)
    p50, p99 = np.percentile(np.arange(1.0, 21.0), [50, 99])
    assert stats.line("episode 1 (stopped)") == (
        "episode 1 (stopped): 113 steps in 5.6 s, 20.0 Hz (target 20); 110 acted (chunk 100, wait 10); "
        "3 held (no_chunk 1, server_lost 2), last fault: cannot connect; "
        f"round trip p50 {p50:.0f} ms, p99 {p99:.0f} ms over 20 chunks"
    )


def test_an_episode_with_one_step_or_no_chunk_says_so() -> None:
    stats = EpisodeStats(control_hz=10.0)
    stats.add(held(3.0, "stale_obs", "no observation yet"))
    assert stats.line("e") == "e: 1 steps in 0.0 s, - Hz (target 10); 0 acted; 1 held (stale_obs 1), last fault: " \
                              "no observation yet; no chunk"  # fmt: skip
    stats.add(held(3.5, "stale_obs", "no observation yet"))
    assert stats.rate_hz == pytest.approx(2.0)  # the rate achieved, not the target


def test_cadence_numbers_episodes_and_starts_each_from_nothing() -> None:
    cadence = Cadence(control_hz=20.0, min_interval=0.0)
    assert cadence.end("stopped") is None  # nothing ran: nothing to report, no episode counted
    assert cadence.add(held(0.0), 0.0) == (WARNING, "holding (server_lost): the server closed the connection")
    cadence.add(acted(0.05), 0.1)
    first = cadence.end("stopped")
    assert first.startswith("episode 1 (stopped): 2 steps") and cadence.episodes == 1
    # the next episode starts acting: no "recovered" for the last one's hold
    assert cadence.add(acted(10.0), 1.0) is None
    assert cadence.end("restarted by /policy/start").startswith("episode 2 (restarted by /policy/start): 1 steps")


def test_cadence_is_safe_across_the_loop_and_the_services() -> None:
    cadence = Cadence(control_hz=20.0)
    lines: list[str | None] = []

    def loop() -> None:
        for k in range(2000):
            cadence.add(acted(k * 0.05, chunk=k // 5), 0.0)

    t = threading.Thread(target=loop)
    t.start()
    while t.is_alive():
        lines.append(cadence.end("stopped"))
    lines.append(cadence.end("stopped"))
    total = sum(int(x.split(": ")[1].split(" steps")[0]) for x in lines if x)
    assert total == 2000  # every step in exactly one report
