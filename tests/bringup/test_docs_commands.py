"""Every command README.md and docs/ give is checked, and each is run by a test or listed as not run, with why.

Checked here, for every command (tests/fixtures/doc_commands.py finds them):
- ``workcell bringup`` / ``check`` / ``env`` / ``plan``: run in this process, bringup with ``--dry-run``, so
  each ``NODE.PARAM:=VALUE`` and ``ARG:=VALUE`` resolves against the graph (a cell file argument gets the
  example cell file of docs/bringup.md); ``workcell call``: the command and its arguments are what the operator
  command line accepts; ``workcell demo`` / ``replay`` and ``./run.sh``: their options are in the command's help;
- ``ros2 launch libero_workcell FILE``: the launch file exists and its arguments resolve as the file resolves them
  (launch_ros has no wheel; test_bringup compares each launch file's graph with ``workcell bringup --job``);
- ``python -m MODULE``: the module exists and every option written is in its ``--help``;
- a path of the repository a command names (scripts/, bench/, config/, tests/, requirements files) exists.
Then each command is either run for real by the test that RUN_BY names, or in NOT_RUN with the reason
(hardware, an outside tool, a benchmark of minutes). A new command in a doc fails here until it is placed.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest
from doc_commands import DOC_FILES, REPO, DocCommand, doc_commands

from libero_workcell.contract import Services
from workcell import cli, launch_presets
from workcell.bringup import Graph
from workcell.operator_cli import COMMANDS, OperatorError, steps_of

COMMANDS_IN_DOCS = doc_commands()

# command (regex on its text) -> the test that runs it for real
RUN_BY: dict[str, str] = {
    r"tools\.node_parameters":
        "tests/bringup/test_node_parameters.py::test_the_file_is_what_every_node_of_the_graph_declares",
    r"tools\.make_panda_response_model":
        "tests/contract/test_panda_response.py::test_the_tool_writes_the_shipped_file_byte_for_byte",
    r"^\./run\.sh( --fast| --speeds .*)?$":
        "tests/bringup/test_main_job.py::test_run_sh_runs_the_full_stack_on_the_simulated_workcell",
    r"workcell bringup expert:=true belt_speed:=0\.05$":
        "tests/bringup/test_bringup.py::test_sim_graph_comes_up_and_publishes",
    r"^colcon build$": "tests/bringup/test_colcon_build.py::test_installed_workcell_runs_from_the_install",
    r"workcell replay demos/aubo\.hdf5":
        "tests/graph/test_replay_graph.py::test_open_loop_replay_through_the_graph_reports_tracking_outcome_and_strip",
    r"^workcell replay DEMO":
        "tests/graph/test_replay_graph.py::test_closed_loop_replay_through_the_graph_keeps_the_outcome",
    r"sim_bridge\.convert_batch":
        "tests/sim/test_convert_batch.py::test_kill_9_mid_batch_loses_nothing_and_the_rerun_completes_it",
    r"sim_bridge\.convert_batch .*--ray auto":
        "tests/sim/test_convert_batch_ray.py::test_ray_auto_with_no_cluster_here_starts_one_on_loopback_for_the_run",
    r"tests/fixtures/ray_cluster\.py": "tests/sim/test_convert_batch_ray.py::test_the_cluster_listens_on_loopback_only",
    r"pytest tests/sim/test_lab_demos\.py": "tests/sim/test_lab_demos.py::test_lab_demo_replays",
    r"bringup --job deploy_sim$":
        "tests/graph/test_deploy_graph.py::test_the_deployed_policy_drives_the_task_through_the_graph_without_pauses",
    r"policy_node\.serve":
        "tests/policy/test_policy_runner.py::test_killing_the_server_holds_within_two_periods_and_the_loop_recovers_when_it_returns",
    r"-m evaluation sim --out eval/ --(workers|speeds)":
        "tests/evaluation/test_evaluation_sim.py::test_a_sim_evaluation_writes_results_that_agree_with_the_worlds_predicates",
    r"-m evaluation sim --out eval/ --ray":
        "tests/evaluation/test_evaluation_sim.py::test_on_a_ray_cluster_the_trials_do_the_same_and_an_actor_killed_mid_trial_costs_one_attempt",
    r"^workcell (status|call (enable|stop-all|jog dz 0\.1|home))$":
        "tests/graph/test_operator_graph.py::test_the_operator_commands_reach_a_running_graph_from_a_shell_that_knows_nothing_of_it",
    # the graph-targeting rules of docs/operator.md, with two graphs on one machine (and stop-all on both)
    r"^workcell (call --name cell-b belt start|status --name cell-a)$":
        "tests/graph/test_operator_graph.py::test_two_graphs_on_one_machine_never_cross",
    r"^workcell call belt emergency-stop$":
        "tests/graph/test_operator_graph.py::test_the_belts_emergency_stop_is_a_workcell_call_command",
    # the physical cell's workflow, against the emulated cell (a cell file naming the emulators, the local server)
    r"^workcell check --job teleop_collect cell:=|^workcell bringup --job (teleop_collect|deploy_real cell:=)|"
    r"^workcell plan (next|status) --session|^workcell call (policy (start|stop|task)|episode)|"
    r"-m evaluation real --out|^eval \"\$\(":
        "tests/graph/test_physical_workflow.py::test_the_physical_workflow_as_documented_runs_on_the_emulated_cell",
    r"^workcell bringup --job teleop_collect_sim teleop_repeats:=2$":
        "tests/graph/test_teleop_graph.py::test_the_scripted_session_records_demos_in_libero_layout",
    r"sim_bridge\.panda\.demos": "tests/sim/test_panda_demos.py::test_a_short_panda_demo_reads_back_in_libero_layout",
    r"recorder\.export_lerobot":
        "tests/recorder/test_export_lerobot.py::test_demos_export_in_openpis_layout_and_read_back_with_lerobots_loader",
    r"-m libero_workcell\.faults$":
        "tests/contract/test_fault_codes.py::test_the_operator_page_holds_the_table_as_faults_py_writes_it",
    r"-m preferences pairs/":
        "tests/preferences/test_preference_demos.py::test_the_report_of_the_paired_demos_renders_with_its_tables_and_curves",
    r"tests/fixtures/preference_trajectories\.py":  # on a sample (the stored set: 28 episodes)
        "tests/preferences/test_preference_demos.py::"
        "test_the_stored_pairs_are_what_the_recorder_records_here_within_what_another_cpu_changes",
    r"bringup --job teleop_collect_sim record_mcap:=":
        "tests/session_log/test_session_log.py::test_the_session_log_reads_back_and_every_message_decodes",
    r"-m session_log\.review":
        "tests/session_log/test_session_log_core.py::test_the_review_prints_topics_counts_and_whether_the_log_was_closed",
    r"bringup --job teleop_collect_sim console:=true$":
        "tests/console/test_console_browser.py::test_the_operator_watches_collects_holds_and_resets_a_fault_from_the_page",
    r"bringup --job deploy_sim console:=true$":
        "tests/graph/test_deploy_graph.py::test_the_deployed_policy_drives_the_task_through_the_graph_without_pauses",
    r"console\.host:=0\.0\.0\.0":
        "tests/console/test_console_access.py::test_bound_off_loopback_a_control_without_the_token_is_refused",
    r"-m evaluation sim (--out eval/|\.\.\.) --console":
        "tests/evaluation/test_evaluation_sim.py::test_a_sim_evaluation_writes_results_that_agree_with_the_worlds_predicates",
    r"token_urlsafe\(24\)\)\" > ~/\.console_token":
        "tests/console/test_console_access.py::test_the_token_comes_from_a_private_file_or_the_environment",
    r"bringup expert:=true foxglove:=true$":
        "tests/session_log/test_foxglove_bridge.py::test_the_simulated_graph_is_live_through_the_bridge",
}  # fmt: skip

# command (regex) -> why no test runs it (each is still checked above as far as it can be without running it)
NOT_RUN: dict[str, str] = {
    r"^\./test\.sh": "the suite itself (CI runs it: .ci/run)",
    r"^bench/|-m bench\.": "a benchmark, minutes of figures, run by hand (its options are checked)",
    r"policy_timing:=/tmp/e2e_wall\.jsonl": "the end-to-end latency bench's wall-clock run, by hand (its graph is "
                                           "test_deploy_graph's; the options are resolved here)",
    r"^(cd|source) |^git clone|^rosdep |^pip install|^python3 -m venv":
        "installation on a robot PC (test_prerequisites "
                                                                     "keeps the pins and package.xml in step)",
    r"use_sim:=false|real_workcell\.launch|teleop_collect\.launch|deploy_real|\bcell:=":
        "the physical cell: needs the controller, the serial devices and the cameras (resolved here as --dry-run; "
        "the lab's workflow runs against the emulated cell in test_physical_workflow)",
    r"teleop_source:=headset": "needs a PICO headset and the XRoboToolkit PC service",
    r"GPU-HOST": "needs a GPU policy server (test_physical_workflow runs the same against the local one)",
    r"^uv run scripts/": "openpi's training scripts, in openpi's repository",
    r"sim_bridge\.aubo_demos": "the expert's episodes take minutes; the same writer (write_aubo_demos) is run by "
                               "tests/fixtures/replay_fixtures.py",
    r"sim_bridge\.preference_demos": "minutes of episodes; the same recording functions run in test_preference_demos",
    r"sim_bridge\.teleop_session":
        "writes a session like config/teleop/d2s_scripted_session.json (test_teleop_sources)",
    r"tools\.fit_osc_response": "fits the response constants from robosuite, in a throw-away venv of robosuite's pins",
    r"--ros-args": "how the launcher starts each node (test_bringup runs nodes exactly so)",
    r"^scripts/bootstrap\.sh": "the set-up that ./run.sh and ./test.sh run first",
    r"^scripts/serve_policy\.py": "openpi's server script, in openpi's repository",
    r"sim_replay\.launch\.py demo_path:=/abs/": "the same graph as `workcell replay` (run by test_replay_graph)",
    r"^workcell$|^workcell (bringup|call|status|env|plan|replay|check|demo)?( \.\.\.| COMMAND.*| cell:=PATH.*| "
    r"--graph PATH| jog| source NAME| "
    r"\[--domain-id N\]| --job JOB.*|)$|^\.venv/bin/workcell \.\.\.$|^workcell call enable \| .*":
        "a form, not a command (its parts are checked)",
    r"^ros2 launch( libero_workcell (\.\.\.|JOB\.launch\.py.*))?$": "a form, not a command",
    r"^python -m (evaluation|sim_bridge\.aubo_demos|preferences)$|^python -m evaluation \{sim,real\}|"
    r"^python -m evaluation sim$":
        "names the command (its runs are above)",
    r"sim_workcell\.launch\.py expert:=true$": "the colcon form of `workcell bringup expert:=true` (resolved here)",
    r"teleop_collect_sim\.launch\.py teleop_repeats:=2": "the colcon form of the teleop job (resolved here; "
                                                        "test_teleop_graph runs it)",
    r"workcell bringup( --dry-run)?$|sim_world\.seed:=3": "run here with --dry-run",
    r"^workcell plan (next|status)$": "names the command (run here, and by test_physical_workflow)",
    r"^workcell call (belt (reset|start|stop)|stop|hold|reset|source teleop)$":
        "the operator path test_operator_graph runs (enable, stop-all, source, jog, home), to services tested with "
        "their nodes (test_conveyor_driver, test_arm_driver, test_ros_graph); arguments checked here",
    r"^workcell call sim (fault \"protective stop: collision at the tray\"|clear)$|"
    r"^ros2 param set /sim_world arm_fault ":
        "sets sim_world's arm_fault, the parameter test_ros_graph's fault rehearsal sets through the graph "
        "(test_a_fault_set_in_the_simulated_controller_faults_the_arm_until_cleared_and_reset); `workcell call` "
        "arguments checked here; `ros2 param` needs a system ROS 2",
    r"^\./run\.sh --help$": "run here (`workcell demo --help`)",
    r"^\.venv/bin/ray (start|status|stop)|^export RAY_":
        "Ray's own commands, run by hand (docs/cluster.md shows what they printed; several machines are not here); "
        "the tests start their cluster as tests/fixtures/ray_cluster.py does, with the same settings "
        "(workcell.cluster.RAY_ENV): `ray stop` stops every Ray process of the machine, the tests' neighbours' too",
    r"^\.venv/bin/ray get-auth-token": "prints the cluster's secret token",
    r"^mkdir -p panda_demos$": "makes the folder the next command writes into",
    r"session_log\.topics:=\[": "resolved here (--dry-run); test_session_log_core checks the list reaches the node, "
                                 "test_session_log runs the node on the default list",
    r"bringup expert:=true record_mcap:=\S+ session_log\.image_hz:=0$": "resolved here (--dry-run); every camera "
        "frame (session_log.image_hz 0) is logged by test_session_log's killed log in the scripted teleop session's "
        "reference run (tests/fixtures/teleop_reference.py); the expert's graph comes up in test_bringup",
    r"teleop_collect_sim\.launch\.py record_mcap:=": "the colcon form of the logged teleop job (resolved here; "
                                                     "test_session_log runs it)",
    r"--job teleop_collect_sim foxglove:=true record_mcap:=": "resolved here (--dry-run): the logged teleop job "
        "(test_session_log runs it) with the bridge beside it (test_foxglove_bridge runs the bridge on the sim graph)",
    r"foxglove_bridge\.topics:=\[": "resolved here (--dry-run); test_foxglove_bridge runs the bridge on a list of "
                                     "topics and on the default one",
    r"sim_workcell\.launch\.py expert:=true foxglove:=true$": "the colcon form of `workcell bringup expert:=true "
                                                              "foxglove:=true` (resolved here; test_foxglove_bridge "
                                                              "runs it)",
}  # fmt: skip

NO_HELP = {"tools.fit_osc_response", "libero_workcell.faults"}  # modules without options: --help would run them
PLACEHOLDER = re.compile(r"^(<.*>|[A-Z][A-Z_]*|\.\.\.|.*\|.*)$")


def _placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.match(word)) or word.endswith(":=...")


def _program(cmd: DocCommand) -> tuple[str, list[str]]:
    words = cmd.tokens()
    if words and words[0] in (".venv/bin/python", "python", "python3") and words[1:2] == ["-m"]:
        return "python -m", words[2:]
    if words and words[0] in (".venv/bin/workcell", "workcell"):
        return "workcell", words[1:]
    return (words[0] if words else ""), words[1:]


@cache
def example_cell_file(folder: Path) -> Path:
    """docs/bringup.md's example cell file, as a lab would save it."""
    text = (REPO / "docs" / "bringup.md").read_text()
    (block,) = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "\nuse_sim:" in b]
    path = folder / "lab_cell.yaml"
    path.write_text(block)
    return path


