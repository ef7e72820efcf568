"""The real pyaubo_sdk RtdeClient against the emulator's RTDE side: the handshake, the recipe it sends, state
at 500 Hz with the enums decoded, a stream gone silent, a dropped connection, the keepalive (docs/rtde.md)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import numpy as np
import pyaubo_sdk
import pytest
from conftest import wait_for
from emulators.arcs_emulator import ArcsEmulator

from aubo_bridge.backends.arcs import ArcsArmBackend
from aubo_bridge.backends.arcs_config import ArcsConfig
from aubo_bridge.config import ConfigError
from libero_workcell.loopback import free_port
from transports.arcs.rtde import retire
from transports.errors import BackendError

# pyaubo_sdk 0.24.1 crashes the process that holds a streamed RTDE client, on its own thread, now and then when
# it closes (docs/rtde.md); the node keeps its client in a child process, these tests hold one here. The suite runs
# them on an xdist worker (test.sh), so such a crash fails one attempt, which runs again on a fresh worker.
pytestmark = pytest.mark.flaky(reruns=2)

FIELDS = ["R1_actual_q", "R1_actual_qd", "R1_robot_mode", "R1_safety_mode", "runtime_state", "line_number",
          "R1_actual_TCP_pose"]  # AuboRobot/aubo_ros2_driver's, in its order  # fmt: skip


class Subscriber:
    """What a backend would do: connect, log in, set the topic, keep each frame with its arrival time."""

    def __init__(self, port: int, hz: float = 500.0) -> None:
        self.cli = pyaubo_sdk.RtdeClient()
        self.frames: list[tuple[float, list[float], str, str, list[float]]] = []
        self.lock = threading.Lock()
        assert self.cli.connect("127.0.0.1", port) == 0
        assert self.cli.login("aubo", "123456") == 0
        channel = self.cli.setTopic(False, FIELDS, hz, 0)
        assert channel == 0
        self.cli.subscribe(channel, self._on_frame)

    def _on_frame(self, parser) -> None:
        q, _qd = parser.popVectorDouble(), parser.popVectorDouble()
        mode, safety, _runtime = parser.popRobotModeType(), parser.popSafetyModeType(), parser.popRuntimeState()
        _line, pose = parser.popInt32(), parser.popVectorDouble()
        with self.lock:
            self.frames.append((time.monotonic(), list(q), mode.name, safety.name, list(pose)))

    def count(self) -> int:
        with self.lock:
            return len(self.frames)

    def close(self) -> None:
        """As the backend closes (other ways crash the SDK: arcs_rtde._RETIRED)."""
        retire(self.cli)


@contextlib.contextmanager
def silenced(emu) -> Iterator[None]:
    """The emulator's stream paused while an SDK client in this process closes: pyaubo_sdk 0.24.1 can crash its
    process when a client closes while frames arrive (docs/rtde.md). In the node that happens in the state
    child process, where it is a fault and a restart; here it would end the test run."""
    emu.rtde_silence()
    time.sleep(0.05)
    try:
        yield
    finally:
        emu.rtde_silence(False)


@pytest.fixture
def arcs_options() -> dict:
    """conftest's ``emu`` for this module: the controller reports rotation vectors, the default start-up."""
    return {"tcp_orientation": "rotvec"}


