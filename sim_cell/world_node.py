"""``sim_world``: the rclpy node that runs the simulated workcell, and its clock.

A thin adapter around :class:`sim_cell.world.SimWorld`. It creates the shared-memory link the drivers'
sim backends attach to and, with ``lockstep`` (the default), the barrier beside it
(:mod:`transports.sim_lockstep`); its world thread advances the world one servo tick at a time
(:class:`sim_cell.world_clock.WorldClock`), waiting at each for the nodes that have a part in it, paced
to ``real_time_factor`` (0: as fast as the machine allows). It publishes:

- ``/clock`` (rosgraph_msgs/Clock) at every control step: the sim clock every node runs on (``use_sim_time``);
- ``Topics.SIM_GROUND_TRUTH`` (std_msgs/String, JSON of ``ground_truth()`` with ``clock_ns``, at every control
  step by default, STATE QoS);
- ``Topics.SIM_EPISODE`` (std_msgs/String, JSON: episode counter, task spec, sim time, done flag and
  ``evaluate()`` metrics, at ``episode_hz`` of sim time, on every reset and when the horizon is reached or a
  node of the loop stopped answering (``aborted``); LATCHED QoS).

``Services.SIM_RESET`` (std_srvs/Trigger) starts a new episode from the current parameters (they may be
changed at run time); it starts on the next control step. With ``demo_path`` set (sim-in-the-loop replay,
:mod:`sim_cell.replay`) every episode is that demo's task, and the arm starts on the demo's first pose.
When the horizon is reached the physics stands still (``pause_at_done``) while the clock runs on.

``arm_fault`` (settable at run time: ``ros2 param set /sim_world arm_fault "protective stop: collision at the
tray"``) rehearses a controller fault: while it is non-empty the simulated controller is in a protective stop
with that reason (the arm stops, servo targets are refused, the arm's sim backend reports it as a fault, so the
arm bridge latches FAULT); "" clears it, after which ``/aubo/reset_fault`` succeeds.

Every world call (construction, reset, step, render) happens on the world thread: the offscreen GL context
stays on the thread that made it.
"""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any, Final

from rcl_interfaces.msg import SetParametersResult
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.qos import QoSProfile
from rosgraph_msgs.msg import Clock
from std_msgs.msg import String
from std_srvs.srv import Trigger

from libero_workcell import ros_msgs, ros_qos
from libero_workcell.contract import (
    CAMERA_HZ_DEFAULT,
    CONTROL_HZ_DEFAULT,
    SIM_SERVO_HZ_DEFAULT,
    Params,
    Qos,
    QosSpec,
    Services,
    Topics,
)
from libero_workcell.node_main import run_node
from libero_workcell.node_params import declare_all, fixed_at_startup
from libero_workcell.task import (
    DEFAULT_ARRIVAL_INTERVAL,
    DEFAULT_BELT_SPEED,
    DEFAULT_FIRST_ARRIVAL,
    DEFAULT_T_COMPLETE,
    TaskSpec,
)
from preferences.catalogue import Catalogue
from sim_cell.replay import ReplayPlan, load_plan
from sim_cell.world import SimWorld
from sim_cell.world_clock import ClockPlan, WorldClock, period_ns
from transports.sim_link import SimLink, fault_text
from transports.sim_lockstep import LockstepWorld


def qos_profile(spec: QosSpec) -> QoSProfile:
    """rclpy QoSProfile from a contract QoS spec (the project's one conversion, libero_workcell.ros_qos)."""
    return ros_qos.qos(spec)


def spec_from_parameters(p: dict[str, Any]) -> TaskSpec:
    """TaskSpec from the node's task parameters (combination -1 / slot_permutation [] or [-1]: from the seed)."""
    perm = [int(i) for i in (p.get("slot_permutation") or [])]
    if perm == [-1] or not perm:
        perm = []
    spec = TaskSpec.from_seed(
        int(p["seed"]),
        belt_speed=float(p["belt_speed"]),
        combination=int(p["combination"]),
        slot_permutation=tuple(perm) or None,
        arrival_interval=float(p["arrival_interval"]),
        first_arrival=float(p["first_arrival"]),
        t_complete=float(p["t_complete"]),
    )
    # The preference (LIBERO-PeRM): catalogue specs, one or two joined by "+"; refused unless they can be scored
    return Catalogue.load().condition(str(p.get("preference") or "")).apply(spec)


