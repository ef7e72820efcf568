"""Splice jumps with and without real-time chunking's fields, at 100, 200 and 300 ms of inference.

``.venv/bin/python -m bench.splice [--steps 400] [--delays 100 200 300]``: policy_node.runner against the local
openpi server (openpi-server's WebsocketPolicyServer) serving ``reach-rtc`` (policy_node.builtin_policies.
SampledReachPolicy: a fresh smooth offset per chunk, as two samples of a flow policy disagree; RTC inpainting when
the request carries ``prev_actions`` / ``inference_delay``), toward a target moving on a circle, the TCP moved by
each executed action (contract.action_to_delta). The runner is in sim lockstep on a simulated clock with a fixed
``latency`` equal to the inference time: each chunk arrives exactly that long after its observation, whatever the
machine's load (the server's own delay_ms is 0 so the run takes seconds); ``--wall``: on the wall clock at 20 Hz
with the server sleeping delay_ms (20 s per row at 400 steps). Chunks of 20, replan_steps 10.

For each delay, splice rule (``bounded``, the default; ``blend``, the overlap blend alone) and ``policy.rtc`` off /
on: the jump at each splice (max over the six pose components of |first action executed of a new chunk - the last
executed before it|), p50 and max, next to the step-to-step change between consecutive actions executed from one
chunk (p50, max). Not a test: nothing here fails the run.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from bench.common import fmt

HZ = 20.0
HORIZON = 20
REPLAN = 10
START = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
CENTER, RADIUS, PERIOD_S = np.array([0.45, 0.0, 0.32]), 0.08, 6.0


@dataclass(frozen=True)
class Splices:
    jumps: np.ndarray  # one per splice
    steps: np.ndarray  # between consecutive actions of one chunk
    actions: int
    rtc_fields: int  # requests the server saw with prev_actions / inference_delay


def splice_jump(before: np.ndarray, after: np.ndarray) -> float:
    """The jump between two consecutive executed actions: the largest change of a pose component."""
    from policy_node.chunks import POSE

    return float(np.max(np.abs(np.asarray(after, float)[POSE] - np.asarray(before, float)[POSE])))


def measure(delay_ms: float, rtc: bool, splice: str = "bounded", steps: int = 400, seed: int = 0,
            wall: bool = False) -> Splices:  # fmt: skip
    from libero_workcell.contract import action_to_delta
    from policy_node.builtin_policies import SampledReachPolicy
    from policy_node.config import PolicyConfig
    from policy_node.observation import Snapshot
    from policy_node.runner import PolicyRunner
    from policy_node.serve import LocalPolicyServer

    img = np.zeros((256, 256, 3), np.uint8)
    policy = SampledReachPolicy(CENTER, HORIZON, delay_ms if wall else 0.0, HZ, seed=seed)
    state = START.copy()
    t = [0.0]
    with LocalPolicyServer(policy) as srv:
        config = PolicyConfig(url=srv.url, replan_steps=REPLAN, start_wait_steps=2,
                              latency="wall" if wall else f"{delay_ms:g}", splice=splice, rtc=rtc, control_hz=HZ)
        runner = PolicyRunner(config, clock=time.time if wall else lambda: t[0], sim=not wall)
        try:
            while not runner.connected:
                time.sleep(0.01)
            prev = None
            jumps, within = [], []
            acted = 0
            t0 = time.perf_counter()
            for k in range(steps):
                if wall:  # paced at 20 Hz; the server really takes delay_ms
                    time.sleep(max(0.0, t0 + k / HZ - time.perf_counter()))
                    t[0] = time.time()
                else:
                    t[0] = k / HZ
                phase = 2 * np.pi * (k / HZ) / PERIOD_S
                policy.target = CENTER + RADIUS * np.array([np.cos(phase), np.sin(phase), 0.0])
                rec = runner.step(Snapshot(state.copy(), t[0], img, t[0], img, t[0]), "reach")
                if rec.kind != "chunk" or rec.action is None:
                    prev = None if rec.kind != "wait" else prev
                    continue
                acted += 1
                if prev is not None:
                    (jumps if rec.chunk != prev.chunk else within).append(splice_jump(prev.action, rec.action))
                prev = rec
                dpos, _, _ = action_to_delta(rec.action)
                state[:3] += dpos
        finally:
            runner.close()
    return Splices(np.array(jumps), np.array(within), acted, len(policy.received))


def _p(a: np.ndarray, q: float) -> float:
    return float(np.percentile(a, q)) if a.size else float("nan")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.splice", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--delays", type=float, nargs="+", default=[100.0, 200.0, 300.0])
    ap.add_argument("--wall", action="store_true", help="on the wall clock at 20 Hz, the server sleeping delay_ms "
                    "(steps / 20 s per row) instead of lockstep at a fixed latency")  # fmt: skip
    a = ap.parse_args(argv)
    print("splice jumps (max |pose component change|, action units) vs the step within a chunk"
          f" ({'wall clock, server delay_ms' if a.wall else 'lockstep, fixed latency'})")
    print(f"{'infer ms':>8} {'splice':>8} {'rtc':>4} {'splices':>7} {'jump p50':>9} {'jump max':>9} "
          f"{'step p50':>9} {'step max':>9} {'actions':>7}")  # fmt: skip
    for delay in a.delays:
        for splice in ("blend", "bounded"):
            for rtc in (False, True):
                s = measure(delay, rtc, splice, a.steps, wall=a.wall)
                print(f"{delay:>8g} {splice:>8} {'on' if rtc else 'off':>4} {len(s.jumps):>7} "
                      f"{fmt(_p(s.jumps, 50), 4):>9} {fmt(_p(s.jumps, 100), 4):>9} "
                      f"{fmt(_p(s.steps, 50), 4):>9} {fmt(_p(s.steps, 100), 4):>9} {s.actions:>7}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
