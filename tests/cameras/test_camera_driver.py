"""CameraDriver over the sim backend: fresh frames only, never a wait, no copy when nothing is new."""

from __future__ import annotations

import time

import numpy as np
import pytest

from camera_driver.driver import CameraDriver
from camera_driver.sim_backend import SimCameraBackend
from libero_workcell.contract import IMAGE_SIZE
from transports.sim_link import SimLink


def frame(value: int) -> np.ndarray:
    return np.full((IMAGE_SIZE, IMAGE_SIZE, 3), value, np.uint8)


@pytest.fixture()
def rig():
    link = SimLink.in_memory()
    backend = SimCameraBackend(link, "wrist")
    return link, backend, CameraDriver(backend, max_frame_age=0.2)


def test_no_frame_yet(rig) -> None:
    _, _, driver = rig
    assert driver.read_latest() == (None, "no frame yet")


def test_fresh_frame_returned_once_then_no_new_frame(rig) -> None:
    link, _, driver = rig
    link.write_frame(1, 1, 0.05, frame(9), fovy=60.0)
    f, reason = driver.read_new()
    assert reason == "ok" and f.index == 1 and f.rgb.mean() == 9 and f.fovy == 60.0
    assert driver.read_new() == (None, "no new frame")
    link.write_frame(1, 2, 0.10, frame(10))
    assert driver.read_new()[0].index == 2


def test_stale_frame_is_refused_not_waited_for(rig) -> None:
    link, _, driver = rig
    link.write_frame(1, 1, 0.05, frame(9))
    link._rec["cam_wall_time"][1] = time.time() - 1.0  # the camera stalled a second ago
    t0 = time.monotonic()
    f, reason = driver.read_latest()
    assert f is None and "old" in reason
    assert time.monotonic() - t0 < 0.01
    assert driver.stale_reads == 1


def test_unchanged_index_costs_no_frame_copy(rig) -> None:
    link, backend, driver = rig
    link.write_frame(1, 1, 0.05, frame(9))
    driver.read_new()
    copies = []
    original = backend.latest
    backend.latest = lambda: copies.append(1) or original()
    for _ in range(100):
        driver.read_new()
    assert copies == []


def test_other_camera_is_independent(rig) -> None:
    link, _, driver = rig
    link.write_frame(0, 5, 0.05, frame(200))  # external only
    assert driver.read_latest() == (None, "no frame yet")


def test_max_frame_age_must_be_positive(rig) -> None:
    _, backend, _ = rig
    with pytest.raises(ValueError, match="max_frame_age"):
        CameraDriver(backend, max_frame_age=0.0)
