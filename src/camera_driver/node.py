"""camera_driver node: publishes one camera's newest fresh frame as Image + CameraInfo.

One instance per camera (``camera_name`` = external or wrist). Stamps are
the frame's capture time, not the publish time, so consumers can measure
frame age honestly.
"""

from __future__ import annotations

import threading
from typing import Any, Final

from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from sensor_msgs.msg import CameraInfo, Image

from camera_driver.backends import make_backend
from camera_driver.driver import CameraDriver
from camera_driver.registry import TYPES
from libero_workcell import ros_msgs
from libero_workcell.contract import (
    CAMERA_HZ_DEFAULT,
    CAMERA_NAMES,
    EXTERNAL_CAMERA_FRAME,
    WRIST_CAMERA_FRAME,
    Params,
    Qos,
    Topics,
)
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, declare_config, prefixed, refuse_runtime_changes
from libero_workcell.rate import SHUTDOWN_JOIN, run_loop
from libero_workcell.ros_qos import qos
from transports.node_steps import lockstep_of
from transports.stepping import TickThread

OPTICAL_FRAMES = {"external": EXTERNAL_CAMERA_FRAME, "wrist": WRIST_CAMERA_FRAME}


# Every generated parameter (each camera type's settings under its name), for docs and checks.
CONFIG_PARAMS = {k: v for t in TYPES.values() for k, v in prefixed(t.name, t.config.parameter_defaults()).items()}


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.CAMERA_NAME: "external",
    Params.CAMERA_HZ: CAMERA_HZ_DEFAULT,
    Params.MAX_FRAME_AGE: 0.2,
    "poll_hz": 200.0,
    "device_type": "",
    Params.LOCKSTEP: False,  # sim: publish each rendered frame in step with the world
    **CONFIG_PARAMS,
}


class CameraNode(Node):
    def __init__(self) -> None:
        super().__init__("camera_driver")
        declare_all(self, PARAMETERS)
        settings = {t.name: declare_config(self, t.name, t.config.parameter_defaults()) for t in TYPES.values()}
        refuse_runtime_changes(self)
        self.camera = str(self.get_parameter(Params.CAMERA_NAME).value)
        backend = make_backend(
            bool(self.get_parameter(Params.USE_SIM).value),
            str(self.get_parameter(Params.SIM_LINK).value),
            self.camera,
            str(self.get_parameter("device_type").value),
            settings,
        )
        self.driver = CameraDriver(backend, float(self.get_parameter(Params.MAX_FRAME_AGE).value))
        self.frame_id = OPTICAL_FRAMES[self.camera]
        self.lockstep = lockstep_of(self)
        sensor = qos(Qos.SENSOR_LOCKSTEP, True) if self.lockstep else qos(Qos.SENSOR)  # in lockstep every frame counts
        self._pub_image = self.create_publisher(Image, Topics.image(self.camera), sensor)
        self._pub_info = self.create_publisher(CameraInfo, Topics.camera_info(self.camera), sensor)
        self._pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        self._stop = threading.Event()
        self.published = 0
        self._status = "no frame yet"
        if self.lockstep:
            from transports.sim_lockstep import CAMERA, LockstepParticipant

            self._frame_index = CAMERA_NAMES.index(self.camera)  # this camera's frame time in a tick
            participant = LockstepParticipant(str(self.get_parameter(Params.SIM_LINK).value), self.get_name(), CAMERA,
                                              cameras=(self.camera,))  # fmt: skip
            self._ticks = TickThread(lambda: participant, self._frame_of, "camera", self._stop)
        else:
            # Frames are checked on a thread at poll_hz (a cheap counter read), not at
            # camera_hz: a sim running faster than real time delivers frames faster. Each frame carries its own
            # stamp, so the poll's timing needs no precision (rate.sleep_until).
            self._thread, _ = run_loop(float(self.get_parameter("poll_hz").value), self._poll, self._stop, "camera",
                                       precise=False)  # fmt: skip
        self.create_timer(1.0, self._publish_diag)

    def _frame_of(self, tick: Any) -> None:
        """Lockstep: the frame the world rendered at ``tick``, published with its sim time before the world moves
        on."""
        try:
            frame = self.driver.backend.latest()
            if frame is not None:
                self._publish(frame, ros_msgs.stamp_from_ns(tick.frame_time_ns[self._frame_index]))
        except Exception as exc:
            self._status = f"frame not published: {exc}"
            raise

    def _publish(self, frame, stamp) -> None:
        self._status = "ok"
        h, w, _ = frame.rgb.shape
        self._pub_image.publish(ros_msgs.image_msg(frame.rgb, stamp, self.frame_id))
        self._pub_info.publish(ros_msgs.camera_info_msg(w, h, frame.fovy, stamp, self.frame_id))
        self.published += 1

    def _poll(self) -> None:
        frame, reason = self.driver.read_new()
        if frame is None:
            if reason != "no new frame":
                self._status = reason
                self.get_logger().warning(f"{self.camera}: {reason}", throttle_duration_sec=2.0)
            return
        self._publish(frame, frame.wall_time)

    def shutdown(self) -> None:
        self._stop.set()
        if self.lockstep:
            self._ticks.stop()
        else:
            self._thread.join(timeout=SHUTDOWN_JOIN)
        self.driver.backend.close()

    def _publish_diag(self) -> None:
        device = getattr(self.driver.backend, "diagnostics", dict)()  # real backends: status, fps, reconnects
        healthy = self._status == "ok" and device.get("status", "streaming") == "streaming"
        level = ros_msgs.DIAG_OK if healthy else ros_msgs.DIAG_WARN
        values = {"published": self.published, "stale_reads": self.driver.stale_reads, **device}
        self._pub_diag.publish(ros_msgs.diagnostics_msg(f"camera/{self.camera}", self.frame_id, level, self._status,
                                                        values, self.get_clock().now().to_msg()))  # fmt: skip


def main(args: list[str] | None = None) -> None:
    run_node(CameraNode, "camera_driver", args)


if __name__ == "__main__":
    main()
