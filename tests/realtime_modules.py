"""The test modules that assert sub-second wall-clock deadlines of a device or a protocol (a servo call that gives
up within a period, a read that does not wait): marked ``realtime`` (conftest), they run after the rest, three at a
time among themselves, never beside a graph the suite itself started (test.sh's second phase).

``python tests/realtime_modules.py`` prints their paths: test.sh's second phase collects only them (collecting the
whole tree again took each of its three processes seconds of CPU to deselect all but these).
"""

from __future__ import annotations

from pathlib import Path

REALTIME_MODULES = frozenset({
    "test_camera_driver.py", "test_camera_backends.py", "test_arcs_backend.py",
    "test_arcs_backend_states_and_refusals.py", "test_arcs_rtde.py", "test_policy_client.py", "test_lockstep.py",
    "test_sim_link.py", "test_arm_fault_codes.py",
    # the policy node's observation age (150 ms) and the runner's two-period hold: beside a graph and a busy CPU
    # (ci53, ci55) an observation came 178-496 ms late and the node rightly held
    "test_policy_node.py", "test_policy_runner.py",
})  # fmt: skip


TESTS = Path(__file__).resolve().parent


def realtime_paths(tests: Path = TESTS) -> list[Path]:
    """The realtime modules' files under ``tests``; every name of the list must be one (a renamed module would
    otherwise leave the second phase silently)."""
    found = {p.name: p for p in tests.rglob("test_*.py") if p.name in REALTIME_MODULES}
    missing = sorted(REALTIME_MODULES - found.keys())
    if missing:
        raise SystemExit(f"realtime_modules: no such test module: {', '.join(missing)}")
    return sorted(found.values())


if __name__ == "__main__":
    for path in realtime_paths():
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
