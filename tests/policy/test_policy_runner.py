"""The deployment loop (policy_node.runner) against a real openpi-server on loopback, paced at 20 Hz.

A served policy taking 100 ms per inference: the asynchronous mode hands out an action every step, the
synchronous one (openpi's own client) stands still while each chunk is computed. Killing the server holds
the arm within 2 control periods and the loop comes back when the server does; a traceback or a malformed
reply holds it with the reason; an observation too old is never sent.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from libero_workcell.loopback import free_port
from policy_node.builtin_policies import FaultyPolicy, ReachPolicy
from policy_node.config import PolicyConfig
from policy_node.observation import Snapshot
from policy_node.runner import PolicyRunner, StepRecord
from policy_node.serve import LocalPolicyServer, healthy

pytestmark = pytest.mark.slow
HZ = 20.0
TARGET = np.array([0.45, 0.0, 0.35])
IMG = np.zeros((256, 256, 3), np.uint8)
SRC = Path(__file__).resolve().parents[2] / "src"


def snapshot(age: float = 0.0) -> Snapshot:
    now = time.time() - age
    return Snapshot(np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0]), now, IMG, now, IMG, now)


def drive(runner: PolicyRunner, steps: int, snap: Callable[[int], Snapshot] = lambda k: snapshot(),
          at: dict[int, Callable[[], None]] | None = None) -> list[StepRecord]:  # fmt: skip
    """``steps`` control steps on absolute deadlines; ``at[k]()`` runs before step k."""
    out, t0 = [], time.perf_counter()
    for k in range(steps):
        if at and k in at:
            at[k]()
        out.append(runner.step(snap(k), "pick up the parts"))
        time.sleep(max(0.0, t0 + (k + 1) / HZ - time.perf_counter()))
    return out


def connected(runner: PolicyRunner, timeout: float = 5.0) -> PolicyRunner:
    deadline = time.monotonic() + timeout
    while not runner.connected:
        assert time.monotonic() < deadline, f"no connection: {runner.last_error}"
        time.sleep(0.02)
    return runner


def longest_pause(records: list[StepRecord]) -> int:
    """The most consecutive steps with no action, after the first action."""
    first = next(i for i, r in enumerate(records) if r.action is not None)
    run = best = 0
    for r in records[first:]:
        run = run + 1 if r.action is None else 0
        best = max(best, run)
    return best


@pytest.fixture
def slow_server():
    with LocalPolicyServer(ReachPolicy(TARGET, delay_ms=100)) as srv:
        yield srv


def test_with_100_ms_inference_prefetching_never_pauses_and_synchronous_stands_still(slow_server) -> None:
    runner = connected(PolicyRunner(PolicyConfig(url=slow_server.url, start_wait_steps=10)))
    records = drive(runner, 100)
    runner.close()
    assert [r.kind for r in records[:10]] == ["wait"] * 10  # openpi's start: [0]*6 + [-1], ten steps
    # no gap, but where the machine held a round trip up past what any prefetch covers: a chunk requested
    # ahead arrives before the queue runs dry (held to 1.5x the inference: without prefetching, each chunk would
    # leave a gap after a round trip of ~100 ms)
    kinds = [(r.kind, r.round_trip_ms) for r in records]
    for i in range(10, len(records)):
        if records[i].kind != "chunk":
            late = next((r for r in records[i:] if r.kind == "chunk"), None)
            assert records[i].kind == "no_chunk" and late is not None and late.round_trip_ms > 150, (i, kinds)
    assert sum(r.kind == "chunk" for r in records[10:]) >= 0.9 * 90, kinds
    sync = connected(PolicyRunner(PolicyConfig(url=slow_server.url, mode="sync", start_wait_steps=0)))
    sync_records = drive(sync, 60)
    sync.close()
    assert longest_pause(sync_records) >= 2  # 100 ms of inference: two control periods standing still
    done = [r for r in sync_records if r.kind == "chunk"]
    assert {r.index for r in done} == set(range(5)) and not any(r.blended for r in done)  # openpi's 0 .. 4


def test_each_executed_action_is_its_chunks_action_for_that_step(slow_server) -> None:
    """The chunk semantics from the step records: a chunk's actions run in order, one per step, starting
    at the index of the steps its round trip took; the round trip and its observation's age are recorded."""
    runner = connected(PolicyRunner(PolicyConfig(url=slow_server.url, start_wait_steps=0)))
    records = [r for r in drive(runner, 60) if r.kind == "chunk"]
    runner.close()
    by_chunk: dict[int, list[StepRecord]] = {}
    for r in records:
        by_chunk.setdefault(r.chunk, []).append(r)
    assert len(by_chunk) >= 8
    for chunk, rs in list(by_chunk.items())[1:]:
        idx = [r.index for r in rs]
        assert idx == list(range(idx[0], idx[0] + len(idx))) and 1 <= idx[0] <= 4, (chunk, idx)
        assert len(idx) <= 5 and all(r.round_trip_ms >= 100 and r.obs_age_ms < 50 for r in rs)
    assert [r.chunk for r in records] == sorted(r.chunk for r in records)