# Every parameter the node declares, with its default: the one list (node_params.declare_all) that overrides
# (NODE.PARAM:=VALUE) and cell files are checked against.
PARAMETERS: Final[dict[str, Any]] = {
    Params.USE_SIM: True,  # injected into every node; the world ignores it
    Params.SIM_LINK: "workcell",
    "real_time_factor": 1.0,
    Params.CONTROL_HZ: CONTROL_HZ_DEFAULT,
    Params.SERVO_HZ: SIM_SERVO_HZ_DEFAULT,
    # Lockstep (src/transports/sim_lockstep.py): each tick waits for the nodes that close the loop; "participants"
    # (comma-separated node names, from the graph) must all be up before the first tick.
    Params.LOCKSTEP: False,
    "participants": "",
    "start_timeout": 60.0,  # s (wall) for the participants to come up
    "stall_timeout": 30.0,  # s (wall) a participant may stay silent in one tick
    Params.CAMERA_HZ: CAMERA_HZ_DEFAULT,
    "render": True,
    "episode_hz": 2.0,
    "pause_at_done": True,
    "seed": 0,
    Params.BELT_SPEED: DEFAULT_BELT_SPEED,
    "arrival_interval": DEFAULT_ARRIVAL_INTERVAL,
    "first_arrival": DEFAULT_FIRST_ARRIVAL,
    "t_complete": DEFAULT_T_COMPLETE,  # s after the last availability (the budget's)
    "combination": -1,
    "slot_permutation": [-1],
    "preference": "",
    # A recorded demo to replay (sim_cell.replay): its task and first arm pose replace the task parameters.
    "demo_path": "",
    "demo": "",
    # The simulated controller's protective stop, while non-empty: its reason (a fault to rehearse; run-time)
    "arm_fault": "",
}


