"""Panda-to-AUBO retargeting: the seed's law, and the AUBO following real Panda TCP paths through the driver.

The paths are robosuite 1.4.0's Panda under OSC_POSE (tests/data/robosuite_osc_response.json): real
Panda motion, up to 12 mm per step, steps, reversals and rotations. The AUBO follows each with
k = 3 through the arm driver's default (libero) response.
"""

from __future__ import annotations

import numpy as np
import pytest
from arm_rig import IdealArm, IdealGripper, ManualClock, run_control_period
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver
from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import SOURCE_POLICY
from libero_workcell.demo_reading import TcpPath
from libero_workcell.tracking_law import TRACKING_GAIN, tracking_action
from sim_bridge.response_reference import load_reference
from sim_bridge.retarget import follow

SEQUENCES = {s.name: s for s in load_reference()}
# Paths that reverse (the sine and the Lissajous path, every 0.25-0.5 s) or rotate while the response's Panda
# turns (rx, the rz impulse, the combined sequences: robosuite's OSC then also translates the TCP, which the
# one-step-ahead law corrects a step late) are followed within 3 mm (1.99-2.60 mm here); every other path stays
# under the seed's 2 mm (0.4-1.2 mm).
WITHIN_3_MM = ("sine_x_0.3_1hz", "lissajous_yz_0.3", "rot_rx_pos_0.1", "rot_rx_neg_0.1", "impulse_rz_0.5",
               "combined_0.2_-0.1_0.15_0.05_-0.05_0.1", "combined_rotation_part")  # fmt: skip
POS_RMS = dict.fromkeys(WITHIN_3_MM, 3.0e-3)


def test_the_law_is_k_times_the_error_over_the_scales_clipped() -> None:
    R = Rotation.from_rotvec([0.0, 0.0, 0.3]).as_matrix()
    a = tracking_action([0.01, -0.002, 0.0], np.eye(3), np.zeros(3), R.T @ np.eye(3) @ np.eye(3), 0.5)
    np.testing.assert_allclose(a[:3], [0.6, -0.12, 0.0])  # 3 * error / 0.05
    np.testing.assert_allclose(a[3:6], [0.0, 0.0, 1.0])  # 3 * 0.3 / 0.5 = 1.8, clipped
    assert a[6] == 0.5
    a = tracking_action([1.0, -1.0, 0.0], np.eye(3), np.zeros(3), np.eye(3), 3.0)
    np.testing.assert_allclose(a, [1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    a = tracking_action([0.01, 0, 0], np.eye(3), np.zeros(3), np.eye(3), -1.0, gain=1.0)
    np.testing.assert_allclose(a[:3], [0.2, 0, 0])
    assert TRACKING_GAIN == 3.0


def test_a_path_started_elsewhere_keeps_its_displacement_and_rotation() -> None:
    seq = SEQUENCES["combined_0.2_-0.1_0.15_0.05_-0.05_0.1"]
    path = TcpPath(seq.pos, seq.R, np.zeros(len(seq.pos)))
    p0, R0 = fk(HOME_Q)
    mapped = path.mapped_to(p0, R0)
    np.testing.assert_allclose(mapped.pos[0], p0)
    np.testing.assert_allclose(mapped.R[0], R0, atol=1e-12)
    np.testing.assert_allclose(mapped.pos - mapped.pos[0], seq.pos - seq.pos[0])
    for k in (5, 20, 40):
        np.testing.assert_allclose(mapped.R[k] @ mapped.R[0].T, seq.R[k] @ seq.R[0].T, atol=1e-9)


@pytest.mark.parametrize(
    "pos, R, grip, message",
    [
        (np.zeros((5, 2)), np.tile(np.eye(3), (5, 1, 1)), np.zeros(5), "pos"),
        (np.zeros((5, 3)), np.tile(np.eye(3), (4, 1, 1)), np.zeros(5), "R"),
        (np.zeros((5, 3)), np.tile(np.eye(3), (5, 1, 1)), np.zeros(4), "gripper"),
        (np.zeros((1, 3)), np.tile(np.eye(3), (1, 1, 1)), np.zeros(1), ">= 2 steps"),
        (np.full((5, 3), np.nan), np.tile(np.eye(3), (5, 1, 1)), np.zeros(5), "non-finite"),
    ],
)
def test_a_malformed_path_is_refused_with_what_is_wrong(pos, R, grip, message) -> None:
    with pytest.raises(ValueError, match=message):
        TcpPath(pos, R, grip)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_the_aubo_follows_a_panda_path_within_2_or_3_mm_and_1_degree(name) -> None:
    seq = SEQUENCES[name]
    clock = ManualClock()
    arm = IdealArm(clock, HOME_Q)
    driver = ArmDriver(ArmConfig(), arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    assert driver.enable()[0]
    gripper = np.r_[seq.actions[:, 6], seq.actions[-1, 6]]
    path = TcpPath(seq.pos, seq.R, gripper).mapped_to(*fk(arm.q))

    def step(a: np.ndarray) -> None:
        res = driver.submit_action(a, SOURCE_POLICY)
        assert res.accepted, res.reason
        run_control_period(driver, clock)

    tracking = follow(path, lambda: fk(arm.q), step)
    assert tracking.pos_rms <= POS_RMS.get(name, 2e-3), tracking.pos_rms
    assert np.degrees(tracking.rot_rms) <= 1.0, np.degrees(tracking.rot_rms)
    np.testing.assert_array_equal(tracking.actions[:, 6], gripper[:-1])  # the source's gripper schedule
    assert np.all(np.abs(tracking.actions) <= 1.0)
