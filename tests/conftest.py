"""Shared test setup: loopback-only DDS on a per-run domain, offscreen MuJoCo, ROS fixtures.

The environment is set here, at import, before any test module can import
rclpy: the RMW reads it when the first context creates its DDS participant,
and every child process inherits it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
# The tests' shared helpers (rigs, fakes, crafted servers, probes) import by their names from any area folder,
# and the child processes the tests start find them too (they inherit sys.path as PYTHONPATH).
FIXTURES = REPO / "tests" / "fixtures"
if str(FIXTURES) not in sys.path:
    sys.path.insert(0, str(FIXTURES))
# pytest puts tests/ on the path (this file's folder), and a test area named like a package (tests/console,
# tests/gripper, ...) would then be found as a namespace package of that name before the editable install's
# finder gets asked: the real package's __init__ never ran and its data files were looked for under tests/.
# With src/ on the path the regular package wins, here and in every child process that inherits the path.
SRC = REPO / "src"
TOP_PACKAGES = ("sim_cell", "sim_bridge")  # the packages beside src/ (setup.py's TOP_FOLDERS)
CODE_FOLDERS = (SRC, *(REPO / name for name in TOP_PACKAGES))  # every folder of this repository's packages
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))

from realtime_modules import REALTIME_MODULES, WAITING_MODULES  # noqa: E402

from libero_workcell import dds  # noqa: E402 (after the helpers' path, like every test module's imports)

TEST_OUTPUT = REPO / "test-output"
TEST_OUTPUT.mkdir(exist_ok=True)

os.environ["MUJOCO_GL"] = "egl"
os.environ.setdefault("ROS_LOG_DIR", str(TEST_OUTPUT / "ros_log"))  # not ~/.ros/log
# graphs the tests start announce themselves here (workcell.run_registry), not where an operator's
# `workcell call` on this machine would find them
os.environ["XDG_RUNTIME_DIR"] = str(TEST_OUTPUT / "runtime")
(TEST_OUTPUT / "runtime").mkdir(parents=True, exist_ok=True, mode=0o700)
# This run's ROS_DOMAIN_ID: a free one, claimed machine-wide for the run (no graph or other run on this machine gets
# it), and handed to what the tests start (a graph on the inherited domain joins it: dds.claim_exact)
RUN_DOMAIN = dds.claim_domain()
os.environ.update(RUN_DOMAIN.delegated_env())
DDS_VARS = dds.apply_loopback_env(RUN_DOMAIN.domain_id)
# what an operator's other shell does not have (the tests' "another terminal"): no domain, no DDS profile, and not
# this run's domain handed down
OPERATOR_SHELL_UNSET = ("ROS_DOMAIN_ID", "FASTDDS_DEFAULT_PROFILES_FILE", dds.DELEGATED_VAR)

# Property tests: random by default; HYPOTHESIS_PROFILE=mutation makes them repeatable (the same
# examples every run), as a mutation tool needs to compare a mutant's run with the original's.
try:
    from hypothesis import settings as _hypothesis_settings

    _hypothesis_settings.register_profile("mutation", derandomize=True, database=None, print_blob=True)
    _hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
except ImportError:  # the runtime-only install has no hypothesis; its property tests are not collected then
    pass


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, interval: float = 0.02) -> bool:
    """Poll ``predicate`` until it returns something truthy (True) or ``timeout`` s pass (False)."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


SMALL_DISK = "4m"  # a tmpfs this size fills for real: ENOSPC from the kernel


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A small tmpfs of its own, for a real full disk (CI runs as root); skipped, saying why, where it cannot be
    mounted."""
    import subprocess

    folder = tmp_path / "small_disk"
    folder.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(folder)],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"no small file system for a real ENOSPC: mount failed ({exc})")
    if done.returncode != 0:
        pytest.skip(f"no small file system for a real ENOSPC (mounting a tmpfs needs root): {done.stderr.strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True, timeout=30)


def fill_disk(folder: Path) -> Path:
    """Write a ballast file into ``folder`` until the kernel says ENOSPC: its disk is full. Returns the ballast."""
    import errno

    ballast = folder / "ballast"
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return ballast


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def children_of_a_killed_node(script: str, *args: str) -> list[int]:
    """Run ``script`` (a stand-in node that prints its children's pids as JSON, then SIGKILLs itself) from the
    repository; the pids it printed. Fails unless it died by SIGKILL."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    repo = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60,
                         env=env, cwd=repo)  # fmt: skip
    assert out.returncode == -9, out.stderr
    return [int(p) for p in json.loads(out.stdout.strip().splitlines()[-1]).values() if p is not None]


