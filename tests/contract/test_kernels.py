"""The servo path's kernels (libero_workcell.kernels): Python until a process needs them compiled, the same answers
either way, and numba's cost paid only by a process that runs the hot path."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from aubo_bridge.model import kinematics
from libero_workcell import kernels, rotations


def test_a_process_that_only_needs_the_chain_never_imports_numba_and_ik_compiles_every_kernel() -> None:
    code = (
        "import sys\n"
        "from aubo_bridge.model import kinematics as k\n"
        "from libero_workcell import kernels\n"
        "p, R = k.fk(k.HOME_Q)\n"
        "print('numba' in sys.modules, kernels.compiled())\n"
        "assert k.ik(p, R, k.HOME_Q).converged\n"
        "print('numba' in sys.modules, kernels.compiled(), type(k._chain).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split("\n")[:2] == ["False False", "True True CPUDispatcher"], out.stdout + out.stderr


@pytest.fixture(scope="module")
def compiled() -> None:
    kernels.compile_kernels()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-3.0, 3.0), min_size=6, max_size=6))
def test_the_chain_gives_the_same_bits_compiled_or_not(compiled, q) -> None:
    q = np.array(q)
    ours = kinematics._chain(q, kinematics._ORIGIN_R, kinematics._ORIGIN_P, kinematics.TOOL_OFFSET)
    python = kinematics._chain.py_func(q, kinematics._ORIGIN_R, kinematics._ORIGIN_P, kinematics.TOOL_OFFSET)
    for a, b in zip(ours, python, strict=True):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(-1.0, 1.0), min_size=3, max_size=3).filter(lambda v: np.linalg.norm(v) > 1e-3),
       st.floats(0.0, np.pi), st.booleans())  # fmt: skip
def test_the_rotation_error_is_scipys_at_every_angle_and_the_same_compiled(compiled, axis, angle, near_pi) -> None:
    """Within 0.01 rad of pi the closed form is ill-conditioned: the quaternion route takes over there."""
    if near_pi:
        angle = np.pi - angle * 3e-3
    v = np.array(axis) / np.linalg.norm(axis) * angle
    R = Rotation.from_rotvec(v).as_matrix()
    C = Rotation.from_rotvec([0.1, -0.2, 0.3]).as_matrix()
    target = R @ C
    expected = Rotation.from_matrix(target @ C.T).as_rotvec()
    got = rotations.rotation_error(target, C)
    if np.linalg.norm(expected) < np.pi - 1e-6:  # (at pi itself the sign of the axis is either)
        np.testing.assert_allclose(got, expected, atol=1e-9)
    np.testing.assert_array_equal(got, rotations.rotation_error.py_func(target, C))


def test_the_near_pi_branch_is_scipys_conversion_bit_for_bit(compiled) -> None:
    rng = np.random.default_rng(0)
    for _ in range(200):
        axis = rng.normal(size=3)
        E = Rotation.from_rotvec(axis / np.linalg.norm(axis) * (np.pi - rng.uniform(0.0, 0.01))).as_matrix()
        np.testing.assert_array_equal(rotations.matrix_rotvec(E), Rotation.from_matrix(E).as_rotvec())


def test_a_module_imported_after_the_kernels_were_compiled_gets_its_kernels_compiled() -> None:
    """IK never runs numpy's LAPACK as Python, whatever the process compiled before importing the chain."""
    code = (
        "from libero_workcell import osc_law, kernels\n"
        "kernels.compile_kernels()\n"
        "from aubo_bridge.model import kinematics as k\n"
        "print(type(k._ik).__name__, type(k._chain).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["CPUDispatcher", "CPUDispatcher"], out.stdout + out.stderr


def test_every_servo_path_calls_each_kernel_with_the_argument_types_the_warmers_compiled() -> None:
    """The Panda's law (columns picked from MuJoCo's Jacobian come in Fortran order), the action response and IK
    after what scripts/bootstrap.sh compiles: no kernel is compiled for a second layout (seconds in a loaded suite,
    ci57)."""
    code = (
        "import json\n"
        "import numpy as np\n"
        "import aubo_bridge.model.kinematics as k, libero_workcell.osc_law\n"
        "from libero_workcell import kernels\n"
        "kernels.compile_kernels()\n"
        "warm = kernels.signatures()\n"
        "from sim_bridge.panda.standalone import StandalonePanda\n"
        "from libero_workcell.action_response import Goal, PandaResponse\n"
        "panda = StandalonePanda()\n"
        "for _ in range(3):\n"
        "    panda.step(np.array([0.5, 0.0, 0.0, 0.0, 0.2, 0.0, 1.0]))\n"
        "p, R = k.fk(k.HOME_Q)\n"
        "response = PandaResponse(0.01)\n"
        "response.reset(p, R)\n"
        "response.step(Goal(p + 0.01, R))\n"
        "assert k.ik(p + 0.01, R, k.HOME_Q).converged\n"
        "print(json.dumps([warm, kernels.signatures()]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=True)
    warm, after = json.loads(out.stdout.splitlines()[-1])
    # the entry points were loaded by their warmers (a kernel called only by other kernels is compiled into them)
    assert warm["libero_workcell.osc_law._control"] == warm["aubo_bridge.model.kinematics._ik"] == 1, warm
    assert max(after.values()) == 1, after  # one layout each: nothing compiled a second time
