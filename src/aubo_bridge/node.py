"""aubo_bridge node: ROS adapter around :class:`aubo_bridge.driver.ArmDriver`.

Parameters -> ArmConfig, action messages -> driver.submit_action, driver
status -> JointState / PoseStamped / 7-D state / diagnostics, services ->
enable/stop/home/reset_fault. Where the driver's servo loop runs is chosen once
(:mod:`aubo_bridge.servo_host`): a process of its own (``driver_host: process``), a
thread here (``driver_host: node``), or the world's ticks (the simulated cell in
lockstep). No physics, protocol or math lives here.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Final

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray
from geometry_msgs.msg import PoseStamped
from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from scipy.spatial.transform import Rotation
from sensor_msgs.msg import JointState
from std_msgs.msg import String

from aubo_bridge.arbiter import ArbiterError
from aubo_bridge.backends.factory import ARCS_PARAMS, DEVICE_PARAMS, GRIPPER_PATH_PARAMS
from aubo_bridge.config import ArmConfig, ConfigError
from aubo_bridge.driver import ActionResult, ArmDriver, ArmMode
from aubo_bridge.process.driver_host import DRIVER_HOSTS, DriverSpec, HostedDriver
from aubo_bridge.servo_host import LockstepHooks, servo_host
from gripper import registry
from libero_workcell import ros_msgs
from libero_workcell.contract import (
    ARM_JOINT_NAMES,
    GRIPPER_JOINT_NAME,
    SOURCE_NONE,
    TCP_FRAME,
    ContractError,
    Params,
    Qos,
    Services,
    Topics,
)
from libero_workcell.node_main import run_node, serve_trigger, served
from libero_workcell.node_params import declare_all, declare_config, fixed_at_startup
from libero_workcell.ros_qos import qos
from transports.errors import BackendError
from transports.node_steps import lockstep_of
from transports.stepping import Arrivals, await_source_action

ARM_PARAMS = ArmConfig.parameter_defaults()  # every ArmConfig field is a parameter of the same name
CONFIG_PARAMS = ARM_PARAMS | DEVICE_PARAMS  # every generated parameter, for docs and checks
# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,
    Params.SIM_LINK: "workcell",
    Params.ACTIVE_SOURCE: SOURCE_NONE,
    "auto_enable": False,
    "publish_hz": 50.0,
    "gripper_model": registry.DEFAULT_MODEL,  # a gripper.registry name
    "gripper_path": "modbus",  # modbus (own RS-485) or tool (arm's tool flange)
    "driver_host": "process",  # process (the driver in a child of its own) or node
    Params.LOCKSTEP: False,  # sim: the world is the clock (src/transports/sim_lockstep.py)
    **CONFIG_PARAMS,
}


class AuboBridgeNode(Node):
    def __init__(self) -> None:
        super().__init__("aubo_bridge")
        declare_all(self, PARAMETERS)
        self.config = ArmConfig.from_mapping({n: self.get_parameter(n).value for n in ARM_PARAMS})
        self.use_sim = bool(self.get_parameter(Params.USE_SIM).value)
        self.driver_host = str(self.get_parameter("driver_host").value)
        if self.driver_host not in DRIVER_HOSTS:
            raise ConfigError(f"driver_host must be one of {DRIVER_HOSTS}, got {self.driver_host!r}")
        gripper_model = registry.model(str(self.get_parameter("gripper_model").value)).name  # unknown: refused here
        spec = DriverSpec(
            config=self.config,
            use_sim=self.use_sim,
            sim_link=str(self.get_parameter(Params.SIM_LINK).value),
            arcs=declare_config(self, "arcs", ARCS_PARAMS),
            gripper={prefix: declare_config(self, prefix, d) for prefix, d in GRIPPER_PATH_PARAMS.items()},
            gripper_path=str(self.get_parameter("gripper_path").value),
            active_source=str(self.get_parameter(Params.ACTIVE_SOURCE).value),
            gripper_model=gripper_model,
        )
        self._stop = threading.Event()
        self._world_gone = False
        self.lockstep = lockstep_of(self)
        self._actions = Arrivals()  # lockstep: each source's newest action handled (its step may wait for it)
        hooks = LockstepHooks(served(self), self._lockstep_control_step, self._each_tick, self._on_world_gone,
                              self.get_name()) if self.lockstep else None  # fmt: skip
        self.host = servo_host(spec, self.driver_host, self._stop, hooks)
        self.driver: ArmDriver | HostedDriver = self.host.driver
        self._loop_stats = self.host.loop_stats
        devices = self.host.devices
        note = self._loop_stats().priority_note
        if note:
            self.get_logger().warning(f"servo thread: {note}")
        self.add_on_set_parameters_callback(self._on_params)

        self._pub_joints = self.create_publisher(JointState, Topics.JOINT_STATES, qos(Qos.STATE, self.lockstep))
        self._pub_tcp = self.create_publisher(PoseStamped, Topics.TCP_POSE, qos(Qos.STATE))
        self._pub_gripper = self.create_publisher(JointState, Topics.GRIPPER_STATE, qos(Qos.STATE))
        self._pub_state = self.create_publisher(JointState, Topics.ROBOT_STATE, qos(Qos.STATE, self.lockstep))
        self._pub_source = self.create_publisher(String, Topics.ACTIVE_SOURCE, qos(Qos.LATCHED))
        self._pub_mode = self.create_publisher(String, Topics.ARM_MODE, qos(Qos.LATCHED))
        self._mode_sent: tuple[str, str] | None = None
        self._pub_diag = self.create_publisher(DiagnosticArray, Topics.DIAGNOSTICS, qos(Qos.DIAGNOSTICS))
        self._pub_result = self.create_publisher(String, Topics.ACTION_RESULT, qos(Qos.COMMAND, self.lockstep))
        self.create_subscription(JointState, Topics.ACTION, self._on_action, qos(Qos.COMMAND))
        commands = None  # one group: the arm's commands run one at a time, off the executor (a reset may take seconds)
        for name, handler in (
            (Services.ARM_ENABLE, self.driver.enable),
            (Services.ARM_STOP, self.driver.stop),
            (Services.ARM_HOME, self.driver.home),
            (Services.ARM_RESET_FAULT, self.driver.reset_fault),
        ):
            commands = serve_trigger(self, name, handler, group=commands)

        self._auto_enable = bool(self.get_parameter("auto_enable").value)
        self._latency_ms: list[float] = []
        if not self.lockstep:  # in lockstep the servo thread publishes the state of every control step
            # (a lambda: an executor hands a callback that takes an argument the timer's info, not a stamp)
            self.create_timer(1.0 / float(self.get_parameter("publish_hz").value), lambda: self._publish_state())
        self.create_timer(1.0, self._publish_diagnostics)
        if self._auto_enable and not self.lockstep:  # lockstep: at the first tick (sim time, deterministic)
            self._enable_timer = self.create_timer(0.2, self._try_auto_enable)
        self._publish_source()
        self.get_logger().info(
            f"aubo_bridge up: backend={'sim' if self.use_sim else 'real'}, control {self.config.control_hz} Hz, "
            f"servo {self.config.servo_hz} Hz in the {self.driver_host}, "
            f"watchdog {self.config.watchdog_timeout * 1e3:.0f} ms, "
            f"active source {self.driver.status().active_source!r}"
        )
        for device in devices:  # the driver's and the SDKs' child processes, for ps / top / kill
            for role, pid in getattr(device, "pids", {}).items():
                self.get_logger().info(f"{type(device).__name__} {role} session in process {pid}")

    # ------------------------------------------------------------- callbacks
    def _on_action(self, msg: JointState) -> None:
        try:
            values, source, turn = ros_msgs.action_from_msg(msg)
        except ContractError as exc:  # undecodable (wrong names, a bad turn, ...): rejected like an invalid action
            source = ros_msgs.source_of(msg.header.frame_id)
            result = self.driver.reject_message(source, str(exc))
            self._publish_result(msg, source, result)
            self._action_came(source, msg)  # rejected, but came: the step that waits for it goes on
            self.get_logger().warning(f"action from {source!r} rejected: {result.reason}", throttle_duration_sec=1.0)
            return
        now = self.get_clock().now().nanoseconds if self.lockstep else time.time_ns()
        self._latency_ms.append((now - ros_msgs.ns_from_stamp(msg.header.stamp)) * 1e-6)
        result = self.driver.submit_action(values, source, turn)
        self._publish_result(msg, source, result, self.host.servo_time_ns(now) if result.accepted else None)
        self._action_came(source, msg)
        if not result.accepted:
            self.get_logger().warning(f"action from {source!r} rejected: {result.reason}", throttle_duration_sec=1.0)

    def _action_came(self, source: str, msg: JointState) -> None:
        """``source``'s action for its stamp's control step came, taken or refused (in lockstep the servo tick of
        that step may be waiting for it)."""
        self._actions.came(source, ros_msgs.ns_from_stamp(msg.header.stamp))

    def _on_params(self, params) -> SetParametersResult:
        """Only active_source changes at run time; every other parameter is refused with the reason."""
        refusal = fixed_at_startup(params, changeable=(Params.ACTIVE_SOURCE,))
        if refusal:
            return SetParametersResult(successful=False, reason=refusal)
        for p in params:
            try:
                self.driver.select_source(str(p.value))
            except ArbiterError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
            self.get_logger().info(f"active action source -> {p.value!r}")
            self._publish_source(str(p.value))
        return SetParametersResult(successful=True)

    def _try_auto_enable(self) -> bool:
        """Enable once the simulated arm is ready; True when done (or no longer wanted)."""
        done = self.driver.mode is not ArmMode.DISABLED
        if not done:
            done, _msg = self.driver.enable()
            if done:
                self.get_logger().info("auto-enabled (sim profile)")
        if done and not self.lockstep:
            self._enable_timer.cancel()
        return done

    # ------------------------------------------------------------ publishing
    def _publish_result(self, msg: JointState, source: str, result: ActionResult,
                        servo_ns: int | None = None) -> None:  # fmt: skip
        r = result
        servo = None if servo_ns is None else ros_msgs.stamp_from_ns(servo_ns)
        self._pub_result.publish(ros_msgs.action_result_msg(msg.header.stamp, source, r.accepted, r.reason,
                                                            r.servo_tick, r.applied, servo))  # fmt: skip

    def _publish_source(self, source: str | None = None) -> None:
        self._pub_source.publish(String(data=source or self.driver.status().active_source))

    def _each_tick(self) -> None:
        """Lockstep, every world tick: the simulated arm enables itself at the first one it can (auto_enable)."""
        if self._auto_enable:
            self._auto_enable = not self._try_auto_enable()

    def _lockstep_control_step(self, tick: Any, participant: Any) -> None:
        """Lockstep, a control step's tick (servo_host.LockstepHost): publish the state it observes, then wait for
        the active source's action for that state (if the source says it sent one)."""
        self.driver.observe()
        self._publish_state(ros_msgs.stamp_from_ns(tick.time_ns))
        await_source_action(participant, self._actions, self.driver.arbiter.active, tick, self._stop)

    def _on_world_gone(self) -> None:
        self.get_logger().error("the simulated world is gone: the arm bridge stops")
        self._world_gone = True

    @property
    def finished(self) -> bool:
        """run_node stops once the simulated world this bridge steps with is gone."""
        return self._world_gone

    def _publish_state(self, stamp: Time | None = None) -> None:
        try:
            st = self.driver.status()
        except BackendError:  # no status from a driver process yet: nothing to publish
            return
        if st.measurement_stamp <= 0 and stamp is None:
            return
        mode = (st.mode.value, st.fault or "")
        if mode != self._mode_sent:  # on every change: the cell interlock (conveyor_driver) follows it
            self._mode_sent = mode
            self._pub_mode.publish(String(data=json.dumps({"mode": mode[0], "fault": mode[1]})))
        t = stamp if stamp is not None else ros_msgs.wall_from_monotonic(st.measurement_stamp)
        quat = Rotation.from_rotvec(st.tcp_rotvec).as_quat()  # x, y, z, w
        self._pub_joints.publish(ros_msgs.joint_state_msg(ARM_JOINT_NAMES, st.q, t))
        self._pub_tcp.publish(ros_msgs.pose_msg(st.tcp_pos, quat, t))
        self._pub_gripper.publish(ros_msgs.joint_state_msg([GRIPPER_JOINT_NAME], [st.gripper], t))
        self._pub_state.publish(ros_msgs.state_msg(st.state7, t))

    def _publish_diagnostics(self) -> None:
        try:
            st, loop = self.driver.status(), self._loop_stats()
        except BackendError as exc:
            error = ros_msgs.diagnostics_msg("aubo_bridge", TCP_FRAME, ros_msgs.DIAG_ERROR, str(exc), {},
                                             self.get_clock().now().to_msg())  # fmt: skip
            self._pub_diag.publish(error)
            return
        level = {
            ArmMode.FAULT: ros_msgs.DIAG_ERROR,
            ArmMode.DISABLED: ros_msgs.DIAG_WARN,
        }.get(st.mode, ros_msgs.DIAG_OK)
        alive = loop.alive
        if not alive or not st.hold_confirmed:
            level = ros_msgs.DIAG_ERROR
        lat = np.asarray(self._latency_ms[-200:])
        values = {
            "mode": st.mode.value,
            "fault": st.fault or "",
            "last_error": st.last_error or "",
            "active_source": st.active_source,
            "servo_hz": self.config.servo_hz,
            "driver_host": self.driver_host,
            "servo_period_error_p99_ms": f"{loop.p99_ms:.3f}",
            "servo_overruns": loop.overruns,
            "servo_thread_alive": alive,
            "servo_loop_errors": loop.errors,
            "hold_confirmed": st.hold_confirmed,
            "action_age_p50_ms": f"{np.percentile(lat, 50):.2f}" if lat.size else "n/a",
            **{f"count_{k}": v for k, v in st.counters.items()},
        }
        message = st.fault or st.last_error or st.mode.value
        if not alive:
            message = f"servo loop is not running: nothing is streamed to the arm ({message})"
        self._pub_diag.publish(ros_msgs.diagnostics_msg("aubo_bridge", TCP_FRAME, level, message, values,
                                                        self.get_clock().now().to_msg()))  # fmt: skip
        del self._latency_ms[:-200]

    def shutdown(self) -> None:
        self._stop.set()
        self._actions.notify()
        self.host.stop()
        self.driver.close()


def main(args: list[str] | None = None) -> None:
    errors = (ConfigError, RuntimeError, ValueError, OSError)
    run_node(AuboBridgeNode, "aubo_bridge", args, startup_errors=errors)


if __name__ == "__main__":
    main()
