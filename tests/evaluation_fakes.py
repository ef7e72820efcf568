"""Trial functions for the evaluation runner's tests, in a module of their own: each trial's process imports
it by name, and nothing else (a test module's imports would cost each process seconds)."""

from __future__ import annotations

import os


def trial_failing_at_2(trial, out_dir, domain):
    """A trial function for worker processes (importable by name): trial 2's graph never comes up."""
    if trial.index == 2 and not (out_dir / "fixed").exists():
        raise TimeoutError("timed out after 60 s waiting for the world and the recorder")
    (out_dir / f"ran_{trial.index}_{os.getpid()}").touch()
    return {"trial": trial.as_dict(), "outcome": {"placed": [True, False, True]}, "domain": domain}


def trial_killing_its_process_at_1(trial, out_dir, domain):
    if trial.index == 1:
        os._exit(3)  # a trial's process dies (a segfault in a simulator would look alike)
    return trial_failing_at_2(trial, out_dir, domain)