@cache
def fresh_help_text(*command: str) -> str:
    """``python *command --help`` in an interpreter of its own: what a user who asks for the usage sees."""
    out = subprocess.run([sys.executable, *command, "--help"], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, (command, out.stderr[-2000:])
    return out.stdout


# Every usage the checks below read, asked of one interpreter: a module run as ``python -m`` runs as runpy runs it
# here, and the modules' imports are shared (an interpreter each cost the quick subset 9 s per worker: most of it
# scipy's and matplotlib's imports, again and again). test_the_documented_python_modules_answer_help still starts
# each module on its own.
_HELP_RUNNER = """
import contextlib, io, json, runpy, sys
texts = {}
for argv in json.load(sys.stdin):
    sys.argv, out, code = [*argv, "--help"], io.StringIO(), None
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        code = exc.code
    texts[" ".join(argv)] = [code, out.getvalue()]
json.dump(texts, sys.__stdout__)
"""


def _module_commands() -> list[list[str]]:
    """The words after ``python -m`` of each documented command whose module answers ``--help``."""
    return [w for c in COMMANDS_IN_DOCS if (p := _program(c))[0] == "python -m" and (w := p[1])
            and w[0] not in ("pytest", "venv", *NO_HELP) and not _placeholder(w[0])]  # fmt: skip


def _help_requests() -> list[tuple[str, ...]]:
    """Each documented ``python -m`` module, with its next word where that may be a subcommand; `workcell` demo and
    replay (./run.sh is `workcell demo`)."""
    asked = {("workcell.cli", "demo"), ("workcell.cli", "replay")}
    for words in _module_commands():
        asked.add((words[0],))
        if len(words) > 1 and re.fullmatch(r"[a-z][\w-]*", words[1]):
            asked.add((words[0], words[1]))
    return sorted(asked)


@cache
def _helps() -> dict[str, list]:
    requests = [list(r) for r in _help_requests()]
    out = subprocess.run([sys.executable, "-c", _HELP_RUNNER], input=json.dumps(requests), capture_output=True,
                         text=True, timeout=300, cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout)


def help_text(*command: str) -> str:
    """What ``python *command --help`` prints (``command``: ``-m``, the module, maybe a subcommand)."""
    assert command[0] == "-m", command
    code, text = _helps()[" ".join(command[1:])]
    assert code in (0, None) and text.startswith("usage:"), (command, code, text[-2000:])
    return text


def _options(words: list[str]) -> list[str]:
    return [w.split("=")[0] for w in words if w.startswith("--")]


def _with_cell(words: list[str], cell: Path) -> list[str]:
    return [f"cell:={cell}" if w.startswith("cell:=") else w for w in words if not _placeholder(w)]


def check_workcell(words: list[str], tmp: Path) -> None:
    if not words or _placeholder(words[0]):
        return
    sub, rest = words[0], words[1:]
    assert sub in {"bringup", "check", "env", "call", "status", "plan", "demo", "replay"}, f"no subcommand {sub!r}"
    if any(_placeholder(w) or w.endswith("...") for w in rest):  # a form: only its subcommand is checked
        return
    if sub == "bringup":
        _run_cli(["bringup", *_with_cell(rest, example_cell_file(tmp)), "--dry-run"])
    elif sub == "env":
        _run_cli(["env", *rest])
    elif sub == "plan":
        rest = [str(tmp / "session.hdf5") if w.endswith(".hdf5") else w for w in rest]
        _run_cli(["plan", *rest])
    elif sub == "call" and rest:
        args = _parse(["call", *rest])  # its options (--name, --domain-id) wherever they are written
        assert args.what in COMMANDS, f"workcell call has no command {args.what!r}"
        if rest == [args.what]:  # names the command (`workcell call jog`): it exists
            return
        try:
            COMMANDS[args.what][1](args.args)
        except OperatorError as exc:
            raise AssertionError(f"workcell call {' '.join(rest)}: {exc}") from None
    elif sub == "status":
        _parse(["status", *rest])
    elif sub in ("demo", "replay"):
        helped = help_text("-m", "workcell.cli", sub)
        assert all(o in helped for o in _options(rest)), (sub, _options(rest))
    elif sub == "check":
        cli._parser().parse_args(["check", *_with_cell(rest, example_cell_file(tmp))])


def _parse(argv: list[str]) -> argparse.Namespace:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            return cli._parser().parse_args(argv)
        except SystemExit:
            raise AssertionError(f"workcell {' '.join(argv)}: {err.getvalue()[-500:]}") from None


def _run_cli(argv: list[str]) -> None:
    if not argv:
        return
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code
    assert code == 0, (argv, err.getvalue()[-2000:], out.getvalue()[-500:])


def check_launch(words: list[str], tmp: Path) -> None:
    if len(words) < 2 or _placeholder(words[1].split(".")[0]) or words[1] == "...":
        return
    assert words[0] == "libero_workcell", words
    launch_file = REPO / "launch" / words[1]
    assert launch_file.is_file(), f"no launch file {words[1]}"
    job = words[1].removesuffix(".launch.py")
    assert job in launch_presets.JOBS, f"{job} is not a job of launch_presets"
    given = _with_cell(words[2:], example_cell_file(tmp))
    args = [w.replace("$PWD", str(tmp)).replace("$HOME", str(tmp)) for w in given]
    Graph.load().resolve(cli.job_overrides(job, args))


def check_python_module(words: list[str]) -> None:
    module = words[0]
    if module == "pytest":
        assert all((REPO / w).exists() for w in words[1:] if w.startswith("tests/")), words
        conftests = "".join(p.read_text() for p in (REPO / "tests").glob("conftest.py"))
        assert all(f'"{o}"' in conftests for o in _options(words[1:])), words
        return
    if module == "venv" or _placeholder(module):
        return
    if module in NO_HELP:
        assert importlib.util.find_spec(module) is not None and not _options(words[1:]), words
        return
    helped = help_text("-m", module)
    sub = re.search(r"\{([\w,-]+)\}", helped.splitlines()[0])  # a command with subcommands: the subcommand's help
    if sub and len(words) > 1 and words[1] in sub.group(1).split(","):
        helped = help_text("-m", module, words[1])
    assert all(o in helped for o in _options(words[1:])), (module, _options(words[1:]), helped[-800:])


def check_paths(words: list[str]) -> None:
    for w in words:
        if re.match(r"^(scripts|bench|config|launch|tests|docs)/[\w./-]+$|^requirements[\w-]*\.txt$", w):
            if w.startswith("scripts/") and w.endswith(".py") and not (REPO / w).exists():
                continue  # openpi's scripts (NOT_RUN says so)
            assert (REPO / w).exists(), f"no {w} in the repository"


@pytest.mark.slow
def test_the_documented_python_modules_answer_help() -> None:
    """Each documented module starts and prints its usage (two at a time; the checks below reuse the text)."""
    modules = sorted({words[0] for words in _module_commands()})
    with ThreadPoolExecutor(2) as pool:
        texts = list(pool.map(lambda m: fresh_help_text("-m", m), modules))
    assert all(t.startswith("usage:") for t in texts), modules


@pytest.mark.parametrize("cmd", COMMANDS_IN_DOCS, ids=[f"{c.file}:{c.line}" for c in COMMANDS_IN_DOCS])
def test_each_documented_command_is_real(cmd: DocCommand, tmp_path) -> None:
    program, words = _program(cmd)
    check_paths([program, *words])
    if program == "workcell":
        check_workcell(words, tmp_path)
    elif program == "ros2" and words[:1] == ["launch"]:
        check_launch(words[1:], tmp_path)
    elif program == "python -m":
        check_python_module(words)
    elif program == "./run.sh":
        helped = help_text("-m", "workcell.cli", "demo")
        assert all(o in helped for o in _options(words)), words


def test_each_documented_command_is_run_by_a_test_or_says_why_not() -> None:
    unplaced = [str(c) for c in COMMANDS_IN_DOCS
                if not any(re.search(p, c.text) for p in (*RUN_BY, *NOT_RUN))]  # fmt: skip
    assert not unplaced, "documented commands neither run by a test nor in NOT_RUN:\n" + "\n".join(unplaced)


def _operator_table() -> list[tuple[list[str], set[str]]]:
    """docs/operator.md's table of `workcell call` commands: each row's commands and the services it names."""
    lines = (REPO / "docs" / "operator.md").read_text().splitlines()
    start = lines.index("| command | what it does | service / parameter |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        command, _, services = (c.strip() for c in line.strip("|").split("|"))
        rows.append((re.findall(r"`([^`]+)`", command), set(re.findall(r"`(/[\w/]+)`", services))))
    return rows


def test_every_service_the_docs_name_is_a_workcell_call_command() -> None:
    """The wheel install has no `ros2` (docs/bringup.md asked for `/conveyor/emergency_stop`, and no command called
    it): every service README.md and docs/ name is in docs/operator.md's table, on the row of a command whose steps
    call it."""
    services = {v for k, v in vars(Services).items() if k.isupper()}
    named = {s for s in services for f in DOC_FILES if re.search(rf"`?{re.escape(s)}(?![\w/])", f.read_text())}
    assert {"/conveyor/emergency_stop", "/aubo/enable", "/sim/reset"} <= named  # the search finds them
    reached: set[str] = set()
    for commands, listed in _operator_table():
        calls: set[str] = set()
        for text in commands:
            words = text.split()
            if words[0] not in COMMANDS:  # `episode start` / `save`: the row's command, another argument
                words = [commands[0].split()[0], *words]
            if any(_placeholder(w.strip('"')) for w in words[1:]):
                continue  # a form (`belt speed V`)
            calls |= {step.service for step in steps_of(words[0], words[1:]) if step.service}
        assert listed & services <= calls, (commands, listed - calls)  # the row's services are what it calls
        reached |= calls
    assert not named - reached, f"named in the docs, no `workcell call` command reaches them: {named - reached}"


def test_the_lists_name_real_tests_and_no_stale_commands() -> None:
    stale = [p for p in (*RUN_BY, *NOT_RUN) if not any(re.search(p, c.text) for c in COMMANDS_IN_DOCS)]
    assert not stale, f"entries that match no documented command: {stale}"
    for node_id in RUN_BY.values():
        path, name = node_id.split("::")
        assert re.search(rf"^def {re.escape(name)}\(", (REPO / path).read_text(), re.M), f"no test {node_id}"
