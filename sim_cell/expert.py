"""Scripted expert: unloads workpieces from the moving belt into their tray slots.

It drives the arm only through the contract's 7-D action (the same message a
policy or teleop sends) and reads the sim's ground truth (workpiece poses and
velocities, belt speed, target slots) plus the contract's 7-D state. That it
completes the task proves the contract is sufficient for it.

Control law per step, the Panda-to-AUBO retargeting law of LIBERO-Industry:
action = clip(k * error / scale + feed-forward, -1, 1), with the TCP pointing
straight down; k = 3 under LIBERO's action response (the seed's gain). Tracking
a workpiece adds the belt velocity as feed-forward so the gripper moves with it
while descending. Speeds (the cap, the feed-forward) go through the response's
steady step ratio: under LIBERO's response a held goal offset moves the arm
only about a quarter of it per step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.config import RESPONSE_GOAL_DELTA, RESPONSE_LIBERO
from libero_workcell.action_response import OscGains, steady_step_ratio
from libero_workcell.contract import (
    ACTION_POS_SCALE,
    ACTION_ROT_SCALE,
    CONTROL_HZ_DEFAULT,
    GRIPPER_CLOSE,
    GRIPPER_OPEN,
)
from libero_workcell.layout import BELT_TOP_Z, BELT_WIDTH, BELT_Y, HOME_TCP_ROTMAT, slot_centers, slot_index_at
from libero_workcell.task import WORKPIECE_CATALOG


@dataclass(frozen=True)
class WorkpieceView:
    name: str
    pos: np.ndarray  # (3,) m, centre
    vel: np.ndarray  # (3,) m/s
    half_height: float  # m
    arrived: bool
    placed: bool  # in its target slot
    slot_pos: np.ndarray  # (3,) target slot centre on the tray floor
    type: str = ""  # catalogue type (libero_workcell.task.WORKPIECE_CATALOG)
    height: float = 0.0  # m, its height as it stands on the belt


@dataclass(frozen=True)
class SceneView:
    """What the expert may know: ground truth the sim publishes on its sim-only topic."""

    sim_time: float
    belt_speed: float
    workpieces: tuple[WorkpieceView, ...]
    slot_rule: str = "ordered"  # "free": the expert chooses the slots (TaskSpec.slot_rule)

    @classmethod
    def from_ground_truth(cls, gt: dict) -> SceneView:
        wps = tuple(
            WorkpieceView(
                name=w["name"],
                pos=np.asarray(w["pos"], float),
                vel=np.asarray(w["lin_vel"], float),
                half_height=float(WORKPIECE_CATALOG[w["type"]].half_extents[2]),
                arrived=bool(w["arrived"]),
                placed=bool(w["in_slot"]),
                slot_pos=np.asarray(w["target_pos"], float),
                type=str(w["type"]),
                height=float(WORKPIECE_CATALOG[w["type"]].size[2]),
            )
            for w in gt["workpieces"]
        )
        return cls(float(gt["sim_time"]), float(gt["belt"]["speed"]), wps, str(gt.get("slot_rule", "ordered")))


class Phase(enum.Enum):
    WAIT = "wait"
    TRACK = "track"  # above the workpiece, moving with it
    DESCEND = "descend"
    GRASP = "grasp"
    LIFT = "lift"
    TRANSFER = "transfer"
    LOWER = "lower"
    RELEASE = "release"
    RETREAT = "retreat"


@dataclass
class ExpertConfig:
    control_hz: float = CONTROL_HZ_DEFAULT
    action_response: str = RESPONSE_LIBERO  # what the arm does with an action (ArmConfig.action_response)
    gain: float | None = None  # k in action = k * error / scale; None: 3 (libero, the seed's), 0.8 (goal_delta)
    max_speed: float = 0.45  # m/s, TCP speed when empty-handed
    carry_speed: float = 0.25  # m/s, TCP speed while holding a workpiece
    max_rot_speed: float | None = None  # rad/s, TCP turn rate; None: as fast as the gain asks
    hover: float = 0.12  # m above the grasp point while approaching
    pick_x_min: float = -0.46  # workpieces are picked once past this belt x
    pick_x_max: float = 0.45  # ... and before this one (reach)
    xy_tol: float = 0.006  # m, to start descending / lowering
    z_tol: float = 0.006  # m
    grasp_steps: int = 8  # control steps with the gripper closing before lifting
    release_steps: int = 8
    grasp_depth: float = 0.0  # m below the workpiece centre for the fingertips' centre
    place_clearance: float = 0.012  # m above the slot floor for the workpiece bottom at release
    min_radius: float = 0.30  # m: straight moves closer than this to the base axis are detoured
    via_radius: float = 0.45  # m: radius of the detour arc
    arc_step: float = 0.35  # rad: how far around the base each detour waypoint lies
    wait_pos: np.ndarray = field(default_factory=lambda: np.array([-0.30, BELT_Y, 0.20]))
    # The TCP orientation held throughout: pointing down, fingers closing along the belt (x). The AUBO's
    # home orientation; the Panda holds the same grasp turned half a turn about z (its wrist's comfort).
    tcp_rotmat: np.ndarray = field(default_factory=lambda: HOME_TCP_ROTMAT.copy())
    # A parallel gripper grasps the same with the TCP turned half a turn about z. True: between goals the TCP's
    # yaw turns with the base (its azimuth about the base axis), so the wrist stays where it is instead of
    # counter-turning every sweep, and it arrives at each grasp and place turned by whichever of the two equal
    # grasps keeps its yaw relative to the base nearest the start's: within a quarter turn of it, always (a
    # 7-joint wrist, counter-turning sweeps of up to 2.9 rad, wound into its limit).
    yaw_with_base: bool = False
    # Goals clipped to this box (min, max corners), or None. The Panda source uses the AUBO's workspace
    # box, so a Panda demonstration stays where the AUBO may follow it (its box binds the AUBO's own goals).
    goal_box: tuple[np.ndarray, np.ndarray] | None = None
    # ---- how a task is carried out (LIBERO-PeRM preferences: sim_bridge.preference_expert sets these) ----
    # m across the belt (+y, between the open fingers) per m of hover: the last descent onto the part at a slant
    approach_slant: float = 0.0
    transfer_height: float | None = None  # m, TCP height of the carry's lateral move; None: slot + hover + 0.10
    carry_yaw: float = 0.0  # rad the TCP turns about z while carrying (and back afterwards)
    # m/s onto the part (slow: the arm stops where asked instead of coasting). Under the libero response (robosuite's
    # OSC through the Panda's inertia) a full-speed descent knocked a part off the belt now and then (seed 9 at
    # 0.03 m/s: one of three placed); at 0.1 every seed of the tests grasps. None: no cap.
    descend_speed: float | None = 0.1
    grasp_height_fraction: float | None = None  # where on the part the fingers close (of its height); None: centre
    release_z_tol: float | None = None  # m, how close to the place point before letting go; None: z_tol
    first_type: str | None = None  # the workpiece type picked first, when it is there
    slot_for: dict[str, int] = field(default_factory=dict)  # type -> slot, when the task leaves slots free


GAINS = {RESPONSE_LIBERO: 3.0, RESPONSE_GOAL_DELTA: 0.8}


class ScriptedExpert:
    def __init__(self, config: ExpertConfig | None = None) -> None:
        self.config = config or ExpertConfig()
        cfg = self.config
        self.gain = GAINS[cfg.action_response] if cfg.gain is None else cfg.gain
        # Metres per step the arm moves per metre of goal offset held (goal_delta: all of it).
        self._ratio = (
            steady_step_ratio(OscGains(), 1.0 / cfg.control_hz) if cfg.action_response == RESPONSE_LIBERO else 1.0
        )
        self.phase = Phase.WAIT
        self.target_name: str | None = None
        self._counter = 0
        self._carry_offset = 0.0
        self._grasp_R = self.config.tcp_rotmat.copy()
        self._base_yaw0: float | None = None  # yaw_with_base: the TCP's yaw relative to its azimuth at the start
        self._base_yaw = 0.0  # ... and the one held now
        self._slot: dict[str, np.ndarray] = {}  # free slots: workpiece name -> the slot centre chosen for it
        self._picked_any = False
        self.log: list[tuple[float, str, str]] = []  # (sim time, phase, workpiece)

    def reset(self) -> None:
        self.__init__(self.config)

    # ------------------------------------------------------------------
    def act(self, scene: SceneView, state7: np.ndarray) -> np.ndarray:
        """One 7-D action for this control step."""
        cfg = self.config
        tcp = state7[:3]
        R = Rotation.from_rotvec(state7[3:6]).as_matrix()
        wp = self._current(scene)
        grip = GRIPPER_OPEN
        ff = np.zeros(3)
        goal = cfg.wait_pos.copy()
        if self.phase is Phase.WAIT:
            wp = self._choose(scene)
            if wp is not None:
                self._go(Phase.TRACK, scene, wp.name)
        elif wp is None or (self.phase is Phase.TRANSFER and self._dropped(wp, tcp)):
            self._go(Phase.RETREAT, scene, None)  # lost it: give up on this one, go back to waiting
        if self.phase is Phase.TRACK:
            goal = self._grasp_point(wp) + [0, cfg.approach_slant * cfg.hover, cfg.hover]
            ff = wp.vel
            if np.linalg.norm((goal - tcp)[:2]) < cfg.xy_tol * 2 and abs(goal[2] - tcp[2]) < 0.02:
                self._go(Phase.DESCEND, scene)
        elif self.phase is Phase.DESCEND:
            goal = self._grasp_point(wp)
            ff = wp.vel
            if np.linalg.norm(goal - tcp) < cfg.z_tol:
                self._go(Phase.GRASP, scene)
        elif self.phase is Phase.GRASP:
            goal = self._grasp_point(wp)
            ff = wp.vel
            grip = GRIPPER_CLOSE
            self._counter += 1
            if self._counter >= cfg.grasp_steps:
                self._carry_offset = tcp[2] - wp.pos[2]
                self._go(Phase.LIFT, scene)
        elif self.phase is Phase.LIFT:
            grip = GRIPPER_CLOSE
            goal = np.array([tcp[0], tcp[1], self._transfer_z(wp)])
            if tcp[2] > goal[2] - 0.02:
                if self._dropped(wp, tcp):  # it slipped out: try again
                    self._go(Phase.TRACK, scene, wp.name)
                else:
                    self._go(Phase.TRANSFER, scene)
        elif self.phase is Phase.TRANSFER:
            grip = GRIPPER_CLOSE
            goal = self._place_point(wp)
            goal[2] = self._transfer_z(wp) if cfg.transfer_height is not None else goal[2] + cfg.hover
            if np.linalg.norm((goal - tcp)[:2]) < cfg.xy_tol and abs(goal[2] - tcp[2]) < 0.03:
                self._go(Phase.LOWER, scene)
        elif self.phase is Phase.LOWER:
            grip = GRIPPER_CLOSE
            goal = self._place_point(wp)
            if np.linalg.norm(goal - tcp) < (cfg.release_z_tol or cfg.z_tol):
                self._go(Phase.RELEASE, scene)
        elif self.phase is Phase.RELEASE:
            goal = self._place_point(wp)
            self._counter += 1
            if self._counter >= cfg.release_steps:
                self._go(Phase.RETREAT, scene)
        elif self.phase is Phase.RETREAT:
            goal = np.array([tcp[0], tcp[1], cfg.wait_pos[2]])
            if tcp[2] > goal[2] - 0.02:
                self._go(Phase.WAIT, scene, None)
                goal = cfg.wait_pos.copy()
        if cfg.yaw_with_base:
            self._grasp_R = self._yaw_with_base(R, tcp, self._yaw_anchor(wp))
        elif cfg.carry_yaw:
            turned = self.phase in (Phase.TRANSFER, Phase.LOWER, Phase.RELEASE)
            yaw = Rotation.from_rotvec([0.0, 0.0, cfg.carry_yaw if turned else 0.0]).as_matrix()
            self._grasp_R = yaw @ cfg.tcp_rotmat
        carrying = self.phase in (Phase.LIFT, Phase.TRANSFER, Phase.LOWER)
        speed = cfg.carry_speed if carrying else cfg.max_speed
        if self.phase in (Phase.DESCEND, Phase.GRASP) and cfg.descend_speed is not None:
            speed = min(speed, cfg.descend_speed)
        return self._action(goal, ff, R, tcp, grip, speed)

    # ------------------------------------------------------------------
    def _route(self, tcp: np.ndarray, goal: np.ndarray) -> np.ndarray:
        """Go around the base on an arc when the straight path would pass near its axis.

        Near the base z axis the wrist centre crosses the shoulder singularity,
        where small TCP steps need large joint steps (which the arm bridge
        rightly refuses). Waypoints step at most ``arc_step`` around the base
        at ``via_radius`` until the straight path to the goal is clear.
        """
        cfg = self.config
        a, b = tcp[:2], goal[:2]
        d = b - a
        t = float(np.clip(-a @ d / max(d @ d, 1e-12), 0.0, 1.0))
        # Detour only where the straight path dips nearer the axis than min_radius *and* than its own ends:
        # a goal that itself lies within min_radius (the belt passing close to the base) is reached straight.
        if np.linalg.norm(a + t * d) >= min(cfg.min_radius, np.linalg.norm(a), np.linalg.norm(b)) - 1e-9:
            return goal
        ang_a, ang_b = np.arctan2(a[1], a[0]), np.arctan2(b[1], b[0])
        # No wrapping: angles in (-pi, pi] interpolate through the front of the
        # robot, never behind the base, where the wrist would wind up to its limit.
        delta = float(ang_b - ang_a)
        ang = ang_a + np.sign(delta) * min(abs(delta), cfg.arc_step)
        return np.array([cfg.via_radius * np.cos(ang), cfg.via_radius * np.sin(ang), max(tcp[2], goal[2])])

    def _action(
        self, goal: np.ndarray, ff: np.ndarray, R: np.ndarray, tcp: np.ndarray, grip: float, speed: float
    ) -> np.ndarray:
        cfg = self.config
        goal = self._route(tcp, goal)
        if cfg.goal_box is not None:
            goal = np.clip(goal, cfg.goal_box[0], cfg.goal_box[1])
        dt = 1.0 / cfg.control_hz
        step = self.gain * (goal - tcp)
        cap = speed * dt / self._ratio  # the goal offset that, held, moves the arm at ``speed``
        if np.linalg.norm(step) > cap:
            step *= cap / np.linalg.norm(step)
        pos = (step + ff * dt / self._ratio) / ACTION_POS_SCALE
        biggest = float(np.max(np.abs(pos)))
        if biggest > 1.0:  # shortened, never turned: clipping axes one by one bends the path
            pos /= biggest
        rot_err = Rotation.from_matrix(self._grasp_R @ R.T).as_rotvec()
        rot_step = self.gain * rot_err
        if cfg.max_rot_speed is not None:  # as for the speed: the held offset that turns at max_rot_speed
            rot_cap = cfg.max_rot_speed * dt / self._ratio
            if np.linalg.norm(rot_step) > rot_cap:
                rot_step *= rot_cap / np.linalg.norm(rot_step)
        rot = rot_step / ACTION_ROT_SCALE
        return np.clip(np.concatenate([pos, rot, [grip]]), -1.0, 1.0)

    def _yaw_anchor(self, wp: WorkpieceView | None) -> np.ndarray | None:
        """Where the grasp yaw must hold exactly at the end of this phase: the grasp or the place (None: nowhere,
        waiting or retreating, so the yaw relative to the base is kept)."""
        if wp is None or self.phase in (Phase.WAIT, Phase.RETREAT):
            return None
        if self.phase in (Phase.TRACK, Phase.DESCEND, Phase.GRASP):
            return self._grasp_point(wp)
        return wp.slot_pos

    def _yaw_with_base(self, R: np.ndarray, tcp: np.ndarray, anchor: np.ndarray | None) -> np.ndarray:
        """The TCP orientation to hold now under ``yaw_with_base``: the grasp orientation turned about z by the
        held base-relative yaw plus the TCP's azimuth. At an anchor, the base-relative yaw is the one of the two
        equal grasps there (yaws 0 and pi from ``tcp_rotmat``) nearest the start's."""
        cfg = self.config

        def azimuth(p: np.ndarray) -> float:
            return float(np.arctan2(p[1], p[0]))

        def wrap(a: float) -> float:
            return (a + np.pi) % (2 * np.pi) - np.pi

        if self._base_yaw0 is None:
            M = R @ cfg.tcp_rotmat.T
            self._base_yaw0 = self._base_yaw = wrap(float(np.arctan2(M[1, 0], M[0, 0])) - azimuth(tcp))
        if anchor is not None:
            self._base_yaw = min(
                (wrap(yaw - azimuth(anchor)) for yaw in (0.0, np.pi)),
                key=lambda c: abs(wrap(c - self._base_yaw0)),
            )
        return Rotation.from_rotvec([0.0, 0.0, self._base_yaw + azimuth(tcp)]).as_matrix() @ cfg.tcp_rotmat

    def _grasp_point(self, wp: WorkpieceView) -> np.ndarray:
        fraction = self.config.grasp_height_fraction
        if fraction is not None:  # the part stands on the belt: its bottom is half its height below its centre
            return wp.pos + [0.0, 0.0, (fraction - 0.5) * wp.height]
        return wp.pos - [0.0, 0.0, self.config.grasp_depth]

    def _transfer_z(self, wp: WorkpieceView) -> float:
        cfg = self.config
        return cfg.transfer_height if cfg.transfer_height is not None else float(wp.slot_pos[2] + cfg.hover + 0.10)

    def _slot_pos(self, wp: WorkpieceView, scene: SceneView | None = None) -> np.ndarray:
        """Where ``wp`` goes: its target slot, or under free slots the one chosen for it when it was picked (its
        preferred slot, else the leftmost slot that is neither taken nor kept for another workpiece)."""
        if wp.name in self._slot or scene is None or scene.slot_rule != "free":
            return self._slot.get(wp.name, wp.slot_pos)
        centers = slot_centers()
        taken = {slot_index_at(w.pos) for w in scene.workpieces if w.placed} | {
            int(np.argmin(np.linalg.norm(centers - p, axis=1))) for p in self._slot.values()}
        kept = {k for t, k in self.config.slot_for.items() if t != wp.type}
        want = self.config.slot_for.get(wp.type)
        free = [k for k in range(len(centers)) if k not in taken and k not in kept]
        k = want if want is not None and want not in taken else (free[0] if free else int(np.argmin(
            [np.linalg.norm(c - wp.slot_pos) for c in centers])))
        self._slot[wp.name] = centers[k].copy()
        return self._slot[wp.name]

    def _place_point(self, wp: WorkpieceView) -> np.ndarray:
        # TCP height that puts the carried workpiece's bottom just above the slot floor
        bottom_to_tcp = self._carry_offset + wp.half_height
        return self._slot_pos(wp) + [0.0, 0.0, self.config.place_clearance + bottom_to_tcp]

    def _dropped(self, wp: WorkpieceView, tcp: np.ndarray) -> bool:
        """The carried workpiece is no longer where the fingers are."""
        return bool(wp.pos[2] < tcp[2] - self._carry_offset - 0.02)

    def _current(self, scene: SceneView) -> WorkpieceView | None:
        for w in scene.workpieces:
            if w.name == self.target_name:
                return w
        return None

    def _choose(self, scene: SceneView) -> WorkpieceView | None:
        """The arrived, unplaced workpiece furthest downstream that is within the pick window."""
        cfg = self.config
        ready = [
            w
            for w in scene.workpieces
            if w.arrived
            and not w.placed
            and cfg.pick_x_min <= w.pos[0] <= cfg.pick_x_max
            and abs(w.pos[1] - BELT_Y) < BELT_WIDTH / 2
            and w.pos[2] > BELT_TOP_Z
        ]
        if not ready:
            return None
        chosen = max(ready, key=lambda w: w.pos[0])
        if cfg.first_type is not None and not self._picked_any:
            named = [w for w in ready if w.type == cfg.first_type]
            if named:
                chosen = named[0]
            elif any(w.type == cfg.first_type and not w.placed for w in scene.workpieces) and \
                    chosen.pos[0] < cfg.pick_x_max - 0.12:  # wait for it, unless the other would leave the reach
                return None
        self._picked_any = True
        self._slot_pos(chosen, scene)
        return chosen

    def _go(self, phase: Phase, scene: SceneView, name: str | bool | None = False) -> None:
        if name is not False:
            self.target_name = name
        self.phase = phase
        self._counter = 0
        self.log.append((scene.sim_time, phase.value, self.target_name or ""))
