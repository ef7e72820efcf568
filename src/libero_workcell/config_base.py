"""The one convention for device configs built from ROS parameters.

Every device config is a frozen dataclass that validates itself in
``__post_init__``; this mixin adds the two things each of them needs from
ROS: ``from_mapping`` (unknown keys are an error: a typo in a launch file
must not pass silently) and ``parameter_defaults`` (each field as a ROS
parameter default, so nodes declare parameters without re-typing names).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, ClassVar, TypeVar

import numpy as np

_C = TypeVar("_C", bound="MappedConfig")


def ros_value(value: Any) -> Any:
    """A field value as ROS declares it: arrays become lists of floats, tuples lists, everything else stays."""
    if isinstance(value, np.ndarray):
        return [float(v) for v in value]
    if isinstance(value, tuple):
        return list(value)
    return value


class MappedConfig:
    error: ClassVar[type[ValueError]] = ValueError  # the config's own error type
    label: ClassVar[str] = "config"  # what the config is, in messages ("arm", "gripper", ...)

    @classmethod
    def from_mapping(cls: type[_C], values: dict[str, Any]) -> _C:
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(values) - known)
        if unknown:
            raise cls.error(f"unknown {cls.label} config keys {unknown}; known: {sorted(known)}")
        return cls(**values)

    @classmethod
    def parameter_defaults(cls) -> dict[str, Any]:
        defaults = cls()
        return {f.name: ros_value(getattr(defaults, f.name)) for f in fields(cls)}  # type: ignore[arg-type]