def test_killing_the_server_holds_within_two_periods_and_the_loop_recovers_when_it_returns(tmp_path) -> None:
    port = free_port()
    cmd = [sys.executable, "-m", "policy_node.serve", "--port", str(port), "--delay-ms", "20"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}

    def start() -> subprocess.Popen:
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not healthy("127.0.0.1", port):
            assert proc.poll() is None and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        return proc

    server = [start()]
    runner = connected(PolicyRunner(PolicyConfig(url=f"ws://127.0.0.1:{port}", start_wait_steps=0,
                                                 reconnect_period=0.2)))  # fmt: skip
    try:
        records = drive(runner, 40, at={20: lambda: os.kill(server[0].pid, signal.SIGKILL)})
        assert all(r.action is not None for r in records[5:20])
        after = records[20:]
        held = next(i for i, r in enumerate(after) if r.action is None)
        assert held <= 2, [r.kind for r in after]  # killed just before step 20: nothing from step 22 on
        assert all(r.action is None for r in after[held:]) and runner.counters["server_lost"] == 1
        assert after[-1].kind == "server_lost" and runner.last_error
        server[0] = start()
        back = drive(runner, 40)
        first = next(i for i, r in enumerate(back) if r.action is not None)
        assert all(r.action is not None for r in back[first + 1 :]) and runner.counters["connects"] == 2
    finally:
        runner.close()
        server[0].kill()
        server[0].wait()


BAD = [("raise", "the policy failed on purpose"), ("nan", "non-finite"), ("shape", "got shape \\(10, 6\\)"),
       ("missing", "no 'actions'")]  # fmt: skip


@pytest.mark.parametrize("fault, reason", BAD)
def test_a_bad_reply_holds_the_arm_with_the_reason(fault, reason) -> None:
    with LocalPolicyServer(FaultyPolicy(ReachPolicy(TARGET), fault, after=2)) as srv:
        runner = connected(PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=0, reconnect_period=0.2)))
        records = drive(runner, 40)
        runner.close()
    actions = [r.action is not None for r in records]
    last = max(i for i, a in enumerate(actions) if a)
    assert not any(actions[last + 1 :]) and len(actions) - last > 20  # held from then on, not by luck
    assert sum(actions) <= 2 * 5  # the two good chunks, at most
    assert re.search(reason, runner.last_error), runner.last_error
    assert runner.counters["server_errors" if fault == "raise" else "malformed_replies"] >= 1


def test_an_observation_older_than_its_limit_is_never_sent() -> None:
    policy = ReachPolicy(TARGET)
    with LocalPolicyServer(policy) as srv:
        runner = connected(PolicyRunner(PolicyConfig(url=srv.url, start_wait_steps=0, max_obs_age=0.15)))
        records = drive(runner, 30, snap=lambda k: snapshot(age=0.0 if k < 10 else 0.5))  # a camera stalls
        runner.close()
    calls_when_fresh = policy.calls
    assert runner.counters["stale_observations"] >= 15
    assert records[-1].kind == "stale_obs" and all(r.action is None for r in records[-10:])
    assert calls_when_fresh <= 6  # only the first 10 steps were sent
