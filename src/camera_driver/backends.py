"""Pick a camera's backend: the simulated world's render, or a real device by its type (the one factory).

Real backends are imported lazily (:mod:`camera_driver.camera_type`): pyrealsense2 and cv2 load only for the camera
in use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from camera_driver.config import CameraConfigError
from camera_driver.driver import CameraBackend
from camera_driver.registry import TYPES, camera_type
from libero_workcell.contract import CAMERA_NAMES


def make_real_backend(name: str, config: Any) -> CameraBackend:
    """The real backend for ``config`` (a registered type's config), its capture thread running (the
    CameraBackend protocol plus ``status``, ``last_error``, ``diagnostics()``)."""
    for kind in TYPES.values():
        if isinstance(config, kind.config):
            return kind.backend()(name, config)
    raise CameraConfigError(f"no real camera backend for {type(config).__name__}")


def make_backend(use_sim: bool, sim_link: str, camera: str, device_type: str,
                 settings: Mapping[str, Mapping[str, Any]]) -> CameraBackend:  # fmt: skip
    """The backend the node's parameters ask for (``settings``: each type's settings, by type name)."""
    if camera not in CAMERA_NAMES:
        raise ValueError(f"camera_name must be one of {CAMERA_NAMES}, got {camera!r}")
    if use_sim:
        from camera_driver.sim_backend import SimCameraBackend
        from transports.sim_link import SimLink

        return SimCameraBackend(SimLink.attach(sim_link), camera)
    kind = camera_type(device_type, camera)
    return make_real_backend(camera, kind.config.from_mapping(settings[kind.name]))
