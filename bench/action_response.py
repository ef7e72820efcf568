"""The arm's action response against robosuite's measured one, one figure per sequence.

``.venv/bin/python -m bench.action_response [--goal-delta]``: every sequence of
``tests/data/robosuite_osc_response.json`` (robosuite 1.4.0's Panda, ``OSC_POSE``, 20 Hz) through the
response alone (``libero_workcell.action_response.PandaResponse``, what the driver streams) and through
the simulated workcell in one process (MuJoCo's AUBO, its servos and the arm driver, in sim time). Per
sequence: the RMS distance to robosuite's TCP trajectory as a fraction of its travel, in position and
rotation, for the components the sequence commands (what it does uncommanded, the drift, in brackets:
the RMS distance to robosuite's drift). Target: <= 5 % on every sequence (issue 26). The planners'
second-order approximation (``OscResponse``) is printed for contrast, and the response's CPU cost per
servo tick. ``--goal-delta`` adds the other response. Not a test: nothing fails here.
"""

from __future__ import annotations

import argparse
import time

from aubo_bridge.config import ArmConfig
from libero_workcell.action_response import OscGains
from sim_bridge.response_reference import (
    ResponseError,
    compare,
    load_reference,
    response_trajectory,
    sim_trajectory,
    table,
)
from tools.fit_osc_response import model_trajectory

TARGET = 0.05


def worst(errors: list[ResponseError]) -> str:
    pos = max((e for e in errors if e.compares_pos), key=lambda e: e.pos_ratio)
    rot = max((e for e in errors if e.compares_rot), key=lambda e: e.rot_ratio)
    verdict = "PASS" if max(pos.pos_ratio, rot.rot_ratio) <= TARGET else "MISS"
    return (f"worst: position {pos.pos_ratio * 100:.1f} % ({pos.name}), rotation {rot.rot_ratio * 100:.1f} % "
            f"({rot.name}); target <= {TARGET * 100:.0f} %: {verdict}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--goal-delta", action="store_true", help="also run the goal_delta response")
    args = parser.parse_args(argv)
    seqs = load_reference()
    cfg = ArmConfig()
    t0, c0 = time.monotonic(), time.process_time()
    alone = [compare(s, *response_trajectory(s, cfg.servo_period)) for s in seqs]
    cpu, ticks = time.process_time() - c0, sum(len(s.actions) for s in seqs) * round(cfg.servo_hz / cfg.control_hz)
    print(f"the response alone (PandaResponse, {cfg.servo_hz:.0f} Hz servo ticks): {time.monotonic() - t0:.1f} s")
    print(table(alone))
    print(worst(alone))
    print(f"CPU per servo tick: {cpu / ticks * 1e6:.0f} us ({cpu / ticks * cfg.servo_hz * 100:.1f} % of a core)\n")
    runs = [("simulated workcell in-process (libero, the default)", ArmConfig())]
    if args.goal_delta:
        runs.append(("simulated workcell in-process (goal_delta)", ArmConfig(action_response="goal_delta")))
    for label, run_cfg in runs:
        t0 = time.monotonic()
        errors, refused = [], []
        for s in seqs:
            try:
                errors.append(compare(s, *sim_trajectory(s, run_cfg)))
            except RuntimeError as exc:  # goal_delta refuses some of robosuite's sequences (joint speed)
                refused.append(str(exc))
        print(f"{label}: {time.monotonic() - t0:.1f} s")
        print(table(errors))
        if errors and run_cfg.action_response == "libero":
            print(worst(errors))
        print("".join(f"refused: {r}\n" for r in refused))
    approx = [compare(s, *model_trajectory(s, OscGains())) for s in seqs]
    print("for contrast, the planners' second-order approximation (OscResponse, fitted gains)")
    print(table(approx))
    print(worst(approx))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
