"""conveyor_driver node: ROS adapter around :class:`conveyor_driver.driver.ConveyorDriver`.

Publishes the belt as a JointState with one prismatic joint "belt"
(position = belt travel in m, velocity = measured speed in m/s); start and
stop are Trigger services; the speed set-point arrives on a Float64 topic
(m/s) or as the ``belt_speed`` parameter. A service answers once the drive
confirmed the command (or with the reason it did not): the services wait in
their own callback group, so state publishing goes on meanwhile.
"""

from __future__ import annotations

from typing import Any, Final

from diagnostic_msgs.msg import DiagnosticArray
from rcl_interfaces.msg import SetParametersResult
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64, String

from conveyor_driver.backends import CONFIG_PARAMS, IO_PARAMS, MODBUS_PARAMS, make_backend
from conveyor_driver.driver import ConveyorConfig, ConveyorDriver, ConveyorError
from libero_workcell import ros_msgs
from libero_workcell.contract import ARM_FAULT, BELT_JOINT_NAME, Params, Qos, Services, Topics
from libero_workcell.json_topics import ArmModeReport, JsonTopicReader
from libero_workcell.node_main import log_outcome, off_executor, run_node, serve_trigger
from libero_workcell.node_params import declare_all, declare_config, fixed_at_startup
from libero_workcell.ros_qos import qos

# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.BELT_SPEED: 0.03,
    "max_speed": 0.20,
    "autostart": False,
    "publish_hz": 20.0,
    "backend": "modbus",
    "stop_on_arm_fault": True,  # the cell interlock: an arm fault (an e-stop among them) stops the belt
    **CONFIG_PARAMS,
}


class ConveyorNode(Node):
    def __init__(self) -> None:
        super().__init__("conveyor_driver")
        declare_all(self, PARAMETERS)
        config = ConveyorConfig(
            speed=float(self.get_parameter(Params.BELT_SPEED).value),
            max_speed=float(self.get_parameter("max_speed").value),
        )
        use_sim = bool(self.get_parameter(Params.USE_SIM).value)
        self._sim_time = bool(self.get_parameter(Params.USE_SIM_TIME).value)
        kind = str(self.get_parameter("backend").value)
        io = declare_config(self, "io", IO_PARAMS)
        if not use_sim and kind == "io" and io["nominal_speed"] != config.speed:
            # a relay-switched belt has one speed: refuse now, not on every start
            raise ConveyorError(
                f"backend io runs the belt at io.nominal_speed {io['nominal_speed']} m/s only, "
                f"but belt_speed is {config.speed} m/s: make them equal"
            )
        backend = make_backend(
            use_sim,
            str(self.get_parameter(Params.SIM_LINK).value),
            kind,
            declare_config(self, "modbus", MODBUS_PARAMS),
            io,
        )
        self.driver = ConveyorDriver(config, backend)
        self._pub_state = self.create_publisher(JointState, Topics.CONVEYOR_STATE, qos(Qos.STATE))
        self._pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        commands = MutuallyExclusiveCallbackGroup()  # they wait for the drive, one at a time; publishing must not
        self.create_subscription(
            Float64, Topics.CONVEYOR_SPEED_CMD, self._on_speed, qos(Qos.COMMAND), callback_group=commands
        )
        for name, handler in (
            (Services.CONVEYOR_START, self.driver.start),
            (Services.CONVEYOR_STOP, self.driver.stop),
            (Services.CONVEYOR_RESET_FAULT, self.driver.reset_fault),
            (Services.CONVEYOR_EMERGENCY_STOP, self.driver.emergency_stop),
        ):
            serve_trigger(self, name, handler, group=commands)
        self.add_on_set_parameters_callback(self._on_params)
        self.create_timer(1.0 / float(self.get_parameter("publish_hz").value), self._publish)
        self.create_timer(1.0, self._publish_diag)
        # The cell interlock: an arm fault (an e-stop among them) stops the belt; it starts again only when told
        self._arm_fault = ""
        self._arm_reader = JsonTopicReader(ArmModeReport, Topics.ARM_MODE, self.get_logger())
        if bool(self.get_parameter("stop_on_arm_fault").value):
            self.create_subscription(String, Topics.ARM_MODE, self._on_arm_mode, qos(Qos.LATCHED),
                                     callback_group=commands)  # fmt: skip
        if bool(self.get_parameter("autostart").value):
            _ok, msg = self.driver.start()
            self.get_logger().info(f"autostart: {msg}")

    def shutdown(self) -> None:
        """A conveyor whose driver goes away stops."""
        self.driver.stop()
        self.driver.close()

    async def _on_arm_mode(self, msg: String) -> None:
        report = self._arm_reader(msg)  # a bad message is counted, logged and dropped: the interlock keeps its state
        if report is None:
            return
        faulted, fault = report.mode == ARM_FAULT, report.fault
        if faulted and not self._arm_fault:
            self._arm_fault = fault or "fault"
            ok, text = await off_executor(self, self.driver.stop)
            log = self.get_logger().error if ok else self.get_logger().fatal
            log(f"arm fault ({self._arm_fault}): belt {'stopped' if ok else 'NOT STOPPED: ' + text} "
                "(stop_on_arm_fault); it starts again only on /conveyor/start")  # fmt: skip
        elif not faulted:
            self._arm_fault = ""

    async def _on_speed(self, msg: Float64) -> None:
        ok, text = await off_executor(self, lambda: self.driver.set_speed(msg.data))
        log_outcome(self.get_logger(), ok, text)

    def _on_params(self, params) -> SetParametersResult:
        """Only belt_speed changes at run time; every other parameter is refused with the reason."""
        refusal = fixed_at_startup(params, changeable=(Params.BELT_SPEED,))
        if refusal:
            return SetParametersResult(successful=False, reason=refusal)
        for p in params:
            if p.name == Params.BELT_SPEED:
                ok, text = self.driver.set_speed(p.value)
                if not ok:
                    return SetParametersResult(successful=False, reason=text)
        return SetParametersResult(successful=True)

    def _publish(self) -> None:
        s = self.driver.read()
        # the node's clock in sim (the world's), the measurement's own time on the wall clock
        t = self.get_clock().now().to_msg() if self._sim_time else ros_msgs.wall_from_monotonic(s.stamp)
        self._pub_state.publish(ros_msgs.joint_state_msg([BELT_JOINT_NAME], [s.position], t, [s.speed]))

    def _publish_diag(self) -> None:
        s = self.driver.read()
        level = ros_msgs.DIAG_ERROR if s.fault else ros_msgs.DIAG_OK
        values = {
            "running": s.running,
            "commanded": s.commanded,
            "confirmed": s.confirmed,
            "speed_mps": f"{s.speed:.4f}",
            "set_speed_mps": self.driver.set_speed_value,
            "dropped_arm_mode": self._arm_reader.dropped,  # bad /aubo/mode messages (the interlock ignored them)
        }
        self._pub_diag.publish(ros_msgs.diagnostics_msg("conveyor", "belt", level, s.fault or "ok", values,
                                                        self.get_clock().now().to_msg()))  # fmt: skip


def main(args: list[str] | None = None) -> None:
    errors = (ConveyorError, RuntimeError, ValueError, OSError)
    run_node(ConveyorNode, "conveyor_driver", args, startup_errors=errors)


if __name__ == "__main__":
    main()
