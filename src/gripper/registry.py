"""The gripper models the workcell knows, by name.

A new model is a folder of its own (config, protocol, backends; see :mod:`gripper.ctag`) whose
:class:`~gripper.model.GripperModel` gets one entry in :data:`MODELS`. The aubo_bridge node picks one with
its ``gripper_model`` parameter; the stroke jobs measure grasps with, and the simulated scene's fingers, are
the :data:`DEFAULT_MODEL`'s.
"""

from __future__ import annotations

from typing import Any, Final

from gripper.ctag import model as ctag
from gripper.model import GripperModel

MODELS: Final[dict[str, GripperModel]] = {m.name: m for m in (ctag.MODEL,)}
DEFAULT_MODEL: Final = "ctag2f90d"


def model(name: str) -> GripperModel:
    """The model called ``name``, or a ValueError listing the known ones."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown gripper model {name!r}; known: {', '.join(sorted(MODELS))}") from None


def default_model() -> GripperModel:
    return MODELS[DEFAULT_MODEL]


def path_parameters() -> dict[str, dict[str, Any]]:
    """Every model's per-path parameter defaults by prefix ({prefix: {field: default}}): the node declares them
    all, so any model can be selected and set up through the same graph file; no two paths may share a prefix."""
    out: dict[str, dict[str, Any]] = {}
    for m in MODELS.values():
        for name, path in m.load_paths().items():
            if path.prefix in out:
                raise ValueError(f"gripper model {m.name}, path {name}: parameter prefix {path.prefix!r} is taken")
            out[path.prefix] = dict(path.defaults)
    return out
