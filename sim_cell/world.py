"""The simulated workcell: MuJoCo physics, conveyor, arrivals, cameras, metrics.

:class:`SimWorld` is pure Python (no ``rclpy``): the ``sim_world`` node
(:mod:`sim_cell.world_node`) wraps it, tests drive it directly. It talks to
the drivers' sim backends only through a :class:`~transports.sim_link.SimLink`:

- at the start of each :meth:`SimWorld.step` (a servo period) it reads the arm,
  gripper and belt command sections (commands count only when written after the
  last reset: a new episode never starts by chasing the previous episode's last
  servo target);
- at its end it writes the :class:`~transports.sim_link.WorldState` (stamped with
  ``time.time()`` as well, for drivers on the wall clock);
- it renders both cameras at ``camera_hz`` of *sim* time into the link.

Arm servo: each joint has a stiff position servo and a velocity
feed-forward actuator, driven the way a servo controller executes
``servoJoint(q, t)``: each new target is reached over the stream's interval
t (the sim time since the previous target), the position set-point moving
linearly from where it was and the feed-forward velocity equal to that
segment's slope, both ending exactly at the target. So a 100 Hz stream is
tracked with little lag and the arm stops without overshoot when the stream
holds still. A first target, or one after a long gap, is approached at the
joint velocity limits without feed-forward.

Conveyor: the belt surface is a heavy body on a slide joint whose velocity
is set every step (with an acceleration ramp), so workpieces on it are
carried by real friction and a grasp lifts them off by real friction. The
body is wrapped back by a centimetre now and then (workpieces do not feel
it); the belt position reported is the integral of its speed.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar, Final

import mujoco
import numpy as np

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_VELOCITY_LIMITS
from libero_workcell import layout
from libero_workcell.contract import ARM_JOINT_NAMES, CAMERA_HZ_DEFAULT, CAMERA_NAMES, IMAGE_SIZE
from libero_workcell.task import TaskSpec
from sim_cell import metrics, scene
from transports.sim_link import SimLink, WorldState, fault_text

BELT_ACCEL: Final = 0.2  # m/s^2, conveyor acceleration ramp
BELT_MAX_SPEED: Final = 0.5  # m/s, commanded speeds are clamped to +-this
MONITOR_PERIOD: Final = 0.05  # s of sim time between placement / loss checks
FF_MAX_INTERVAL: Final = 0.05  # s: targets further apart than this are approached without feed-forward


def home_joint_positions(model: mujoco.MjModel | None = None) -> np.ndarray:
    """Home joints: ``aubo_bridge.model.kinematics.HOME_Q`` when available, else IK on the scene's grip_site."""
    try:
        from aubo_bridge.model.kinematics import HOME_Q

        return np.array(HOME_Q, dtype=float)
    except ImportError:
        pass
    if model is None:
        model = mujoco.MjModel.from_xml_string(scene.build_mjcf())
    seed = np.array([0.5, 0.3, 1.8, -0.2, 1.57, 0.0])
    return solve_ik_mujoco(model, layout.HOME_TCP_POS, layout.HOME_TCP_ROTMAT, seed)


def solve_ik_mujoco(
    model: mujoco.MjModel,
    pos: np.ndarray,
    rotmat: np.ndarray,
    q_seed: np.ndarray,
    iterations: int = 200,
    damping: float = 1e-3,
) -> np.ndarray:
    """Damped least squares IK of the arm joints on MuJoCo's own ``grip_site`` (mj_jacSite)."""
    data = mujoco.MjData(model)
    qadr = np.array([model.joint(n).qposadr[0] for n in ARM_JOINT_NAMES])
    dadr = np.array([model.joint(n).dofadr[0] for n in ARM_JOINT_NAMES])
    site = model.site(scene.GRIP_SITE).id
    q = np.array(q_seed, float)
    jacp = np.zeros((3, model.nv))
    jacr = np.zeros((3, model.nv))
    for _ in range(iterations):
        data.qpos[qadr] = q
        mujoco.mj_kinematics(model, data)
        mujoco.mj_comPos(model, data)
        R = data.site_xmat[site].reshape(3, 3)
        e_pos = np.asarray(pos, float) - data.site_xpos[site]
        e_rot = _rotvec(np.asarray(rotmat, float) @ R.T)
        err = np.concatenate([e_pos, e_rot])
        if np.linalg.norm(err) < 1e-9:
            break
        mujoco.mj_jacSite(model, data, jacp, jacr, site)
        J = np.vstack([jacp[:, dadr], jacr[:, dadr]])
        dq = J.T @ np.linalg.solve(J @ J.T + damping**2 * np.eye(6), err)
        q = np.clip(q + np.clip(dq, -0.3, 0.3), JOINT_LIMITS[:, 0], JOINT_LIMITS[:, 1])
    return q


