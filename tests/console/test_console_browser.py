"""The console as an operator uses it, in headless Chromium against the simulated graph of a scripted teleop
session (``workcell bringup --job teleop_collect_sim console:=true``): the page loads, both camera views update,
the episode panel counts the steps being recorded, the HOLD button stops the arm (its TCP stops on
``/aubo/tcp_pose``), a fault injected in the world shows the banner with its reason, and the reset asks first,
says what it does, and clears it. Screenshots go to ``test-output/console/`` (docs/console.md shows them)."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest
from browser import browser_page
from conftest import TEST_OUTPUT
from geometry_msgs.msg import PoseStamped

from evaluation.probe import GraphProbe
from libero_workcell.contract import Topics
from workcell import launch_presets
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]
SHOTS = TEST_OUTPUT / "console"
FAULT = "collision at the tray (injected by the test)"
WAIT_S = 120.0  # wall s for what a loaded machine may take (graph start, sim time at real-time factor 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def session(tmp_path_factory, ros_env):
    """The scripted teleop graph with the console, at real time (the page watches it move), and a probe on it."""
    out = tmp_path_factory.mktemp("console")
    port = free_port()
    overrides = {**{k: str(v) for k, v in launch_presets.TELEOP_COLLECT_SIM.items()}, "console": "true",
                 "console_port": str(port), "record_path": str(out / "d2s.hdf5"), "sim_link": f"console_{os.getpid()}",
                 "teleop_repeats": "3"}  # fmt: skip
    graph = launch(Graph.load().resolve(overrides), env=ros_env, log_dir=out / "logs")
    SHOTS.mkdir(exist_ok=True)
    try:
        with GraphProbe("console_test_probe") as probe:
            poses: list[tuple[float, np.ndarray]] = []

            def on_pose(m: PoseStamped) -> None:
                poses.append((time.monotonic(), np.array([m.pose.position.x, m.pose.position.y, m.pose.position.z])))

            probe.node.create_subscription(PoseStamped, Topics.TCP_POSE, on_pose, 10)
            probe.poses = poses
            yield graph, probe, f"http://127.0.0.1:{port}/"
    finally:
        graph.stop(timeout=20)


def check_alive(graph) -> None:
    if exits := graph.exited():
        raise AssertionError(f"nodes ended: {exits}; console log:\n{graph.log_text('console')[-2000:]}")


def text(page, selector: str) -> str:
    return page.inner_text(selector).strip()


def wait_page(page, graph, predicate, what: str, timeout: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        check_alive(graph)
        if time.monotonic() > deadline:
            page.screenshot(path=str(SHOTS / "timeout.png"), full_page=True)
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def frames(page, camera: str) -> int:
    return int(page.get_attribute(f"#cam-{camera}-raw", "data-frames") or 0)


def moved(probe, graph, seconds: float) -> float:
    """The TCP's largest distance from where it was at the start of ``seconds`` of wall time (m)."""
    probe.poses.clear()
    end = time.monotonic() + seconds
    probe.spin(lambda: time.monotonic() > end, seconds + 5, "TCP poses", lambda: check_alive(graph))
    positions = np.array([p for _, p in probe.poses])
    assert len(positions) >= 5, f"{len(positions)} TCP poses in {seconds} s"
    return float(np.max(np.linalg.norm(positions - positions[0], axis=1)))


