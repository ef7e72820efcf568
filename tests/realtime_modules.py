"""The test modules of test.sh's second phase, after the rest, never beside a graph the suite itself started:

- the ``realtime`` modules assert sub-second wall-clock deadlines of a device or a protocol (a servo call that
  gives up within a period, a read that does not wait);
- the ``waiting`` modules mostly wait on the wall clock (a device's or a protocol's timeouts and planned delays,
  idle connections): 10-25 % of a core for their 6-35 s each, measured one by one. In the first phase, two of them
  side by side on the two workers left the machine a third idle for its last 200 s (ci59); here they wait beside
  the realtime modules, which wait too.

Marked by conftest; they run among themselves on more workers than the cores (test.sh, docs/testing.md).

``python tests/realtime_modules.py`` prints their paths: test.sh's second phase collects only them (collecting the
whole tree again took each of its processes seconds of CPU to deselect all but these).
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

WAITING_MODULES = frozenset({
    "test_console_connections.py", "test_conveyor_late_replies.py", "test_ctag_late_replies.py",
    "test_modbus_late_replies.py", "test_conveyor_modbus.py", "test_arcs_poller.py", "test_node_steps.py",
    "test_node_main.py", "test_recorder_node.py", "test_recorder_writer.py", "test_teleop_node.py",
})  # fmt: skip

SECOND_PHASE = REALTIME_MODULES | WAITING_MODULES


TESTS = Path(__file__).resolve().parent


def second_phase_paths(tests: Path = TESTS) -> list[Path]:
    """The second phase's files under ``tests``; every name of the lists must be one (a renamed module would
    otherwise leave the second phase silently, and run in the first)."""
    found = {p.name: p for p in tests.rglob("test_*.py") if p.name in SECOND_PHASE}
    missing = sorted(SECOND_PHASE - found.keys())
    if missing:
        raise SystemExit(f"realtime_modules: no such test module: {', '.join(missing)}")
    return sorted(found.values())


if __name__ == "__main__":
    for path in second_phase_paths():
        print(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path)
