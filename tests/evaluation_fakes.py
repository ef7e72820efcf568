"""Trial functions for the evaluation runner's tests, in a module of their own: each trial's process imports
it by name, and nothing else (a test module's imports would cost each process seconds)."""

from __future__ import annotations

import os


def trial_failing_at_2(trial, out_dir, domain):
    """A trial function for the trials' processes (importable by name): trial 2's graph never comes up until a
    file says it is fixed; each trial that runs leaves a file."""
    if trial.index == 2 and not (out_dir / "fixed").exists():
        raise TimeoutError("timed out after 60 s waiting for the world and the recorder")
    (out_dir / f"ran_{trial.index}_{os.getpid()}").touch()
    trial_fields = {"index": trial.index, "belt_speed": trial.belt_speed}  # as_dict would build the task: slow
    return {"trial": trial_fields, "outcome": {"placed": [True, False, True]}, "domain": domain}


def trial_killing_its_process_at_1(trial, out_dir, domain):
    if trial.index == 1:
        os._exit(3)  # a trial's process dies (a segfault in a simulator would look alike)
    return trial_failing_at_2(trial, out_dir, domain)
