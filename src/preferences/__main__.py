"""``python -m preferences DEMOS... --out DIR [--screenshot]``: the preference report of recorded demos or rollouts.

Every demo of the LIBERO-layout files (or folders of them: a recorder's session, an evaluation's recorded
rollouts) is scored under the preferences its task asked (``preference_specs``), with the calibrated bins;
the report (summary.json, curves.png, trajectories.png, report.html) goes to DIR.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from libero_workcell.libero_format import DemoReader, LiberoFormatError, LoadBudget, demo_files
from preferences.catalogue import Catalogue
from preferences.labels import Calibration
from preferences.report import screenshot, write_report
from preferences.scoring import score
from preferences.trajectory import Trajectory


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m preferences", description=__doc__.splitlines()[0])
    ap.add_argument("demos", nargs="+", help="LIBERO-layout .hdf5 files or folders of them")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--screenshot", action="store_true", help="also render report.png in headless Chromium")
    a = ap.parse_args(argv)
    catalogue, calibration = Catalogue.load(), Calibration.load()
    episodes, trajs = [], {}
    budget = LoadBudget()  # every trajectory is kept for the report: one bound on what the whole run loads
    try:
        for path in demo_files(a.demos):
            with DemoReader(path) as reader:
                for demo in reader.each(budget=budget):  # a file's load taken first, its demos read one by one
                    traj = Trajectory.from_demo(demo, float(demo.attrs.get("control_hz", 20.0)))
                    name = f"{path.stem}/{demo.name}"
                    traj = Trajectory(**{**traj.__dict__, "name": name})
                    condition = catalogue.condition(list(traj.task.preference_specs))
                    episodes.append(score(traj, condition, catalogue, calibration))
                    trajs[name] = traj
    except (FileNotFoundError, LiberoFormatError) as exc:
        print(f"preferences: {exc}", file=sys.stderr)
        return 2
    html = write_report(a.out, episodes, trajs, title=f"Preferences: {', '.join(a.demos)}")
    print(f"{len(episodes)} episodes; report {html}")
    if a.screenshot:
        print(f"screenshot {screenshot(html, a.out / 'report.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