class SimWorldNode(Node):
    TASK_PARAMS = ("seed", "belt_speed", "arrival_interval", "first_arrival", "t_complete", "combination",
                   "slot_permutation", "preference")

    def __init__(self) -> None:
        super().__init__("sim_world")
        declare_all(self, PARAMETERS)
        demo_path = str(self._param("demo_path"))
        self.plan: ReplayPlan | None = load_plan(demo_path, str(self._param("demo"))) if demo_path else None
        self.spec = self._current_spec()  # fail early on bad parameters
        self._arm_fault = fault_text(self._param("arm_fault"))  # applied by the world thread, at every tick
        self.add_on_set_parameters_callback(self._on_set_parameters)

        self.rtf = max(0.0, float(self._param("real_time_factor")))
        self._pending_rtf: float | None = None
        self.link_name = str(self._param(Params.SIM_LINK))
        self.lockstep: LockstepWorld | None = None
        if self._param(Params.LOCKSTEP):  # before the link: a driver that finds the link finds the lockstep too
            plan = ClockPlan.of(float(self._param(Params.SERVO_HZ)), float(self._param(Params.CONTROL_HZ)))
            self.lockstep = LockstepWorld(self.link_name, plan.servo_ns, plan.control_ns,
                                          float(self._param("stall_timeout")))  # fmt: skip
        self.link = SimLink.create(self.link_name)
        self._clock_pub = self.create_publisher(Clock, Topics.CLOCK, qos_profile(Qos.CLOCK))
        self.world: SimWorld | None = None
        self._gt_pub = self.create_publisher(String, Topics.SIM_GROUND_TRUTH,
                                             ros_qos.qos(Qos.STATE, self.lockstep is not None))  # fmt: skip
        self._ep_pub = self.create_publisher(String, Topics.SIM_EPISODE, qos_profile(Qos.LATCHED))
        self.create_service(Trigger, Services.SIM_RESET, self._on_reset)

        self._stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._reset_lock = threading.Lock()
        self._reset_request: tuple[TaskSpec, threading.Event, list] | None = None
        self.stalls: list[str] = []  # participants that died or stopped answering, with when
        self.clock: WorldClock | None = None
        self._thread = threading.Thread(target=self._run, name="sim_world", daemon=True)
        self._thread.start()
        try:
            if not self._ready.wait(timeout=120.0):
                raise RuntimeError("sim world did not start within 120 s")
        except BaseException:  # Ctrl-C / SIGTERM during start-up: leave no link behind
            self._stop.set()
            self._close_links()
            raise
        if self._error is not None:
            self._close_links()
            raise RuntimeError(f"sim world failed to start: {self._error}") from self._error
        cameras = f"{float(self._param(Params.CAMERA_HZ)):g} Hz" if self._param("render") else "off"
        self.get_logger().info(
            f"sim world up on link {self.link.path} (real_time_factor {self.rtf:g}, cameras {cameras})"
        )

    # ------------------------------------------------------------------ parameters
    def _param(self, name: str) -> Any:
        return self.get_parameter(name).value

    def _task_params(self, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        p = {n: self._param(n) for n in self.TASK_PARAMS}
        p.update(overrides or {})
        return p

    def _on_set_parameters(self, params: list[Parameter]) -> SetParametersResult:
        refusal = fixed_at_startup(params, changeable=(*self.TASK_PARAMS, "real_time_factor", "camera_hz",
                                                       "arm_fault"))
        if refusal:
            return SetParametersResult(successful=False, reason=refusal)
        changes = {p.name: p.value for p in params}
        task = {k: v for k, v in changes.items() if k in self.TASK_PARAMS}
        if task:
            try:
                spec_from_parameters(self._task_params(task))
            except (TypeError, ValueError) as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        if "real_time_factor" in changes:
            rtf = float(changes["real_time_factor"])
            if not math.isfinite(rtf) or rtf < 0:
                return SetParametersResult(successful=False, reason="real_time_factor must be >= 0")
            self._pending_rtf = rtf  # applied by the world thread together with a re-anchor
        if "camera_hz" in changes and self.world is not None:
            hz = float(changes["camera_hz"])
            if not math.isfinite(hz) or hz < 0:
                return SetParametersResult(successful=False, reason="camera_hz must be >= 0")
            self.world.camera_hz = hz
        if "arm_fault" in changes:
            if not isinstance(changes["arm_fault"], str):
                return SetParametersResult(successful=False, reason="arm_fault must be a string")
            fault = fault_text(changes["arm_fault"])
            if fault != self._arm_fault:
                log = self.get_logger()
                if fault:
                    log.warning(f"arm_fault: the simulated controller is in a protective stop: {fault}")
                else:
                    log.info("arm_fault cleared: the simulated controller's protective stop is over "
                             f"(call {Services.ARM_RESET_FAULT}, then {Services.ARM_ENABLE})")
            self._arm_fault = fault
        if task and self.plan is not None:
            self.get_logger().warning(f"task parameters changed ({task}), but the world replays "
                                      f"{self.plan.demo.name}'s task: they apply only without demo_path")
        elif task:
            self.get_logger().info(f"task parameters changed ({task}): call {Services.SIM_RESET} to apply")
        return SetParametersResult(successful=True)

    # ------------------------------------------------------------------ reset service
    def _current_spec(self) -> TaskSpec:
        return self.plan.spec if self.plan is not None else spec_from_parameters(self._task_params())

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        try:
            spec = self._current_spec()
        except (TypeError, ValueError) as exc:
            response.success, response.message = False, f"bad task parameters: {exc}"
            return response
        done = threading.Event()
        result: list = []
        with self._reset_lock:
            self._reset_request = (spec, done, result)
        if not done.wait(timeout=30.0):
            response.success, response.message = False, "sim world did not reset within 30 s"
            return response
        response.success = bool(result and result[0] is None)
        response.message = (
            f"episode {result[1]}: {spec.language_instruction} (belt {spec.belt_speed} m/s, horizon {spec.horizon:g} s)"
            if response.success
            else f"reset failed: {result[0] if result else 'unknown'}"
        )
        return response

    # ------------------------------------------------------------------ world thread
    def _run(self) -> None:
        try:
            self.world = SimWorld(
                self.spec,
                link=self.link,
                render=bool(self._param("render")),
                camera_hz=float(self._param(Params.CAMERA_HZ)),
                home_q=None if self.plan is None else self.plan.start_q,
                auto_render=False,  # the clock renders each frame once its tick's state is out
            )
        except BaseException as exc:  # reported to the constructor
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            self._loop(self.world)
        except Exception as exc:  # a dead world must be loud, then the node exits
            if not self._stop.is_set() and self.context.ok():
                self.get_logger().fatal(f"sim world thread crashed: {exc!r}")
                self._error = exc
        finally:
            if self.clock is not None:
                self.clock.close()
            self.world.close()

    def _loop(self, world: SimWorld) -> None:
        plan = ClockPlan.of(float(self._param(Params.SERVO_HZ)), float(self._param(Params.CONTROL_HZ)))
        clock = WorldClock(world, plan, self.lockstep, self.rtf, render_thread=True)
        clock.pause_at_done = bool(self._param("pause_at_done"))
        self.clock = clock
        ep_period_ns = period_ns(float(self._param("episode_hz")))
        if self.lockstep is not None:
            self._await_participants(world)
        self._announce(world)
        next_ep_ns = 0
        was_done = False
        while not self._stop.is_set():
            with self._reset_lock:
                request, self._reset_request = self._reset_request, None
            if request is not None:
                self._do_reset(clock, *request)
                was_done = False
            world.arm_fault = self._arm_fault  # out with this tick's state
            if self._pending_rtf is not None:  # a new pace starts from here
                self.rtf, self._pending_rtf = self._pending_rtf, None
                clock.set_rtf(self.rtf)
            tick = clock.advance()
            if tick.paused:
                world.touch()  # a paused world's state stays fresh for drivers on the wall clock
            if tick.index == clock.episode_tick:
                next_ep_ns = tick.time_ns
            for event in world.pop_events():
                self._log_event(event)
            if tick.control_step is not None:  # the sources' observation of this step, then its time
                self._publish(self._gt_pub, {**world.ground_truth(), "clock_ns": tick.time_ns})
                self._publish_clock(tick.time_ns)
            if world.done and not was_done:
                was_done = True
                self._publish_episode(world)
                next_ep_ns = tick.time_ns + ep_period_ns
            elif tick.time_ns >= next_ep_ns:
                self._publish_episode(world)
                next_ep_ns = tick.time_ns + ep_period_ns
            clock.publish(tick)
            rendered = clock.render(tick, self._stop)  # on a thread, while the world and the nodes go on
            if rendered is not tick:
                clock.publish(rendered)
            stalls = clock.wait(self._stop)
            if stalls:  # the one that waits on no other first: a frozen source stalls the arm bridge after it
                self._on_stall(world, "; ".join(str(s) for s in sorted(stalls, key=lambda s: s.waits_on_others)))
            clock.pace(self._stop)

    def _await_participants(self, world: SimWorld) -> None:
        """The first tick waits until every node of the loop is there (each registers once its topics are
        matched), so no episode starts without one of them; a node that never comes ends the first episode."""
        assert self.lockstep is not None
        expected = [n.strip() for n in str(self._param("participants")).split(",") if n.strip()]
        if not expected:
            return
        self.get_logger().info(f"lockstep: waiting for {expected}")
        missing = self.lockstep.wait_for(expected, float(self._param("start_timeout")), self._stop)
        if missing:
            self._on_stall(world, f"{missing} did not come up within {self._param('start_timeout')} s")
        else:
            self.get_logger().info(f"lockstep: {len(expected)} participants up; the world starts")

    def _on_stall(self, world: SimWorld, reason: str) -> None:
        """A node of the loop died or stopped answering: name it and end the episode, never hang."""
        self.get_logger().error(f"lockstep: {reason}: episode {world.episode} ends here")
        world.abort(reason)
        self.stalls.append(reason)

    def _do_reset(self, clock: WorldClock, spec: TaskSpec, done: threading.Event, result: list) -> None:
        try:
            clock.reset(spec)
            self.spec = spec
            result[:] = [None, clock.world.episode]
            self._announce(clock.world)
        except Exception as exc:  # reported to the service caller
            result[:] = [exc, None]
            self.get_logger().error(f"reset failed: {exc!r}")
        finally:
            done.set()

    def _announce(self, world: SimWorld) -> None:
        s = world.spec
        self.get_logger().info(
            f"episode {world.episode}: {s.language_instruction} | workpieces {list(s.workpieces)} "
            f"slots(left->right) {list(s.slot_permutation)} belt {s.belt_speed} m/s, arrivals at "
            f"{[round(t, 2) for t in s.arrival_times]} s, horizon {s.horizon:g} s (seed {s.seed})"
        )
        self._publish_episode(world)

    def _publish_episode(self, world: SimWorld) -> None:
        metrics = world.final_metrics if world.done and world.final_metrics is not None else world.evaluate()
        info = {
            "episode": world.episode,
            "sim_time": world.sim_time,
            "wall_time": time.time(),
            "done": world.done,
            "horizon": world.horizon,
            "spec": world.spec.to_dict(),
            "metrics": metrics,
            "overruns": self.clock.overruns if self.clock is not None else 0,
            "lockstep": self.lockstep is not None,
        }
        self._publish(self._ep_pub, info)

    def _publish_clock(self, time_ns: int) -> None:
        if self._stop.is_set() or not self.context.ok():
            return
        self._clock_pub.publish(Clock(clock=ros_msgs.stamp_from_ns(time_ns)))

    def _publish(self, pub: Any, payload: dict[str, Any]) -> None:
        """Publish JSON; quietly skip once ROS is shutting down (the world thread outlives the context briefly)."""
        if self._stop.is_set() or not self.context.ok():
            return
        try:
            pub.publish(String(data=json.dumps(payload)))
        except Exception:
            if self.context.ok():
                raise

    def _log_event(self, event: dict[str, Any]) -> None:
        if not self.context.ok():
            return
        log = self.get_logger()
        t = event["sim_time"]
        kind = event["kind"]
        if kind == "done":
            m = event["metrics"]
            log.info(
                f"[t={t:.2f}s] episode done: SR={m['SR']:.0f} PCR_T={m['PCR_T']:.2f} PCR_S={m['PCR_S']:.2f} "
                f"(PCR_S init {m['pcr_s_init']:.2f}) placed={m['placed']}"
            )
            return
        what = f"{event['workpiece']} ({event['type']}, target slot {event['target_slot']})"
        if kind == "arrival":
            log.info(f"[t={t:.2f}s] arrival: {what} on the belt at {[round(x, 3) for x in event['pos']]}")
        elif kind == "placed":
            log.info(f"[t={t:.2f}s] placed: {what} in its slot")
        elif kind == "removed":
            log.warning(f"[t={t:.2f}s] removed: {what} left its slot")
        elif kind == "lost":
            log.warning(f"[t={t:.2f}s] lost: {what} ran off the belt end")

    # ------------------------------------------------------------------ shutdown
    def shutdown(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)
        self._close_links()

    def _close_links(self) -> None:
        if self.lockstep is not None:
            self.lockstep.close()
        self.link.close()

    @property
    def failed(self) -> BaseException | None:
        """The world thread's fatal error, if it died."""
        return self._error

    @property
    def finished(self) -> bool:
        """run_node stops spinning when the world thread has died."""
        return self._error is not None


def main(args: list[str] | None = None) -> None:
    nodes: list[SimWorldNode] = []

    def factory() -> SimWorldNode:
        nodes.append(SimWorldNode())
        return nodes[-1]

    run_node(factory, "sim_world", args)
    if nodes and nodes[0].failed is not None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
