"""The camera types the workcell knows, by name: a new type is a folder of its own (:mod:`.camera_type`) and one
entry in :data:`TYPES`."""

from __future__ import annotations

from typing import Final

from camera_driver import realsense, uvc
from camera_driver.camera_type import CameraType

TYPES: Final[dict[str, CameraType]] = {t.name: t for t in (realsense.TYPE, uvc.TYPE)}

# Which type each camera is by default (LIBERO-Industry workcell: RealSense on the wrist, UVC outside).
DEFAULT_DEVICE_TYPE: Final = {"wrist": "realsense", "external": "uvc"}


def camera_type(device_type: str, camera: str) -> CameraType:
    """The type ``device_type`` names ("": ``camera``'s default); ValueError listing the known ones."""
    name = device_type or DEFAULT_DEVICE_TYPE.get(camera, "")
    try:
        return TYPES[name]
    except KeyError:
        raise ValueError(f"device_type must be one of {tuple(TYPES)} (or empty for the default), "
                         f"got {device_type!r}") from None  # fmt: skip
