"""The headset path end to end: the real xrobotoolkit-sdk, talking to a protocol-level emulator of its
PC service on loopback (tests/emulators/xr_pc_service.py), into the teleop core.

One child process per scenario holds the SDK (tests/fixtures/xr_sdk_reader.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from libero_workcell import layout
from libero_workcell.contract import GRIPPER_CLOSE, make_state
from teleop_pico.core import Button, Status, TeleopCore
from teleop_pico.mapping import ControllerSample

pytest.importorskip("xrobotoolkit_sdk")
pytest.importorskip("grpc")
from conftest import FIXTURES
from emulators.xr_pc_service import XrPcService, holding_the_port

READER = FIXTURES / "xr_sdk_reader.py"
STATE = make_state(layout.HOME_TCP_POS, Rotation.from_matrix(layout.HOME_TCP_ROTMAT).as_rotvec(), 0.0)
Q = (0.0, 0.0, 0.0, 1.0)


@pytest.fixture
def free_port() -> Iterator[None]:
    """The PC service's port, this test's turn on it (the SDK's port is fixed; other tests may want it)."""
    with holding_the_port():
        yield


class Reader:
    def __init__(self) -> None:
        paths = [str(READER.parent.parent / "src"), os.environ.get("PYTHONPATH", "")]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        self.proc = subprocess.Popen(
            [sys.executable, str(READER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self._until("READY")

    def _until(self, marker: str) -> str:
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the SDK reader exited (code {self.proc.poll()}) before {marker}")
            if marker in line:
                return line.split(marker, 1)[1].strip()

    def read(self) -> ControllerSample | None:
        self.proc.stdin.write("read\n")
        self.proc.stdin.flush()
        # the first JSON value after the marker: the SDK's own text, printed without newlines, may follow it
        raw, _ = json.JSONDecoder().raw_decode(self._until("SAMPLE "))
        return None if raw is None else ControllerSample(**{**raw, "pose": tuple(raw["pose"])})

    def wait_for(self, predicate, timeout: float = 5.0) -> ControllerSample:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            s = self.read()
            if s is not None and predicate(s):
                return s
            time.sleep(0.02)
        raise AssertionError(f"no matching sample within {timeout} s; last {s}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.write("close\n")
            self.proc.stdin.flush()
            self._until("CLOSED")
            self.proc.wait(timeout=10)


def test_without_its_service_the_sdk_gives_zeros_and_the_arm_holds(free_port) -> None:
    reader = Reader()
    try:
        s = reader.read()
    finally:
        reader.close()
    assert s.pose == (0.0,) * 7 and s.grip == 0.0 and not s.a
    step = TeleopCore(arm_enabled=True).step(s, STATE, 0.0)
    assert step.status is Status.NO_TRACKING and not np.any(step.action[:6])


def test_the_sdk_streams_the_controller_into_the_clutch_trigger_and_buttons(free_port) -> None:
    service = XrPcService().start()
    reader = Reader()
    try:
        p0 = (0.1, 1.0, -0.3, *Q)
        service.set_right(p0, trigger=0.75, grip=1.0, a=True)
        first = reader.wait_for(lambda s: s.pose == pytest.approx(p0))
        assert first.trigger == 0.75 and first.grip == 1.0 and first.a and not first.b
        assert abs(first.stamp_ns - time.time_ns()) < 2e9  # the service's clock, passed through
        core = TeleopCore(arm_enabled=True)
        latched = core.step(first, STATE, 0.0)
        assert latched.status is Status.FOLLOWING and latched.presses == (Button.A,)
        assert latched.action[6] == GRIPPER_CLOSE
        service.set_right((0.1, 1.0, -0.31, *Q), trigger=0.75, grip=1.0, a=True)  # 10 mm forward
        moved = reader.wait_for(lambda s: s.pose[2] == pytest.approx(-0.31))
        step = core.step(moved, STATE, 0.05)
        np.testing.assert_allclose(step.action[:6], [0.6, 0, 0, 0, 0, 0], atol=1e-5)  # float32 on the wire
        assert step.presses == ()  # A still held: no second press

        service.stop()  # the service drops: the SDK keeps its last values, the time stamp stops
        time.sleep(0.3)
        stale = [reader.read() for _ in range(3)]
        assert len({s.stamp_ns for s in stale}) == 1 and stale[0].pose == moved.pose
        steps = [core.step(s, STATE, 1.0 + 0.1 * i) for i, s in enumerate(stale)]
        assert steps[-1].status is Status.FROZEN and not np.any(steps[-1].action[:6])

        time.sleep(1.0)  # (a service back within the SDK's beat period can go unnoticed by it)
        service = XrPcService().start()  # back: the SDK reconnects on its own
        service.set_right((0.2, 1.0, -0.3, *Q), grip=1.0)
        back = reader.wait_for(lambda s: s.pose[0] == pytest.approx(0.2), timeout=10.0)
        resumed = core.step(back, STATE, 5.0)
        assert resumed.status is Status.FOLLOWING
        np.testing.assert_allclose(resumed.action[:6], 0.0, atol=1e-9)  # a fresh latch: no jump
    finally:
        reader.close()
        service.stop()
