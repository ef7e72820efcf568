"""The gripper registry: models by name, their stroke, their transport paths and the parameters the node declares."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from conftest import wait_for
from emulators.modbus_devices import CtagEmulator

from aubo_bridge.backends.factory import DEVICE_PARAMS, GRIPPER_PARAMS, GRIPPER_TOOL_PARAMS
from gripper import registry
from gripper.ctag.modbus_backend import CtagConfig, CtagGripperBackend
from gripper.ctag.tool_backend import CtagToolConfig
from gripper.model import PATHS, TOOL_SESSION_FIELDS


def test_unknown_model_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown gripper model 'robotiq2f85'; known: ctag2f90d"):
        registry.model("robotiq2f85")
    assert registry.model("ctag2f90d") is registry.MODELS["ctag2f90d"]


def test_the_default_model_is_the_ctag_and_its_fingers_are_the_sims() -> None:
    from sim_cell import scene

    m = registry.default_model()
    assert m.name == registry.DEFAULT_MODEL == "ctag2f90d"
    assert m.stroke == 0.090 and m.fingers == 2
    assert scene.FINGER_STROKE == 0.045  # bit for bit: the scene's slide joints are unchanged


def test_an_unknown_path_names_the_models_paths() -> None:
    m = registry.default_model()
    assert tuple(m.load_paths()) == PATHS
    with pytest.raises(ValueError, match=r"gripper_path must be one of \('modbus', 'tool'\) for gripper model"):
        m.path("bluetooth")


def test_the_ctag_parameters_keep_their_names_and_defaults() -> None:
    """gripper.* and gripper_tool.* as before the registry: a cell file written for them still applies."""
    assert registry.path_parameters() == {"gripper": GRIPPER_PARAMS, "gripper_tool": GRIPPER_TOOL_PARAMS}
    assert CtagConfig.parameter_defaults() == GRIPPER_PARAMS
    tool = CtagToolConfig.parameter_defaults()
    assert {k: v for k, v in tool.items() if k not in TOOL_SESSION_FIELDS} == GRIPPER_TOOL_PARAMS
    assert set(TOOL_SESSION_FIELDS) < set(tool)  # the arm's arcs.* fill them
    for prefix, defaults in registry.path_parameters().items():
        assert all(DEVICE_PARAMS[f"{prefix}.{k}"] == v for k, v in defaults.items())


def test_reading_the_stroke_imports_no_driver() -> None:
    """Jobs and the scene read the stroke: pymodbus and the ARCS SDK load only when a backend is built."""
    code = ("import sys; from gripper.registry import default_model; import preferences.segment; "
            "default_model().stroke; print(sorted(m for m in ('pymodbus', 'pyaubo_sdk', 'gripper.ctag.modbus_backend') "
            "if m in sys.modules))")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


@pytest.fixture
def ctag(link) -> Iterator[CtagEmulator]:  # type: ignore[no-untyped-def]
    emu = CtagEmulator(link.device_port)
    yield emu
    emu.close()


def test_the_modbus_path_builds_the_ctag_backend_on_its_bus(link, ctag: CtagEmulator) -> None:  # type: ignore[no-untyped-def]
    path = registry.default_model().path("modbus")
    backend = path.build({**path.defaults, "port": link.client_port})
    try:
        assert isinstance(backend, CtagGripperBackend)
        assert wait_for(lambda: backend.read().fault is None, 3.0), backend.read()
        backend.command(1.0)
        assert wait_for(lambda: backend.read().coord > 0.99, 5.0), backend.read()
    finally:
        backend.close()
