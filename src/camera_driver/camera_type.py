"""What a camera type is to the stack: one folder (``realsense/``, ``uvc/``) and one line in :mod:`.registry`.

A type's folder holds its configuration (a :class:`~libero_workcell.config_base.MappedConfig`: its settings are the
node's parameters under the type's name, ``realsense.serial``, ``uvc.device``) and its backend (a
``CameraBackend`` over a ``FrameSource``: :mod:`camera_driver.capture` gives the capture thread). Its
``__init__`` describes it with a :class:`CameraType`, and nothing else in the node, its factory or ``workcell
check`` names a type.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from libero_workcell.config_base import MappedConfig


@dataclass(frozen=True)
class CameraType:
    name: str  # the node's device_type, and the prefix of its settings
    config: type[MappedConfig]
    # Its frame source and its backend, imported when first asked for: a device library (pyrealsense2, cv2) loads
    # only for the camera in use. source(config) opens and grabs (the preflight's probe); backend(camera, config)
    # runs it on a capture thread (the node).
    source: Callable[[], Callable[[Any], Any]]
    backend: Callable[[], Callable[[str, Any], Any]]
    describe: Callable[[Any], str]  # the device a config names, as `workcell check` shows it
    todo: str  # what to look at when it gives no frame