def output_dir_for(request: pytest.FixtureRequest) -> Path:
    """``test-output/<test name>/``, emptied at the start of the test."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name).strip("_")
    path = TEST_OUTPUT / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture(name="wait_for")
def wait_for_fixture() -> Callable[..., bool]:
    """:func:`wait_for` as a fixture, for tests that prefer not to import conftest."""
    return wait_for


@pytest.fixture
def link() -> Iterator[Any]:
    """A serial link for a Modbus device emulator: client pty <-> fault-injecting relay <-> device pty."""
    from emulators.serial_link import FaultyLink

    link = FaultyLink()
    yield link
    link.close()


@pytest.fixture
def arcs_options() -> dict[str, Any]:
    """The options of :func:`emu`'s ARCS emulator (``ArcsEmulator``'s keyword arguments): the arm at HOME_Q, a
    quick start-up. A module overrides this fixture for others (``test_arcs_rtde.py``); a test parametrizes it
    (``@pytest.mark.parametrize("arcs_options", [{...}])``)."""
    from aubo_bridge.model.kinematics import HOME_Q

    return {"q0": [float(v) for v in HOME_Q], "boot_delay": 0.02}


@pytest.fixture
def emu(arcs_options: dict[str, Any]) -> Iterator[Any]:
    """A loopback ARCS controller emulator (``tests/emulators/arcs_emulator.py``) for the real ``pyaubo_sdk``
    client, started with ``arcs_options`` and stopped after the test."""
    from emulators.arcs_emulator import ArcsEmulator

    with ArcsEmulator(**arcs_options) as e:
        yield e


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """The full loopback environment of this run (pass as ``env=`` to child processes)."""
    return dict(os.environ)


@pytest.fixture(scope="module")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray cluster of two nodes on 127.0.0.1 (tests/fixtures/ray_cluster.py), started once per module that asks
    for it: its address, for ``--ray ADDRESS``. Its token file is in RAY_AUTH_TOKEN_PATH meanwhile, so drivers
    started by the tests join it; its processes have all ended after the module (an idle cluster costs a tenth of
    a core: kept for the whole session, it burned that beside every later test). Its folder (token, log) is its
    own: two xdist workers, or two test runs, each with a cluster never share a token file."""
    from ray_cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("ray_cluster")) as address:
        yield address


@pytest.fixture
def graph_runner(request: pytest.FixtureRequest, ros_env: dict[str, str]) -> Iterator[Callable[..., Any]]:
    """``start(nodes, env=None, settle=0.0) -> RunningGraph``: launch NodeSpecs with the run's env.

    Logs and params files go to ``test-output/<test name>/``; every graph
    started is stopped at teardown. With ``settle`` > 0, waits that long and
    raises NodeDiedError if a node ended meanwhile.
    """
    from workcell.launcher import NodeDiedError, RunningGraph, launch

    log_dir = output_dir_for(request)
    started: list[RunningGraph] = []

    def start(nodes: Sequence[Any], env: dict[str, str] | None = None, settle: float = 0.0) -> RunningGraph:
        running = launch(nodes, env=ros_env if env is None else env, log_dir=log_dir)
        started.append(running)
        if settle > 0 and (exits := running.wait(settle)):
            raise NodeDiedError(exits)
        return running

    yield start
    for running in reversed(started):
        running.stop()


def json_messages(node: Any, topic: str) -> list[Any]:
    """Every std_msgs/String JSON message on a latched ``topic`` (the world's episode reports, the recorder's
    status), decoded, in arrival order: the list fills while ``node`` is spun."""
    from std_msgs.msg import String

    from libero_workcell.contract import Qos
    from libero_workcell.ros_qos import qos

    out: list[Any] = []
    node.create_subscription(String, topic, lambda m: out.append(json.loads(m.data)), qos(Qos.LATCHED))
    return out


@contextlib.contextmanager
def own_context() -> Iterator[Any]:
    """An initialized rclpy context of its own, shut down after."""
    import rclpy
    from rclpy.context import Context

    context = Context()
    rclpy.init(context=context)
    try:
        yield context
    finally:
        context.try_shutdown()