def test_the_sdk_subscribes_and_reads_the_state_at_500_hz_with_string_enums_decoded(emu) -> None:
    sub = Subscriber(emu.rtde_port)
    try:
        assert wait_for(lambda: sub.count() >= 50, 2.0)
        t0, n0 = time.monotonic(), sub.count()
        time.sleep(1.0)
        rate = (sub.count() - n0) / (time.monotonic() - t0)
        assert rate > 400, rate  # 500 Hz asked; a Python emulator on a loaded 2-core machine pushes a little less
        state = emu.state()
        _, q, mode, safety, pose = sub.frames[-1]
        np.testing.assert_allclose(q, state["q"], atol=1e-9)
        np.testing.assert_allclose(pose, state["tcp_pose"], atol=1e-9)
        assert (mode, safety) == (state["mode"], state["safety"]) == ("PowerOff", "Normal")
        recipe = emu.rtde_state()["recipes"][0]
        # ("trigger" is not compared: 0.24.1 sends uninitialised memory there, e.g. -5708048)
        assert {k: recipe[k] for k in ("chanel", "frequency", "segments", "to_server")} == {
            "chanel": 0, "frequency": 500.0, "segments": FIELDS, "to_server": False}  # fmt: skip
    finally:
        with silenced(emu):
            sub.close()
    assert wait_for(lambda: emu.rtde_state()["clients"] == 0, 1.0)  # the connection closed: the stream ends


def test_a_silent_stream_delivers_nothing_and_a_dropped_one_says_so(emu) -> None:
    sub = Subscriber(emu.rtde_port)
    try:
        assert wait_for(lambda: sub.count() >= 50, 2.0)
        emu.rtde_silence()
        time.sleep(0.05)
        n = sub.count()
        time.sleep(0.3)
        assert sub.count() == n and sub.cli.hasConnected()  # connected and silent: only the frames' age shows it
        emu.rtde_silence(False)
        assert wait_for(lambda: sub.count() > n + 50, 1.0)
        emu.rtde_drop()
        assert wait_for(lambda: not sub.cli.hasConnected(), 2.0)
    finally:
        with silenced(emu):
            sub.close()


@pytest.mark.slow
def test_the_client_pings_a_connection_that_went_quiet(emu) -> None:
    sub = Subscriber(emu.rtde_port, hz=50.0)
    try:
        assert wait_for(lambda: sub.count() >= 10, 2.0)
        time.sleep(1.0)
        assert emu.rtde_state()["pings"] == 0  # data flowing: no keepalive
        emu.rtde_silence()
        t0 = time.monotonic()
        assert wait_for(lambda: emu.rtde_state()["pings"] >= 1, 8.0)
        first = time.monotonic() - t0
        assert wait_for(lambda: emu.rtde_state()["pings"] >= 3, 4.0)
        assert 2.5 < first < 6.0, first  # about 4 s of silence before the first, then one a second
    finally:
        with silenced(emu):
            sub.close()


# ---- the backend's RTDE state source --------------------------------------------------------------------
def rtde_backend(emu, **kw) -> ArcsArmBackend:
    cfg = ArcsConfig.from_mapping({"ip": "127.0.0.1", "rpc_port": emu.port, "rtde_port": emu.rtde_port,
                                   "state_source": "rtde", **kw})  # fmt: skip
    b = ArcsArmBackend(cfg)
    b.connect()
    return b


def test_the_backend_reads_the_arm_from_the_rtde_stream() -> None:
    with ArcsEmulator(boot_delay=0.05, tcp_orientation="rotvec") as emu:
        b = rtde_backend(emu, tcp_orientation="rotvec")
        try:
            n0, t0 = b.polls, time.monotonic()
            time.sleep(0.5)
            rate = (b.polls - n0) / (time.monotonic() - t0)
            assert rate > 400, rate  # frames taken, at the 500 Hz asked
            meas, state = b.read(), emu.state()
            assert meas.fault is None and meas.ready and state["mode"] == "Running"
            np.testing.assert_allclose(meas.q, state["q"], atol=1e-6)
            assert emu.rtde_state()["recipes"][0]["frequency"] == 500.0
            assert emu.state()["counts"].get("getJointPositions", 0) <= 3  # the state is not polled over RPC
            emu.protective_stop()  # the modes come by RTDE too: a stop reads as a fault at once
            assert wait_for(lambda: "ProtectiveStop" in (b.read().fault or ""), 0.5)
        finally:
            with silenced(emu):
                b.close()