def test_the_operator_watches_collects_holds_and_resets_a_fault_from_the_page(session) -> None:
    graph, probe, url = session
    with browser_page() as page:
        deadline = time.monotonic() + WAIT_S
        while True:  # the console comes up with the graph
            try:
                page.goto(url, timeout=5000)
                break
            except Exception:
                check_alive(graph)
                assert time.monotonic() < deadline, "the console page never answered"
                time.sleep(1.0)
        wait_page(page, graph, lambda: text(page, "#link") == "live", "the page's live state")

        # both camera views update (at least 10 frames a second each, over 3 s of wall time, once running)
        wait_page(page, graph, lambda: frames(page, "external") > 0 and frames(page, "wrist") > 0, "first frames")
        before = {c: frames(page, c) for c in ("external", "wrist")}
        time.sleep(3.0)
        rates = {c: (frames(page, c) - before[c]) / 3.0 for c in before}
        fps = {c: float(text(page, f"#fps-{c}").split()[0]) for c in before}  # what reaches the console
        # the page keeps up with what the graph delivers (the graph's own rate is the machine's: bench.console
        # measures it against the 10 fps target; a ratio in one run holds on any machine)
        assert all(rates[c] > 0.5 * fps[c] for c in rates), (rates, fps)

        # the episode panel counts the steps the recorder records in the scripted session
        wait_page(page, graph, lambda: text(page, "#rec-recording").startswith("recording")
                  and int(text(page, "#rec-steps")) > 0, "an episode being recorded")  # fmt: skip
        first = int(text(page, "#rec-steps"))
        wait_page(page, graph, lambda: int(text(page, "#rec-steps")) >= first + 20, "the steps counting up")
        assert text(page, "#rec-episode").startswith("demo_")
        page.screenshot(path=str(SHOTS / "collecting.png"), full_page=True)

        # HOLD: while the teleop drives the arm, the button stops it
        wait_page(page, graph, lambda: moved(probe, graph, 1.0) > 0.005, "the arm moving under the teleop")
        page.click("#hold")
        wait_page(page, graph, lambda: text(page, "#arm-mode") == "disabled", "the arm disabled")
        time.sleep(0.5)  # the libero reference coasts a few millimetres after its last goal
        still = moved(probe, graph, 2.0)
        assert still < 0.001, f"the TCP moved {still * 1000:.2f} mm after the hold"
        assert "hold: ok: stopped" in text(page, "#notices")
        page.screenshot(path=str(SHOTS / "held.png"), full_page=True)

        # a fault in the world: the banner, with its reason, cannot be missed
        assert page.is_hidden("#fault-banner")
        probe.set_param("sim_world", "arm_fault", FAULT)
        wait_page(page, graph, lambda: page.is_visible("#fault-banner") and FAULT in text(page, "#fault-banner"),
                  "the fault banner")  # fmt: skip
        assert "ARM FAULT" in text(page, "#fault-list")
        assert FAULT in text(page, "#fault-history")
        page.screenshot(path=str(SHOTS / "fault.png"), full_page=True)

        # reset asks first and says what it does; cancelled, nothing happens; the cause still there: refused
        page.click("#reset-fault")
        assert page.is_visible("#confirm") and "stays disabled" in text(page, "#confirm-text")
        assert FAULT in text(page, "#confirm-text")
        page.screenshot(path=str(SHOTS / "reset_confirm.png"), full_page=True)
        page.click("#confirm-cancel")
        assert not page.is_visible("#confirm") and "reset" not in text(page, "#notices")
        page.click("#reset-fault")
        page.click("#confirm-ok")
        wait_page(page, graph, lambda: "reset: REFUSED" in text(page, "#notices"), "the refused reset")
        assert page.is_visible("#fault-banner")

        # the cause gone, the reset clears it, and the arm can be enabled again
        probe.set_param("sim_world", "arm_fault", "")
        page.click("#reset-fault")
        page.click("#confirm-ok")
        wait_page(page, graph, lambda: page.is_hidden("#fault-banner"), "the banner gone after the reset")
        page.click("button[data-command=enable]")
        wait_page(page, graph, lambda: text(page, "#arm-mode") == "enabled", "the arm enabled again")
        history = text(page, "#fault-history")
        assert "raised" in history and "cleared" in history
        page.screenshot(path=str(SHOTS / "recovered.png"), full_page=True)
        assert page.errors == [], page.errors
    print(f"page frames per second over 3 s: {rates}; console's arrival rates: {fps}")
