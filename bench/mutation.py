"""Mutation testing of the safety code (mutmut 3): do the fast tests notice when a branch changes?

``bench/mutation.sh [TARGET...]`` (default: all; the targets are TARGETS below: driver, arcs, conveyor,
chunks, rtde, driver_host, teleop, client, recorder_session, recorder_writer). For each target it copies the
working tree to a temporary directory (mutmut writes ``mutants/`` and rewrites sources there, never here), configures
mutmut for that file (or files) and the tests that exercise it, runs it with the property tests made repeatable
(``HYPOTHESIS_PROFILE=mutation``), and prints the counts (mutants, killed, survived, timeouts, untested) and
every surviving mutant's diff. The full report goes to ``bench-output/mutation-<target>.txt``. ``--recheck``
runs only the mutants a target's last full run left alive, against today's tests (after tests were added for
them; the slow ARCS target takes an hour in full). ``docs/mutation.md`` records the last figures and why each
survivor left alive is harmless. Not part of CI: ~10-40 min a target.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MUTMUT = "mutmut==3.8.1"
EXCLUDE = {".venv", ".git", "ros2_ws", "test-output", "mutants", "__pycache__", "demo-output", "bench-output"}
EXCLUDE |= {".hypothesis"}

TARGETS: dict[str, tuple[str | tuple[str, ...], list[str]]] = {
    "driver": (
        ("src/aubo_bridge/driver.py", "src/aubo_bridge/response/base.py", "src/aubo_bridge/response/libero.py",
         "src/aubo_bridge/response/goal_delta.py"),
        [
            "tests/arm/test_arm_driver.py",
            "tests/arm/test_arm_driver_safety.py",
            "tests/arm/test_arm_driver_answers_and_boundaries.py",
            "tests/arm/test_arm_driver_properties.py",
            "tests/arm/test_arm_driver_libero.py",
            "tests/arm/test_source_turns.py",
            "tests/contract/test_action_response.py",
        ],
    ),
    # which source, and which of its streams, may drive: the turns a stop, homing, a fault or a switch ends
    "arbiter": ("src/aubo_bridge/arbiter.py", ["tests/arm/test_source_turns.py", "tests/arm/test_arm_driver.py"]),
    "chunks": (
        "src/policy_node/chunks.py",
        ["tests/policy/test_policy_chunks.py", "tests/policy/test_policy_splice.py"],
    ),
    # the teleop core's holds: clutch, glitches (position and orientation), non-finite inputs, bad states; the
    # publish path's tests (teleop_pico/output.py) run the core too
    "teleop": ("src/teleop_pico/core.py", ["tests/teleop/test_teleop_core.py", "tests/teleop/test_teleop_output.py"]),
    # What the policy client accepts from a server (issue 21): the frame decoder, the reply bound and checks, the
    # backoff. The client thread's catch-all lives in runner.py, whose other tests are slow (not mutated here).
    "client": (
        ("src/policy_node/protocol.py", "src/policy_node/clients/openpi_ws/client.py",
         "src/policy_node/clients/openpi_ws/wire.py"),
        [
            "tests/policy/test_policy_client.py",
            "tests/policy/test_policy_client_faults.py",
            "tests/policy/test_policy_wire.py",
            "tests/policy/test_policy_client_properties.py",
            "tests/policy/test_policy_protocol.py",
        ],
    ),
    # the arm backend and the poll loop it shares with the tool gripper and the belt relay
    "arcs": (("src/aubo_bridge/backends/arcs.py", "src/transports/arcs/poller.py"),
             ["tests/arm/test_arcs_backend.py", "tests/arm/test_arcs_backend_states_and_refusals.py",
              "tests/transports/test_arcs_rtde.py", "tests/transports/test_arcs_poller.py"]),
    # the RTDE subscription's client side
    "rtde": ("src/transports/arcs/rtde.py", ["tests/transports/test_arcs_rtde.py"]),
    # The node's side of the driver process (HostedDriver: deadlines, faults of a dead or hung child, restarts);
    # the child's DriverService runs in another process, where mutmut cannot see which tests cover it.
    "driver_host": ("src/aubo_bridge/process/driver_host.py", ["tests/arm/test_driver_host.py"]),
    # The recorder's fault branches (issue 21): the session index under concurrent saves, torn episodes set
    # aside; the node's side of the episode writer process (a full disk, a hung or dead writer). The writer
    # process itself (recorder/episode_child.py) runs in another process, where mutmut cannot see which tests
    # cover it.
    "recorder_session": ("src/recorder/session_file.py",
                         ["tests/recorder/test_recorder_writer.py", "tests/recorder/test_collection_plan.py"]),
    "recorder_writer": ("src/recorder/episode_writer.py", ["tests/recorder/test_recorder_writer.py"]),
    "conveyor": (
        "src/conveyor_driver/driver.py",
        [
            "tests/conveyor/test_conveyor_driver.py",
            "tests/conveyor/test_conveyor_commands_confirmed.py",
            "tests/conveyor/test_conveyor_modbus.py",
            "tests/conveyor/test_conveyor_io.py",
        ],
    ),
}


def _mutmut(python: Path) -> list[str]:
    try:
        subprocess.run([str(python), "-c", "import mutmut"], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        print(f"mutation: installing {MUTMUT} into {python.parent.parent}", flush=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", MUTMUT], check=True)
    return [str(python), "-m", "mutmut"]


def _copy_tree(dest: Path) -> None:
    def ignore(_dir: str, names: list[str]) -> set[str]:
        return {n for n in names if n in EXCLUDE}

    shutil.copytree(REPO, dest, ignore=ignore, dirs_exist_ok=True, symlinks=True)


def _sources(source: str | tuple[str, ...]) -> list[str]:
    return [source] if isinstance(source, str) else list(source)


def _configure(work: Path, source: str | tuple[str, ...], tests: list[str]) -> None:
    tests = [t for t in tests if (work / t).exists()]
    lines = ["", "[mutmut]", "source_paths=src", "only_mutate=", *(f"    {s}" for s in _sources(source))]
    # the package's config files are found beside package.xml (workcell.bringup): PolicyConfig's catalogue; tools/
    # is no installed package (test_action_response imports its fit)
    lines += ["also_copy=", "    config/", "    package.xml", "    tools/", "pytest_add_cli_args_test_selection="]
    lines += [f"    {t}" for t in tests]
    lines += ["pytest_add_cli_args=", "    -p", "    no:cacheprovider", "    -q", "    -m", "    not slow", ""]
    with (work / "setup.cfg").open("a") as f:
        f.write("\n".join(lines))


def previous_survivors(report: Path) -> list[str]:
    """The mutants the last full run of a target left alive (survived or timed out), from its report."""
    if not report.exists():
        raise SystemExit(f"mutation: no report {report}: run the full target first")
    return re.findall(r"^=== (\S+) \[(?:survived|timeout|no tests)\]", report.read_text(), flags=re.M)


def run(target: str, python: Path, recheck: bool = False, patterns: list[str] | None = None) -> dict[str, int]:
    """``patterns``: only the mutants whose names match (fnmatch, e.g. ``*ArmDriverǁ_limit_step__mutmut_*``: the
    functions a change touched); report in mutation-<target>-only.txt."""
    source, tests = TARGETS[target]
    mutmut = _mutmut(python)
    out_dir = REPO / "bench-output"
    out_dir.mkdir(exist_ok=True)
    report = out_dir / f"mutation-{target}.txt"
    only = previous_survivors(report) if recheck else list(patterns or [])
    if recheck:
        report = out_dir / f"mutation-{target}-recheck.txt"
    elif patterns:
        report = out_dir / f"mutation-{target}-only.txt"
    with tempfile.TemporaryDirectory(prefix=f"mutation-{target}-") as tmp:
        work = Path(tmp)
        _copy_tree(work)
        _configure(work, source, tests)
        env = dict(os.environ, HYPOTHESIS_PROFILE="mutation", MUJOCO_GL="egl")
        t0 = time.monotonic()
        print(f"mutation: {target}: mutating {' '.join(_sources(source))} against {len(tests)} test files in {work}",
              flush=True)  # fmt: skip
        done = subprocess.run([*mutmut, "run", *only], cwd=work, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - t0
        results = subprocess.run([*mutmut, "results", "--all", "true"], cwd=work, env=env, capture_output=True,
                                 text=True).stdout  # fmt: skip
        statuses = dict(re.findall(r"^\s*(\S+): (.+)$", results, flags=re.M))
        if only:  # only the rechecked or selected mutants count
            statuses = {k: v for k, v in statuses.items() if any(fnmatch.fnmatch(k, p) for p in only)}
        counts = Counter(statuses.values())
        # Everything not killed is listed: survivors, and timeouts / untested for the record.
        survivors = sorted((status, name) for name, status in statuses.items() if status != "killed")
        diffs = []
        for status, name in survivors:
            shown = subprocess.run([*mutmut, "show", name], cwd=work, env=env, capture_output=True, text=True).stdout
            diffs.append(f"=== {name} [{status}]\n" + "\n".join(ln for ln in shown.splitlines()
                         if ln.startswith(("-", "+")) and not ln.startswith(("---", "+++"))))  # fmt: skip
    summary = {
        "mutants": len(statuses),
        "killed": counts.get("killed", 0),
        "survived": counts.get("survived", 0),
        "timeout": counts.get("timeout", 0),
        "untested": counts.get("no tests", 0),
        "other": sum(v for k, v in counts.items() if k not in ("killed", "survived", "timeout", "no tests")),
    }
    text = (
        f"target {target}: {' '.join(_sources(source))}\ntests: {' '.join(tests)}\n"
        f"mutmut exit {done.returncode}, {seconds:.0f} s\n"
        + " ".join(f"{k}={v}" for k, v in summary.items())
        + "\n\n"
        + "\n".join(diffs)
        + ("\n\nmutmut output (tail):\n" + done.stdout[-3000:] + done.stderr[-3000:] if done.returncode else "")
    )
    report.write_text(text)
    print(f"mutation: {target}: " + ", ".join(f"{k} {v}" for k, v in summary.items()) + f"  ({seconds:.0f} s)")
    print(f"mutation: {target}: survivors and their diffs in {report.relative_to(REPO)}", flush=True)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="*", default=list(TARGETS), help=f"any of {', '.join(TARGETS)} (default: all)")
    parser.add_argument(
        "--recheck",
        action="store_true",
        help="run only the mutants the last full run left alive (from bench-output/mutation-<target>.txt), "
        "against today's tests; report in mutation-<target>-recheck.txt",
    )
    parser.add_argument("--only", nargs="+", default=None, metavar="PATTERN",
                        help="only the mutants whose names match (fnmatch), e.g. '*ArmDriverǁ_limit_step__mutmut_*'; "
                             "report in mutation-<target>-only.txt")  # fmt: skip
    args = parser.parse_args(argv)
    unknown = sorted(set(args.targets) - set(TARGETS))
    if unknown:
        parser.error(f"unknown targets {unknown}; choose from {list(TARGETS)}")
    python = Path(sys.executable)
    results = {t: run(t, python, args.recheck, args.only) for t in args.targets}
    print("\ntarget     mutants  killed  survived  timeout  untested")
    for t, r in results.items():
        print(f"{t:<10} {r['mutants']:>7} {r['killed']:>7} {r['survived']:>9} {r['timeout']:>8} {r['untested']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
