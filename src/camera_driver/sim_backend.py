"""Camera backend on the shared simulated workcell: frames rendered by the sim world."""

from __future__ import annotations

from camera_driver.driver import Frame
from transports.sim_link import SimLink


class SimCameraBackend:
    def __init__(self, link: SimLink, name: str) -> None:
        self._link = link
        self.name = name

    def latest(self) -> Frame | None:
        f = self._link.read_frame(self.name)
        if f is None:
            return None
        return Frame(self.name, f.frame, f.wall_time, f.rgb, f.fovy)

    def latest_index(self) -> int:
        return self._link.frame_index(self.name)

    def close(self) -> None:
        pass
