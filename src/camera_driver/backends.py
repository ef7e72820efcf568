"""Pick a camera's backend: the simulated world's render, or a real device by type (the one factory).

Real backends are imported lazily: pyrealsense2 and cv2 load only for the camera in use.
"""

from __future__ import annotations

from camera_driver.config import DEFAULT_DEVICE_TYPE, DEVICE_TYPES, CameraConfigError, RealSenseConfig, UvcConfig
from camera_driver.driver import CameraBackend
from libero_workcell.contract import CAMERA_NAMES


def make_real_backend(name: str, config: RealSenseConfig | UvcConfig) -> CameraBackend:
    """The real backend for ``config``, its capture thread running (a RealSenseBackend or UvcBackend: the
    CameraBackend protocol plus ``status``, ``last_error``, ``diagnostics()``)."""
    if isinstance(config, RealSenseConfig):
        from camera_driver.realsense_backend import RealSenseBackend

        return RealSenseBackend(name, config)
    if isinstance(config, UvcConfig):
        from camera_driver.uvc_backend import UvcBackend

        return UvcBackend(name, config)
    raise CameraConfigError(f"no real camera backend for {type(config).__name__}")


def make_backend(
    use_sim: bool, sim_link: str, camera: str, device_type: str, realsense: dict, uvc: dict
) -> CameraBackend:
    """The backend the node's parameters ask for."""
    if camera not in CAMERA_NAMES:
        raise ValueError(f"camera_name must be one of {CAMERA_NAMES}, got {camera!r}")
    if use_sim:
        from camera_driver.sim_backend import SimCameraBackend
        from transports.sim_link import SimLink

        return SimCameraBackend(SimLink.attach(sim_link), camera)
    device_type = device_type or DEFAULT_DEVICE_TYPE[camera]
    if device_type == "realsense":
        return make_real_backend(camera, RealSenseConfig.from_mapping(realsense))
    if device_type == "uvc":
        return make_real_backend(camera, UvcConfig.from_mapping(uvc))
    raise ValueError(f"device_type must be one of {DEVICE_TYPES} (or empty for the default), got {device_type!r}")