@pytest.fixture
def rclpy_context() -> Iterator[Any]:
    """An initialized rclpy context of the test's own (nodes, executors on it; shut down after)."""
    with own_context() as context:
        yield context


@contextlib.contextmanager
def ros_probe(name: str) -> Iterator[Any]:
    """An rclpy node on its own context, spun by a background executor thread."""
    import rclpy
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor

    with own_context() as context:
        node = rclpy.create_node(f"{name}_{os.getpid()}", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)

        def spin() -> None:
            with contextlib.suppress(ExternalShutdownException):
                executor.spin()

        thread = threading.Thread(target=spin, name=f"{name}-executor", daemon=True)
        thread.start()
        try:
            yield node
        finally:
            executor.shutdown(timeout_sec=2.0)
            thread.join(timeout=5.0)
            node.destroy_node()


@pytest.fixture
def rclpy_node() -> Iterator[Any]:
    """An rclpy node on its own context, spun by a background executor thread."""
    with ros_probe("test_probe") as node:
        yield node


# --------------------------------------------------------------------------
# A lab's own demos under test (tests/sim/test_lab_demos.py)
# --------------------------------------------------------------------------
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("replay", "sim-in-the-loop replay of your own demos (tests/sim/test_lab_demos.py)")
    group.addoption("--replay-demos", action="append", default=[], metavar="PATH",
                    help="a LIBERO-layout HDF5 file or a folder of them (repeatable); "
                         "default: $WORKCELL_REPLAY_DEMOS (paths separated by ':')")  # fmt: skip
    group.addoption("--replay-mode", action="append", default=[], choices=("open_loop", "closed_loop"),
                    help="replay mode(s) (repeatable; default: both)")
    group.addoption("--replay-graph", action="store_true",
                    help="replay through the whole ROS graph (wall clock) instead of in one process (sim time)")
    group.addoption("--replay-max-pos-rms", type=float, default=0.01, metavar="M",
                    help="largest TCP position RMS error accepted, m (default 0.01)")
    group.addoption("--replay-max-rot-rms", type=float, default=2.0, metavar="DEG",
                    help="largest TCP rotation RMS error accepted, degrees (default 2)")


# --------------------------------------------------------------------------
# test.sh runs the suite on two xdist workers, a module at a time on each (--dist loadfile): graph tests run
# beside each other, each worker on a ROS domain of its own (RUN_DOMAIN above). The realtime and the waiting modules
# (tests/realtime_modules.py) run after the rest, never beside a graph the suite itself started.
# --------------------------------------------------------------------------


# The order the workers take the longest modules in, longest first (the run lasts as long as its busiest worker,
# so the long ones go first and the short ones fill in at the end), with the first user of each reference run
# (tests/fixtures/shared_runs.py) early and its other users later: a worker that needs a run the other is still
# making waits for it, idle. Only the suite's time depends on this list; `--durations` shows when it is stale.
FIRST_MODULES = (
    "test_evaluation_sim.py",  # its own local and Ray runs
    "test_console_browser.py",  # makes the scripted teleop session's reference run
    "test_operator_graph.py",
    "test_main_job.py",  # makes the expert episode's reference run
    "test_physical_workflow.py",
    "test_deploy_graph.py",  # makes the deploy episode's reference run
    "test_policy_node.py",  # (mostly waits on the wall clock: beside a graph module, not beside the next one)
    "test_panda_demos.py",  # makes the Panda episode's reference run
    "test_real_evaluation_on_the_emulated_cell.py",
    "test_action_response_graph.py",
    "test_policy_runner.py",  # (as test_policy_node.py)
    "test_replay_graph.py",
    "test_convert_batch_ray.py",
    "test_action_response.py",
    "test_expert_episodes.py",
    "test_driver_host.py",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the realtime and the waiting modules, and order the modules: FIRST_MODULES, then the other modules with
    slow tests, then the rest (a worker that picks a long module last would keep the run waiting while the other
    idles)."""
    slow_modules = set()
    for item in items:
        if item.path.name in REALTIME_MODULES:
            item.add_marker(pytest.mark.realtime)
        elif item.path.name in WAITING_MODULES:
            item.add_marker(pytest.mark.waiting)
        if item.get_closest_marker("slow"):
            slow_modules.add(item.path)
    first = {name: k for k, name in enumerate(FIRST_MODULES)}
    # stable: a module's own order is kept
    items.sort(key=lambda item: (first.get(item.path.name, len(first)), item.path not in slow_modules))

