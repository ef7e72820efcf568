"""What every camera type's configuration shares: its error and the checks of its values.

Each type's config (``realsense/config.py``, ``uvc/config.py``) is validated once at start-up (a bad value
names itself there, not mid-run). The node fills it from ROS parameters (``parameter_defaults()`` gives the
typed defaults to declare; ``from_mapping`` rejects unknown keys so a typo cannot silently fall back to a
default).
"""

from __future__ import annotations

import math


class CameraConfigError(ValueError):
    pass


def check_int(cfg: object, name: str, lo: int, hi: int) -> None:
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise CameraConfigError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")


def check_positive(cfg: object, name: str) -> None:
    v = getattr(cfg, name)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (math.isfinite(v) and v > 0):
        raise CameraConfigError(f"{name} must be a positive number, got {v!r}")
    object.__setattr__(cfg, name, float(v))


def check_type(cfg: object, name: str, kind: type) -> None:
    v = getattr(cfg, name)
    if not isinstance(v, kind):
        raise CameraConfigError(f"{name} must be a {kind.__name__}, got {v!r}")