def _rotvec(R: np.ndarray) -> np.ndarray:
    quat = np.zeros(4)
    mujoco.mju_mat2Quat(quat, R.reshape(-1))
    vel = np.zeros(3)
    mujoco.mju_quat2Vel(vel, quat, 1.0)
    return vel


def _xyzw(wxyz: np.ndarray) -> np.ndarray:
    return np.array([wxyz[1], wxyz[2], wxyz[3], wxyz[0]])


@dataclass(frozen=True)
class FrameJob:
    """Both cameras' frames of one moment: a copy of the state to render from, their counters and sim time."""

    model: mujoco.MjModel
    data: mujoco.MjData
    counts: tuple[int, ...]  # per camera (CAMERA_NAMES)
    sim_time: float
    fovy: tuple[float, ...]

    def run(self, world: SimWorld, renderer: mujoco.Renderer | None = None) -> None:
        """Render each camera from the copy and publish it to ``world``'s link (``renderer``: one made on the
        calling thread; default the world's own)."""
        for idx, name in enumerate(CAMERA_NAMES):
            rgb = world.render_camera(name, self.data, renderer)
            if world.link is not None:
                world.link.write_frame(idx, self.counts[idx], self.sim_time, rgb, self.fovy[idx])


class SimWorld:
    """The simulated workcell for one :class:`TaskSpec` at a time."""

    # The contract's camera names -> the model's cameras (an arm other than the AUBO brings its own wrist camera).
    CAMERAS: ClassVar[Mapping[str, str]] = MappingProxyType({name: name for name in CAMERA_NAMES})

    def __init__(
        self,
        spec: TaskSpec,
        link: SimLink | None = None,
        render: bool = True,
        camera_hz: float = CAMERA_HZ_DEFAULT,
        home_q: np.ndarray | None = None,
        velocity_feedforward: bool = True,
        auto_render: bool = True,
    ) -> None:
        self.link = link
        self.render_enabled = bool(render)
        self.camera_hz = float(camera_hz)
        self.velocity_feedforward = velocity_feedforward
        # Frames are rendered inside step() and reset() when due; a lockstep clock renders them itself, after
        # the tick's state is out (sim_cell.world_clock), so the nodes' work overlaps the rendering.
        self.auto_render = auto_render
        self._home_q_override = None if home_q is None else np.asarray(home_q, float)
        self.model: mujoco.MjModel | None = None
        self.data: mujoco.MjData | None = None
        self._renderer: mujoco.Renderer | None = None
        self._built_for: tuple[str, ...] | None = None
        self._episode = 0
        self._frame_count = [0] * len(CAMERA_NAMES)
        self._last_frames: dict[str, np.ndarray] = {}
        self._render_data: mujoco.MjData | None = None  # the copy frames are rendered from (frame_job)
        self._render_data_model: mujoco.MjModel | None = None
        self.events: list[dict[str, Any]] = []
        self._arm_fault = ""  # the simulated controller's protective stop (arm_fault)
        self.spec = spec
        self.reset(spec)

    # ------------------------------------------------------------------ build
    def _build(self, spec: TaskSpec) -> None:
        names = [f"wp_{i}" for i in range(spec.num_workpieces)]
        self.workpiece_names = tuple(names)
        m = self._compile_model(list(zip(names, spec.workpiece_types, strict=True)))
        d = mujoco.MjData(m)
        self.model, self.data = m, d
        self._built_for = spec.workpieces
        self._bind_arm(m)
        self._belt_qadr = m.joint(scene.BELT_SLIDE).qposadr[0]
        self._belt_dadr = m.joint(scene.BELT_SLIDE).dofadr[0]
        self._belt_geom = m.geom(scene.BELT_GEOM).id
        self._wp_body = np.array([m.body(n).id for n in names])
        self._wp_qadr = np.array([m.joint(n).qposadr[0] for n in names])
        self._wp_dadr = np.array([m.joint(n).dofadr[0] for n in names])
        self._wp_geom = np.array([m.geom(n).id for n in names])
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
        if self.render_enabled:
            self._renderer = mujoco.Renderer(m, IMAGE_SIZE, IMAGE_SIZE)
            self._scene_option = mujoco.MjvOption()
            self._scene_option.geomgroup[scene.COLLISION_GROUP] = 0
            self._cam_ids = [m.camera(self.CAMERAS[c]).id for c in CAMERA_NAMES]
            self._cam_fovy = [float(m.cam_fovy[i]) for i in self._cam_ids]

    def _compile_model(self, workpieces: list[tuple[str, Any]]) -> mujoco.MjModel:
        """The cell with the AUBO-i5H and its gripper."""
        return mujoco.MjModel.from_xml_string(scene.build_mjcf(workpieces))

    def _bind_arm(self, m: mujoco.MjModel) -> None:
        """Indices of the arm's joints, actuators, TCP site and finger geoms in ``m``."""
        self._arm_qadr = np.array([m.joint(n).qposadr[0] for n in ARM_JOINT_NAMES])
        self._arm_dadr = np.array([m.joint(n).dofadr[0] for n in ARM_JOINT_NAMES])
        self._arm_pos_act = np.array([m.actuator(n).id for n in scene.ARM_POS_ACTUATORS])
        self._arm_vel_act = np.array([m.actuator(n).id for n in scene.ARM_VEL_ACTUATORS])
        self._finger_qadr = np.array([m.joint(n).qposadr[0] for n in scene.FINGER_JOINTS])
        self._finger_act = np.array([m.actuator(n).id for n in scene.FINGER_ACTUATORS])
        self._site = m.site(scene.GRIP_SITE).id
        self._left_geoms = {m.geom("finger_left").id, m.geom("pad_left").id}
        self._right_geoms = {m.geom("finger_right").id, m.geom("pad_right").id}
        self._home_q = self._home_q_override if self._home_q_override is not None else home_joint_positions(m)

    # ------------------------------------------------------------------ reset
    def reset(self, spec: TaskSpec | None = None) -> None:
        """Start a new episode of ``spec`` (default: the current one). Deterministic per spec."""
        if spec is not None:
            self.spec = spec
        spec = self.spec
        if self._built_for != spec.workpieces or self.model is None:
            self._build(spec)
        m, d = self.model, self.data
        assert m is not None and d is not None
        mujoco.mj_resetData(m, d)
        self._reset_arm()
        # Conveyor running at the spec's speed.
        self._belt_target = float(spec.belt_speed)
        self._belt_running = spec.belt_speed > 0
        self._belt_speed = self._belt_target
        self._belt_pos = 0.0
        # Workpieces parked (floating, gravity compensated) until their arrival.
        rng = np.random.default_rng(spec.seed)
        self._jitter = rng.uniform(-spec.lateral_jitter, spec.lateral_jitter, spec.num_workpieces)
        self._arrival_times = np.array(spec.arrival_times)
        self._arrived_at: list[float | None] = [None] * spec.num_workpieces
        self._next_arrival = 0
        for i in range(spec.num_workpieces):
            a = self._wp_qadr[i]
            d.qpos[a : a + 3] = scene.park_position(i)
            d.qpos[a + 3 : a + 7] = (1.0, 0.0, 0.0, 0.0)
            m.body_gravcomp[self._wp_body[i]] = 1.0
        # Commands written before this reset do not count in this episode.
        if self.link is not None:
            self._arm_seq = self.link.read_arm_command().seq
            self._grip_seq = self.link.read_gripper_command()[0]
            self._belt_seq = self.link.read_belt_command().seq
        self._episode += 1
        mujoco.mj_forward(m, d)
        self._placed = [False] * spec.num_workpieces
        self._lost = [False] * spec.num_workpieces
        self._next_monitor = MONITOR_PERIOD
        self.done = False
        self.final_metrics: dict[str, Any] | None = None
        self.events = []
        self._initial_pieces = self._piece_states()
        self._next_frame = 0.0
        self._write_state()
        if self.auto_render:
            self._maybe_render()

    def _reset_arm(self) -> None:
        """Arm at home with its servo holding home, gripper open."""
        d = self.data
        assert d is not None
        d.qpos[self._arm_qadr] = self._home_q
        d.ctrl[self._arm_pos_act] = self._home_q
        d.ctrl[self._arm_vel_act] = 0.0
        self._arm_target = self._home_q.copy()
        self._arm_seg_start = self._home_q.copy()  # set-point when the current target arrived
        self._arm_target_time = 0.0
        self._arm_seg_duration = 0.0  # s over which the set-point moves to the target (0: rate-limited)
        self._arm_settled = True
        d.qpos[self._finger_qadr] = scene.FINGER_STROKE
        d.ctrl[self._finger_act] = scene.FINGER_STROKE
        self._gripper_target = 0.0

    # ------------------------------------------------------------------ step
    def step(self, n_steps: int = 1) -> None:
        """Advance ``n_steps`` physics steps (TIMESTEP each): the link's commands read at the start, the state
        written at the end. A servo period is one call (the drivers' commands for it are in the link before
        it, and they read the state after it): the link is touched once per period, not per physics step."""
        m, d = self.model, self.data
        assert m is not None and d is not None
        if self.link is not None:
            self._read_commands()
        for _ in range(int(n_steps)):
            self._servo()
            self._drive_belt()
            if self._next_arrival < len(self._arrival_times):
                self._arrivals()
            mujoco.mj_step(m, d)
            if self.auto_render:
                self._maybe_render()
            if d.time >= self._next_monitor - 1e-9:
                self._monitor()
        self._write_state()

    def _read_commands(self) -> None:
        link = self.link
        assert link is not None
        cmd = link.read_arm_command()
        if cmd.seq != self._arm_seq:
            self._arm_seq = cmd.seq
            q = np.asarray(cmd.q, float)
            if q.shape == (6,) and np.all(np.isfinite(q)) and not self._arm_fault:  # stopped: servo refused
                self.set_arm_target(q)
        seq, coord = link.read_gripper_command()
        if seq != self._grip_seq:
            self._grip_seq = seq
            if np.isfinite(coord):
                self.set_gripper(coord)
        belt = link.read_belt_command()
        if belt.seq != self._belt_seq:
            self._belt_seq = belt.seq
            if np.isfinite(belt.speed):
                self.set_belt(belt.speed, belt.run)

    # ---- command setters (used by the link reader and by in-process callers) --
    def set_arm_target(self, q: np.ndarray) -> None:
        """New joint servo target (rad), clamped to the joint limits, reached over the stream's interval."""
        d = self.data
        assert d is not None
        q = np.clip(np.asarray(q, float), JOINT_LIMITS[:, 0], JOINT_LIMITS[:, 1])
        interval = d.time - self._arm_target_time
        start = d.ctrl[self._arm_pos_act].copy()
        if self.velocity_feedforward and 1e-6 < interval <= FF_MAX_INTERVAL:
            # never faster than the joint velocity limits: stretch the segment if needed
            self._arm_seg_duration = max(interval, float(np.max(np.abs(q - start) / JOINT_VELOCITY_LIMITS)))
        else:
            self._arm_seg_duration = 0.0
        self._arm_seg_start = start
        self._arm_target = q
        self._arm_target_time = d.time
        self._arm_settled = False

    def set_gripper(self, coord: float) -> None:
        """Gripper target coordinate: 0 open .. 1 closed."""
        self._gripper_target = float(np.clip(coord, 0.0, 1.0))

    def set_belt(self, speed: float, run: bool = True) -> None:
        """Conveyor set-point (m/s along +x) and run flag; the actual speed ramps."""
        self._belt_running = bool(run)
        self._belt_target = float(np.clip(speed, -BELT_MAX_SPEED, BELT_MAX_SPEED)) if run else 0.0

    def _servo(self) -> None:
        d = self.data
        assert d is not None
        dt = scene.TIMESTEP
        if not self._arm_settled:
            duration = self._arm_seg_duration
            if duration > 0:
                elapsed = d.time + dt - self._arm_target_time  # where the set-point is due after this step
                delta = self._arm_target - self._arm_seg_start
                if elapsed >= duration:
                    d.ctrl[self._arm_pos_act] = self._arm_target
                    d.ctrl[self._arm_vel_act] = 0.0
                    self._arm_settled = True
                else:
                    d.ctrl[self._arm_pos_act] = self._arm_seg_start + delta * (elapsed / duration)
                    d.ctrl[self._arm_vel_act] = delta / duration
            else:
                ctrl = d.ctrl[self._arm_pos_act]
                err = self._arm_target - ctrl
                step = JOINT_VELOCITY_LIMITS * dt
                d.ctrl[self._arm_vel_act] = 0.0
                if np.all(np.abs(err) <= step):
                    d.ctrl[self._arm_pos_act] = self._arm_target
                    self._arm_settled = True
                else:
                    d.ctrl[self._arm_pos_act] = ctrl + np.minimum(np.maximum(err, -step), step)
        finger = (1.0 - self._gripper_target) * scene.FINGER_STROKE
        d.ctrl[self._finger_act[0]] = finger
        d.ctrl[self._finger_act[1]] = finger

    def _drive_belt(self) -> None:
        d = self.data
        assert d is not None
        dt = scene.TIMESTEP
        dv = self._belt_target - self._belt_speed
        if dv != 0.0:
            self._belt_speed += min(max(dv, -BELT_ACCEL * dt), BELT_ACCEL * dt)
        v = self._belt_speed
        self._belt_pos += v * dt
        d.qvel[self._belt_dadr] = v
        x = d.qpos[self._belt_qadr]
        if x > scene.BELT_WRAP:
            d.qpos[self._belt_qadr] = x - 2 * scene.BELT_WRAP
        elif x < -scene.BELT_WRAP:
            d.qpos[self._belt_qadr] = x + 2 * scene.BELT_WRAP

    def _arrivals(self) -> None:
        m, d = self.model, self.data
        assert m is not None and d is not None
        times = self._arrival_times
        while self._next_arrival < len(times) and d.time >= times[self._next_arrival] - 1e-9:
            i = self._next_arrival
            wp = self.spec.workpiece_types[i]
            a, v = self._wp_qadr[i], self._wp_dadr[i]
            d.qpos[a : a + 3] = (
                layout.BELT_X_START,
                layout.BELT_Y + self._jitter[i],
                layout.BELT_TOP_Z + wp.half_extents[2] + 0.0005,
            )
            d.qpos[a + 3 : a + 7] = (1.0, 0.0, 0.0, 0.0)
            d.qvel[v : v + 6] = (self._belt_speed, 0.0, 0.0, 0.0, 0.0, 0.0)
            m.body_gravcomp[self._wp_body[i]] = 0.0
            self._arrived_at[i] = float(d.time)
            self._next_arrival += 1
            self._event("arrival", i, pos=d.qpos[a : a + 3].tolist())

    # ------------------------------------------------------------------ outputs
    def _write_state(self) -> None:
        if self.link is None:
            return
        d = self.data
        assert d is not None
        self.link.write_state(
            WorldState(
                sim_time=float(d.time),
                wall_time=time.time(),
                episode=self._episode,
                arm_q=d.qpos[self._arm_qadr],
                arm_qd=d.qvel[self._arm_dadr],
                tcp_pos=d.site_xpos[self._site],
                tcp_quat=self.tcp_quat,
                gripper_coord=self.gripper_coord,
                belt_pos=self._belt_pos,
                belt_speed=self._belt_speed,
                belt_running=self._belt_running,
                arm_fault=self._arm_fault,
            )
        )

    @property
    def arm_fault(self) -> str:
        """The simulated controller's protective stop: its reason, "" when none (sim_world's ``arm_fault``)."""
        return self._arm_fault

    @arm_fault.setter
    def arm_fault(self, reason: str) -> None:
        """Set (a reason) or clear ("") a protective stop. While one is set the arm stops where it is and the
        controller refuses servo targets, and the link carries the reason (the arm's sim backend reports it as a
        fault, as a real controller's safety mode); it lasts until cleared, across resets. Written with the
        next state (every servo period, and a paused world's touch)."""
        reason = fault_text(reason)
        if reason and not self._arm_fault and self.data is not None:
            self.set_arm_target(self.arm_q)  # the protective stop: hold here
        self._arm_fault = reason

    def touch(self) -> None:
        """Rewrite the current state with a fresh wall-clock stamp (world alive but paused)."""
        self._write_state()

    def frames_due(self) -> bool:
        """Whether the cameras are due a frame now (at ``camera_hz`` of sim time)."""
        if not self.render_enabled or self.camera_hz <= 0:
            return False
        assert self.data is not None
        return self.data.time >= self._next_frame - 1e-9

    def _maybe_render(self) -> None:
        if self.frames_due():
            self.render_due()

    def render_due(self) -> None:
        """Render both cameras for this moment and publish them to the link; the next frame falls due one
        camera period later (``auto_render`` False: the caller decides when, :mod:`sim_cell.world_clock`)."""
        self.frame_job().run(self)

    def frame_job(self) -> FrameJob:
        """The frames due now, to render from a copy of this moment's state (here, or on a thread of its own:
        :class:`sim_cell.frame_renderer.FrameRenderer`, while the world steps on); the next frame falls due
        one camera period later."""
        m, d = self.model, self.data
        assert m is not None and d is not None
        period = 1.0 / self.camera_hz
        self._next_frame += period
        if self._next_frame <= d.time:  # never burst to catch up
            self._next_frame = d.time + period
        if self._render_data is None or self._render_data_model is not m:
            self._render_data, self._render_data_model = mujoco.MjData(m), m
        mujoco.mj_copyData(self._render_data, m, d)
        for idx in range(len(CAMERA_NAMES)):
            self._frame_count[idx] += 1
        return FrameJob(m, self._render_data, tuple(self._frame_count), float(d.time), tuple(self._cam_fovy))

    def render_camera(self, camera: str, data: mujoco.MjData | None = None,
                      renderer: mujoco.Renderer | None = None) -> np.ndarray:  # fmt: skip
        """Render ``camera`` now (or from ``data``, a copy of a moment's state; with ``renderer``, one made on the
        calling thread: a GL context is its thread's): (IMAGE_SIZE, IMAGE_SIZE, 3) uint8 RGB, a private copy."""
        renderer = renderer or self._renderer
        if renderer is None or not self.render_enabled:
            raise RuntimeError("this SimWorld was created with render=False")
        renderer.update_scene(self.data if data is None else data, camera=self.CAMERAS[camera],
                              scene_option=self._scene_option)  # fmt: skip
        rgb = renderer.render().copy()
        self._last_frames[camera] = rgb
        return rgb

    @property
    def frame_counts(self) -> tuple[int, ...]:
        """Frames rendered so far, per camera (CAMERA_NAMES order)."""
        return tuple(self._frame_count)

    @property
    def last_frames(self) -> dict[str, np.ndarray]:
        """The most recent rendered image of each camera."""
        return dict(self._last_frames)

    # ------------------------------------------------------------------ monitoring
    def _event(self, kind: str, index: int, **extra: Any) -> None:
        assert self.data is not None
        self.events.append(
            {
                "kind": kind,
                "sim_time": round(float(self.data.time), 6),
                "workpiece": self.workpiece_names[index],
                "type": self.spec.workpieces[index],
                "target_slot": self.spec.target_slots[index],
                **extra,
            }
        )

    def pop_events(self) -> list[dict[str, Any]]:
        """Arrival / placement / removal / loss events since the last call."""
        out, self.events = self.events, []
        return out

    def _monitor(self) -> None:
        d = self.data
        assert d is not None
        self._next_monitor += MONITOR_PERIOD
        pieces = self._piece_states()
        for i, p in enumerate(pieces):
            if self._arrived_at[i] is None:
                continue
            now = metrics.placed(p)
            if now != self._placed[i]:
                self._placed[i] = now
                self._event("placed" if now else "removed", i, pos=np.round(p.pos, 4).tolist())
            lost = self._is_lost(p.pos)
            if lost and not self._lost[i]:
                self._lost[i] = True
                self._event("lost", i, pos=np.round(p.pos, 4).tolist())
        if not self.done and d.time >= self.spec.horizon - 1e-9:
            self.done = True
            self.final_metrics = self.evaluate()
            self._event_done()

    def abort(self, reason: str) -> None:
        """End the episode now, as failed for ``reason`` (a node of the loop stopped answering): the outcome is
        what the world holds at this moment, with the reason."""
        if self.done:
            return
        self.done = True
        self.final_metrics = {**self.evaluate(), "aborted": reason}
        self._event_done()

    def _event_done(self) -> None:
        assert self.data is not None and self.final_metrics is not None
        self.events.append({"kind": "done", "sim_time": round(float(self.data.time), 6), "metrics": self.final_metrics})

    @staticmethod
    def _is_lost(pos: np.ndarray) -> bool:
        """Ran off the belt end (into the catch bin) or fell to the floor off the belt and tray."""
        return bool(pos[0] > layout.BELT_X_MAX + 0.01 and pos[2] < layout.BELT_TOP_Z)

    def _held_flags(self) -> list[bool]:
        d = self.data
        assert d is not None
        n = len(self._wp_geom)
        left = [False] * n
        right = [False] * n
        if d.ncon:
            pairs = d.contact.geom[: d.ncon]
            index = {int(g): i for i, g in enumerate(self._wp_geom)}
            for g1, g2 in pairs:
                g1, g2 = int(g1), int(g2)
                for a, b in ((g1, g2), (g2, g1)):
                    i = index.get(a)
                    if i is not None:
                        if b in self._left_geoms:
                            left[i] = True
                        elif b in self._right_geoms:
                            right[i] = True
        return [lft and rgt for lft, rgt in zip(left, right, strict=True)]

    def _piece_states(self) -> list[metrics.PieceState]:
        d = self.data
        assert d is not None
        held = self._held_flags()
        out = []
        for i, wp in enumerate(self.spec.workpiece_types):
            a, v = self._wp_qadr[i], self._wp_dadr[i]
            out.append(
                metrics.PieceState(
                    pos=d.qpos[a : a + 3].copy(),
                    target_slot=self.spec.target_slots[i],
                    max_half_extent=wp.max_half_extent,
                    lin_vel=d.qvel[v : v + 3].copy(),
                    held=held[i],
                )
            )
        return metrics.free_targets(out) if self.spec.slot_rule == "free" else out

    # ------------------------------------------------------------------ queries
    @property
    def sim_time(self) -> float:
        assert self.data is not None
        return float(self.data.time)

    @property
    def episode(self) -> int:
        return self._episode

    @property
    def horizon(self) -> float:
        return self.spec.horizon

    @property
    def home_q(self) -> np.ndarray:
        return self._home_q.copy()

    @property
    def arm_q(self) -> np.ndarray:
        assert self.data is not None
        return self.data.qpos[self._arm_qadr].copy()

    @property
    def arm_target(self) -> np.ndarray:
        return self._arm_target.copy()

    @property
    def tcp_pos(self) -> np.ndarray:
        assert self.data is not None
        return self.data.site_xpos[self._site].copy()

    @property
    def tcp_rotmat(self) -> np.ndarray:
        assert self.data is not None
        return self.data.site_xmat[self._site].reshape(3, 3).copy()

    @property
    def tcp_quat(self) -> np.ndarray:
        """TCP orientation as a quaternion (x, y, z, w)."""
        assert self.data is not None
        q = np.zeros(4)
        mujoco.mju_mat2Quat(q, self.data.site_xmat[self._site])
        return _xyzw(q)

    @property
    def gripper_coord(self) -> float:
        """Measured gripper coordinate: 0 open .. 1 closed (from the mean finger opening)."""
        assert self.data is not None
        qpos = self.data.qpos
        opening = 0.5 * (float(qpos[self._finger_qadr[0]]) + float(qpos[self._finger_qadr[1]]))
        return min(1.0, max(0.0, 1.0 - opening / scene.FINGER_STROKE))

    @property
    def belt_speed(self) -> float:
        return self._belt_speed

    @property
    def belt_pos(self) -> float:
        return self._belt_pos

    @property
    def belt_running(self) -> bool:
        return self._belt_running

    def workpiece_pos(self, index: int) -> np.ndarray:
        assert self.data is not None
        a = self._wp_qadr[index]
        return self.data.qpos[a : a + 3].copy()

    def workpiece_quat(self, index: int) -> np.ndarray:
        """(x, y, z, w)."""
        assert self.data is not None
        a = self._wp_qadr[index]
        return _xyzw(self.data.qpos[a + 3 : a + 7])

    def workpiece_vel(self, index: int) -> np.ndarray:
        assert self.data is not None
        v = self._wp_dadr[index]
        return self.data.qvel[v : v + 3].copy()

    @property
    def arrived(self) -> list[bool]:
        return [t is not None for t in self._arrived_at]

    @property
    def arrival_log(self) -> list[float | None]:
        """Sim time each workpiece actually appeared (None: not yet)."""
        return list(self._arrived_at)

    def ground_truth(self) -> dict[str, Any]:
        """JSON-able snapshot of the world (sim only: poses the real cell cannot know)."""
        pieces = self._piece_states()
        centers = layout.slot_centers()
        wps = []
        for i, p in enumerate(pieces):
            slot = self.spec.target_slots[i]
            wps.append(
                {
                    "name": self.workpiece_names[i],
                    "type": self.spec.workpieces[i],
                    "pos": [float(x) for x in p.pos],
                    "quat": [float(x) for x in self.workpiece_quat(i)],
                    "lin_vel": [float(x) for x in p.lin_vel] if p.lin_vel is not None else [0.0, 0.0, 0.0],
                    "arrived": self._arrived_at[i] is not None,
                    "arrival_time": self.spec.arrival_times[i],
                    "held": bool(p.held),
                    "target_slot": slot,
                    "target_pos": [float(x) for x in centers[slot]],
                    "in_slot": bool(metrics.placed(p)) if self._arrived_at[i] is not None else False,
                    "lost": self._is_lost(p.pos),
                }
            )
        return {
            "sim_time": self.sim_time,
            "episode": self._episode,
            "done": self.done,
            "horizon": self.spec.horizon,
            "slot_rule": self.spec.slot_rule,
            "belt": {"speed": self._belt_speed, "position": self._belt_pos, "running": self._belt_running,
                     "target_speed": self._belt_target},
            "tcp": {"pos": [float(x) for x in self.tcp_pos], "quat": [float(x) for x in self.tcp_quat]},
            "gripper_coord": self.gripper_coord,
            "arm_q": [float(x) for x in self.arm_q],
            "workpieces": wps,
        }

    def evaluate(self) -> dict[str, Any]:
        """SR, PCR_T, PCR_S, pcr_s_init and per-workpiece placed flags for the current state."""
        pieces = self._piece_states()
        result = metrics.evaluate(pieces, initial=self._initial_pieces)
        result["sim_time"] = self.sim_time
        result["arrived"] = self.arrived
        result["workpieces"] = list(self.workpiece_names)
        return result

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
