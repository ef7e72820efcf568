"""A policy's inference latency in sim time (policy_node.runner with ``sim``, the lockstep policy node's loop).

Against a real openpi server on loopback whose chunks say which observation they answer (``observation/state``
carries the step's index, each action carries it back with its own index in the chunk), the runner is stepped
as the world steps it, as fast as it goes: with latency 0 (LIBERO's protocol) each chunk is executed from the
step of its observation; with a fixed delay from the step that delay later, never earlier, and an action
whose step has passed is never executed; with ``measured`` each reply counts its own round trip. Whatever the
wall clock does, the steps are the same.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from openpi_client.base_policy import BasePolicy

from policy_node.clients import kind_for
from policy_node.config import PolicyConfig
from policy_node.observation import Snapshot
from policy_node.runner import PolicyRunner, StepRecord
from policy_node.serve import LocalPolicyServer

pytestmark = pytest.mark.slow
HZ = 20.0
IMG = np.zeros((256, 256, 3), np.uint8)
H = 10


class EchoPolicy(BasePolicy):
    """Chunks whose action j is (observed step / 1000, j / 100, 0, ...): where each executed action came from."""

    def __init__(self, delay_ms: float) -> None:
        self.delay_ms = delay_ms

    def infer(self, obs: dict) -> dict:
        time.sleep(self.delay_ms / 1e3)
        step = float(np.asarray(obs["observation/state"])[0])
        actions = np.zeros((H, 7))
        actions[:, 0] = step / 1000
        actions[:, 1] = np.arange(H) / 100
        actions[:, 6] = -1.0
        return {"actions": actions}


class LateStart:
    """openpi's client, taking ``pre_s`` before its own round trip begins (as encoding two camera images does, or a
    busy core before the client thread runs): the time the control step waits is not the time the client measures."""

    def __init__(self, client, pre_s: float) -> None:
        self.client, self.pre_s = client, pre_s

    def infer_reply(self, obs: dict):
        time.sleep(self.pre_s)
        return self.client.infer_reply(obs)

    def __getattr__(self, name: str):
        return getattr(self.client, name)


def run(latency: str, mode: str, server_delay_ms: float, steps: int = 60,
        pre_s: float = 0.0) -> list[tuple[int, StepRecord]]:  # fmt: skip
    with LocalPolicyServer(EchoPolicy(server_delay_ms)) as srv:
        now = [0.0]
        cfg = PolicyConfig(url=srv.url, start_wait_steps=0, mode=mode, latency=latency, timeout=2.0,
                           blend_old=0.0, splice="blend")  # each action exactly as its chunk has it
        connect = kind_for(srv.url).connect
        runner = PolicyRunner(cfg, clock=lambda: now[0], sim=True,
                              connect=lambda *a, **kw: LateStart(connect(*a, **kw), pre_s))  # fmt: skip
        deadline = time.monotonic() + 5
        while not runner.connected:
            assert time.monotonic() < deadline, runner.last_error
            time.sleep(0.01)
        out = []
        for k in range(steps):
            now[0] = k / HZ
            state = np.array([k, 0.0, 0.3, np.pi, 0.0, 0.0, 0.0])  # the step's index, where the policy reads it
            out.append((k, runner.step(Snapshot(state, now[0], IMG, now[0], IMG, now[0]), "echo")))
        runner.close()
    return out


def origin(record: StepRecord) -> tuple[int, int]:
    """(the step whose observation the executed action answered, its index in its chunk)."""
    a = record.action
    return round(a[0] * 1000), round(a[1] * 100)


def check_alignment(records: list[tuple[int, StepRecord]]) -> dict[int, int]:
    """Every executed action is the one for its step: its index in its chunk is the number of actions the arm
    executed since the chunk's observation (policy_node.chunks: the ones for steps already past are dropped), and
    its record says how many steps ago that observation was. Returns each chunk's delay in steps."""
    acted = [(k, r) for k, r in records if r.action is not None]
    steps = {k for k, _ in acted}
    delays: dict[int, int] = {}
    for k, r in acted:
        observed, index = origin(r)
        assert index == sum(observed <= j < k for j in steps), (k, observed, index)
        assert r.delay_steps == k - observed
        delays.setdefault(r.chunk, k - observed)  # the first step it ran: when it counted
    return delays


def test_latency_0_is_liberos_protocol_each_chunk_runs_from_the_step_of_its_observation() -> None:
    records = run("0", "sync", server_delay_ms=30)
    assert all(r.action is not None for _, r in records)  # the world waits for each reply: never a pause
    delays = check_alignment(records)
    assert set(delays.values()) == {0} and len(delays) == len(records) // 5  # openpi's 5 of each chunk


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fixed_delay_puts_each_action_at_its_own_step_and_never_runs_one_whose_step_has_passed(mode) -> None:
    records = run("150", mode, server_delay_ms=0)  # 3 steps of sim time; the server itself answers at once
    assert next(k for k, r in records if r.action is not None) == 3  # the first reply counts 150 ms after
    delays = check_alignment(records)
    assert set(delays.values()) == {3}  # every chunk: exactly the delay it counts, whatever the wall clock did
    if mode == "async":  # prefetching ahead of a known delay: no pause after the first chunk
        assert [k for k, r in records[3:] if r.action is None] == []
    else:  # openpi's own client: it stands still for the delay after every chunk
        assert sum(r.action is None for _, r in records) > len(records) / 3


def test_measured_latency_charges_each_reply_its_own_round_trip() -> None:
    records = run("measured", "sync", server_delay_ms=120)  # stepped as fast as it goes: sim time waits for it
    delays = check_alignment(records)
    rtts = {r.chunk: r.round_trip_ms for _, r in records if r.action is not None}
    assert len(delays) >= 5
    for chunk, delay in delays.items():  # it counted once its round trip had passed in sim time, not before
        assert delay == math.ceil(rtts[chunk] / 1e3 * HZ), (chunk, delay, rtts[chunk])


def test_a_measured_round_trip_is_the_client_threads_whole_hold_and_counts_at_the_first_step_it_allows() -> None:
    # 40 ms before the client's own timer starts, 30 ms at the server: the step after a request (50 ms of sim time)
    # must not give up at 50 ms of wall time and count a reply whose client-measured 30 ms allowed that step
    records = run("measured", "sync", server_delay_ms=30, pre_s=0.04)
    delays = check_alignment(records)
    rtts = {r.chunk: r.round_trip_ms for _, r in records if r.action is not None}
    assert len(delays) >= 5
    for chunk, delay in delays.items():
        assert rtts[chunk] >= 70, rtts  # the thread's hold, from taking the request to handing the reply over
        assert delay == math.ceil(rtts[chunk] / 1e3 * HZ), (chunk, delay, rtts[chunk])
