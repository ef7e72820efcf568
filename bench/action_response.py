"""The arm's action response against robosuite's measured one, one figure per sequence.

``.venv/bin/python -m bench.action_response [--goal-delta]``: every sequence of
``tests/data/robosuite_osc_response.json`` (robosuite 1.4.0's Panda, ``OSC_POSE``, 20 Hz) through the
response model alone (``libero_workcell.action_response``, what the driver streams) and through the simulated
workcell in one process (MuJoCo's AUBO, its servos and the arm driver, in sim time). Per sequence: the
RMS distance to robosuite's TCP trajectory as a fraction of its travel, in position and rotation, for
the components the sequence commands (the rest is the Panda's drift, printed in brackets). Target:
<= 10 % (docs/interfaces.md, "Action response", names the two figures the Panda's dynamics set).
``--goal-delta`` adds the other response for contrast. Not a test: nothing fails here.
"""

from __future__ import annotations

import argparse
import time

from aubo_bridge.config import ArmConfig
from libero_workcell.action_response import OscGains
from sim_bridge.response_reference import compare, load_reference, sim_trajectory, table
from tools.fit_osc_response import model_trajectory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--goal-delta", action="store_true", help="also run the goal_delta response")
    args = parser.parse_args(argv)
    seqs = load_reference()
    print("response model (libero, default gains)")
    print(table([compare(s, *model_trajectory(s, OscGains())) for s in seqs]), end="\n\n")
    runs = [("simulated workcell in-process (libero, the default)", ArmConfig())]
    if args.goal_delta:
        runs.append(("simulated workcell in-process (goal_delta)", ArmConfig(action_response="goal_delta")))
    for label, cfg in runs:
        t0 = time.monotonic()
        errors, refused = [], []
        for s in seqs:
            try:
                errors.append(compare(s, *sim_trajectory(s, cfg)))
            except RuntimeError as exc:  # goal_delta refuses some of robosuite's sequences (joint speed)
                refused.append(str(exc))
        print(f"{label}: {time.monotonic() - t0:.1f} s")
        print(table(errors))
        print("".join(f"refused: {r}\n" for r in refused))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
