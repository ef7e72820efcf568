"""The 7-D action means what it means in LIBERO: the driver's response against robosuite's measured one.

``tests/data/robosuite_osc_response.json`` is robosuite 1.4.0's Panda under ``OSC_POSE`` at 20 Hz
(tools/robosuite_reference.py). Every sequence is replayed through the arm driver with its default
(libero) response, and its TCP trajectory must match robosuite's within 5 % RMS of the travel, in
position and in rotation, wherever the sequence commands that component. What robosuite's Panda does
uncommanded (the translation a rotation drives through its inertia) is held too: the response is the
law on the Panda's rigid body (libero_workcell.action_response.PandaResponse), so it reproduces it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from arm_rig import IdealArm, IdealGripper, ManualClock, run_control_period

from aubo_bridge.config import ArmConfig
from aubo_bridge.driver import ArmDriver
from aubo_bridge.model.kinematics import HOME_Q, fk
from libero_workcell.contract import SOURCE_POLICY
from sim_bridge.response_reference import ReferenceSequence, compare, load_reference, replay, sim_trajectory

SEQUENCES = {s.name: s for s in load_reference()}
COMBINED = "combined_0.2_-0.1_0.15_0.05_-0.05_0.1"
TOLERANCE = 0.05  # RMS over the travel: issue 26's target
COUPLED = ("rot_rx_pos_0.1", "rot_rx_neg_0.1", COMBINED, "combined_rotation_part")


def driver_trajectory(seq: ReferenceSequence, config: ArmConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    clock = ManualClock()
    arm = IdealArm(clock, HOME_Q)
    driver = ArmDriver(config or ArmConfig(), arm, IdealGripper(clock), clock=clock, active_source=SOURCE_POLICY)
    assert driver.enable()[0]

    def submit(a: np.ndarray) -> None:
        res = driver.submit_action(a, SOURCE_POLICY)
        assert res.accepted, res.reason
        run_control_period(driver, clock)

    return replay(seq, submit, lambda: fk(arm.q))


@pytest.fixture(scope="module")
def trajectories() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every sequence through the driver with its default configuration (the libero response), once."""
    return {name: driver_trajectory(seq) for name, seq in SEQUENCES.items()}


@pytest.fixture(scope="module")
def errors(trajectories) -> dict:
    return {name: compare(seq, *trajectories[name]) for name, seq in SEQUENCES.items()}


def test_the_reference_data_covers_the_battery_the_issue_asks_for() -> None:
    names = set(SEQUENCES)
    kinds = ("hold_", "impulse_x", "const_", "ramp_", "sine_", "rot_rx", "rot_ry", "rot_rz", "combined_", "gripper")
    for kind in kinds:
        assert any(n.startswith(kind) for n in names), kind
    assert len(names) >= 20


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_the_default_response_matches_robosuite(errors, name) -> None:
    e = errors[name]
    if e.compares_pos:
        assert e.pos_ratio <= TOLERANCE, e
    if e.compares_rot:
        assert e.rot_ratio <= TOLERANCE, e


@pytest.mark.parametrize("name", COUPLED)
def test_a_rotation_drives_the_translation_robosuites_panda_shows(errors, name) -> None:
    """Under rx robosuite's TCP also translates ~28 mm, uncommanded, and the combined action's translation is
    not its translation part's: the OSC's decoupled task inertias acting through the Panda's. The response
    follows that path within 1 mm (a decoupled second-order response misses it by the whole drift)."""
    seq = SEQUENCES[name]
    drift = np.linalg.norm(seq.pos[-1] - seq.pos[seq.warmup])
    e = errors[name]
    assert e.pos_rms <= 1e-3, e
    if not seq.commands_translation:
        assert drift > 0.01  # the data's coupling is real: there is something to follow


def test_robosuite_figures_the_issue_quotes() -> None:
    """The data is what the issue measured: 20 x +0.2 moves ~47 mm at ~2.5 mm/step and coasts ~4 mm."""
    seq = SEQUENCES["hold_x_0.2"]
    x = seq.pos[seq.warmup :, 0] - seq.pos[seq.warmup, 0]
    assert 45e-3 < x[20] < 49e-3 and 2.4e-3 < x[20] - x[19] < 2.7e-3 and 3e-3 < x[-1] - x[20] < 6e-3


def test_a_held_action_moves_a_quarter_of_its_goal_offset_per_step_and_coasts(trajectories) -> None:
    """The LIBERO meaning in numbers (not a fit figure): ~2.5 mm/step for +0.2, a few mm after the last."""
    seq = SEQUENCES["hold_x_0.2"]
    pos, _ = trajectories[seq.name]
    x = pos[seq.warmup :, 0] - pos[seq.warmup, 0]
    assert 2.3e-3 < x[20] - x[19] < 2.8e-3
    assert 43e-3 < x[20] < 51e-3
    assert 2e-3 < x[-1] - x[20] < 7e-3  # coasting after the last action
    assert abs(x[-1] - x[-2]) < 1e-5  # and at rest


def test_the_goal_delta_response_is_the_other_meaning() -> None:
    """goal_delta, kept as a named mode: the same 20 x +0.2 move 200 mm and stop at once."""
    seq = SEQUENCES["hold_x_0.2"]
    pos, _ = driver_trajectory(seq, ArmConfig(action_response="goal_delta"))
    x = pos[seq.warmup :, 0] - pos[seq.warmup, 0]
    np.testing.assert_allclose(x[20], 0.2, atol=1e-4)
    np.testing.assert_allclose(x[-1], x[20], atol=1e-9)


def test_the_response_does_not_depend_on_the_servo_rate(trajectories) -> None:
    seq = SEQUENCES[COMBINED]
    assert ArmConfig().servo_hz == 100.0  # the default rate, which the trajectories ran at
    slow = trajectories[COMBINED]
    fast = driver_trajectory(seq, ArmConfig(servo_hz=500.0))
    np.testing.assert_allclose(slow[0], fast[0], atol=1e-4)  # 0.1 mm of a 96 mm path
    np.testing.assert_allclose(slow[1], fast[1], atol=1e-4)


@pytest.mark.slow
def test_the_simulated_workcell_answers_as_robosuite_does() -> None:
    """MuJoCo's AUBO (position servos with their own lag) still matches robosuite within the bound."""
    failures = []
    for seq in SEQUENCES.values():
        e = compare(seq, *sim_trajectory(seq))
        if (e.compares_pos and e.pos_ratio > TOLERANCE) or (e.compares_rot and e.rot_ratio > TOLERANCE):
            failures.append(e)
    assert not failures, failures


def test_the_fit_counts_its_iterations_on_stderr(capsys) -> None:
    """`python -m tools.fit_osc_response` (two Nelder-Mead fits, ~20 s): each fit's iterations on stderr (no total
    is known), its tables on stdout."""
    from tools.fit_osc_response import _minimize

    x = _minimize(lambda x: float((x[0] - 140.0) ** 2 + (x[1] - 0.9) ** 2), "fitting position gains", progress=True)
    np.testing.assert_allclose(x, [140.0, 0.9], atol=0.05)
    out, err = capsys.readouterr()
    assert out == "" and re.search(r"^fitting position gains: [1-9]\d*it ", err.splitlines()[-1]), err
