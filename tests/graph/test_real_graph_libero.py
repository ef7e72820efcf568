"""LIBERO's action response on the REAL backend path: aubo_bridge (default ``action_response: libero``) on the
ARCS emulator through pyaubo_sdk, driven through DDS with a sequence robosuite 1.4.0 was measured on.

test_real_graph.py pins exact displacements with goal_delta; here the default response's shape reaches the
emulated controller's joints: a held +0.2 in x moves the arm as robosuite's Panda moved (46.6 mm over the
20 steps, then a few millimetres of coasting), not 200 mm.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import TEST_OUTPUT, ros_probe, wait_for
from emulators.arcs_emulator import ArcsEmulator
from emulators.modbus_devices import CtagEmulator
from emulators.serial_link import SocatPair
from real_graph_probe import Probe, settle

from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell import ros_msgs
from libero_workcell.contract import SOURCE_POLICY, Services
from sim_bridge.response_reference import load_reference
from workcell.bringup import Graph
from workcell.launcher import launch

pytestmark = [pytest.mark.ros, pytest.mark.slow]


@pytest.fixture(scope="module")
def rig() -> Iterator[tuple[ArcsEmulator, Any]]:
    pair = SocatPair()
    gripper = CtagEmulator(pair.a)
    arm = ArcsEmulator(q0=[float(v) for v in HOME_Q]).start()
    overrides = ["use_sim:=false", "aubo_bridge.active_source:=policy", "aubo_bridge.arcs.ip:=127.0.0.1",
                 f"aubo_bridge.arcs.rpc_port:={arm.port}", f"aubo_bridge.gripper.port:={pair.b}"]  # fmt: skip
    (spec,) = [s for s in Graph.load().resolve(overrides) if s.name == "aubo_bridge"]
    assert spec.parameters["action_response"] == "libero"  # the default reaches the real profile
    running = launch([spec], env=dict(os.environ), log_dir=TEST_OUTPUT / "test_real_graph_libero")
    try:
        with ros_probe("real_libero_probe") as node:
            probe = Probe(node)
            assert wait_for(lambda: probe.state is not None and probe.diag_seq > 0, 60), "aubo_bridge did not come up"
            yield arm, probe
    finally:
        codes = running.stop(timeout=10)
        arm.stop()
        gripper.close()
        pair.close()
        assert codes == {"aubo_bridge": 0}, codes


def test_a_held_action_moves_the_emulated_arm_as_robosuite_moved(rig) -> None:
    arm, probe = rig
    seq = next(s for s in load_reference() if s.name == "hold_x_0.2")
    ok, msg = probe.call(Services.ARM_ENABLE)
    assert ok, msg
    p0 = fk(settle(arm))[0]
    t0 = time.perf_counter()
    for k, action in enumerate(seq.actions):  # 10 zero, 20 x +0.2, 20 zero, at 20 Hz
        probe.publish(ros_msgs.action_msg(action, SOURCE_POLICY))
        time.sleep(max(0.0, t0 + (k + 1) * 0.05 - time.perf_counter()))
    moved = fk(settle(arm))[0] - p0
    diag = probe.fresh_diag()
    assert diag["mode"] != "fault" and diag.get("count_accepted") == str(len(seq.actions)), diag
    robosuite = seq.pos[-1] - seq.pos[0]
    assert abs(moved[0] - robosuite[0]) <= 0.10 * robosuite[0], (moved, robosuite)  # ~50 mm, not 200
    assert np.linalg.norm(moved[1:]) < 2e-3  # straight along x