def test_a_silent_rtde_stream_is_a_fault_within_the_staleness_and_a_dropped_one_at_once() -> None:
    with ArcsEmulator(boot_delay=0.05) as emu:
        b = rtde_backend(emu, state_stale_after=0.1)
        try:
            assert wait_for(lambda: b.read().fault is None, 1.0)
            emu.rtde_silence()
            t0 = time.monotonic()
            assert wait_for(lambda: "stale" in (b.read().fault or ""), 1.0)
            assert time.monotonic() - t0 < 0.1 + 0.05  # within the staleness (plus the poll of this test)
            assert not b.read().ready
            emu.rtde_silence(False)
            assert wait_for(lambda: b.read().fault is None, 1.0)
            emu.rtde_drop()
            assert wait_for(lambda: "RTDE stream" in (b.read().fault or ""), 1.0)
            b.acknowledge_fault()  # the operator's reset: a new client, the recipe sent again
            assert wait_for(lambda: b.read().fault is None, 1.0)
            assert len(emu.rtde_state()["recipes"]) >= 2
        finally:
            with silenced(emu):
                b.close()


def test_rtde_settings_are_checked_at_start() -> None:
    with pytest.raises(ConfigError, match="state_source"):
        ArcsConfig.from_mapping({"ip": "127.0.0.1", "state_source": "udp"})
    with pytest.raises(ConfigError, match="two RTDE frame periods"):
        ArcsConfig.from_mapping({"ip": "127.0.0.1", "state_source": "rtde", "rtde_hz": 10.0, "state_stale_after": 0.15})


def test_a_malformed_frame_is_a_fault_never_a_guess_and_a_refused_start_says_why() -> None:
    with ArcsEmulator(boot_delay=0.05) as emu:
        b = rtde_backend(emu)
        try:
            assert wait_for(lambda: b.read().fault is None, 1.0)
            good = b._rtde.frames
            emu.rtde_malformed()
            assert wait_for(lambda: "malformed RTDE frame" in (b.read().fault or ""), 1.0)
            assert "(5,)" in b.read().fault and not b.read().ready and b._rtde.bad_frames >= 1
            frames = b._rtde.frames
            time.sleep(0.1)
            assert b._rtde.frames == frames >= good  # nothing malformed taken as state
            emu.rtde_malformed(False)
            time.sleep(0.1)
            assert "malformed" in (b.read().fault or "")  # stays a fault until the operator resets
            with silenced(emu):  # the old client closes on a silent stream (see silenced)
                b.acknowledge_fault()
            assert wait_for(lambda: b.read().fault is None, 1.0)
        finally:
            with silenced(emu):
                b.close()
        assert wait_for(lambda: emu.rtde_state()["clients"] == 0, 1.0)  # closed: the controller ends the stream
        b.close()  # twice: nothing more
        emu.rtde_outputs(["R1_actual_q", "R1_actual_qd"])  # a controller without the modes
        with pytest.raises(BackendError, match="does not offer the fields"):
            rtde_backend(emu)
    with ArcsEmulator(boot_delay=0.05) as emu, pytest.raises(BackendError, match=r"RTDE port .* unreachable"):
        rtde_backend(emu, rtde_port=free_port())


def test_a_controller_that_never_greets_is_refused_within_the_connect_timeout() -> None:
    with ArcsEmulator(boot_delay=0.05) as emu:
        emu.rtde_no_greeting()
        t0 = time.monotonic()
        with pytest.raises(BackendError, match=r"accepted the connection but sent no greeting within 0.5 s"):
            rtde_backend(emu, connect_timeout=0.5)  # the SDK's own connect() would block until the socket closed
        assert time.monotonic() - t0 < 0.5 + 2.0  # the RPC session's start-up, then the probe's 0.5 s
        assert emu.rtde_state()["recipes"] == []  # refused before any subscription
        emu.rtde_no_greeting(False)
        b = rtde_backend(emu, connect_timeout=0.5)  # and a greeting one is taken as before
        try:
            assert wait_for(lambda: b.read().fault is None, 1.0)
        finally:
            with silenced(emu):
                b.close()
