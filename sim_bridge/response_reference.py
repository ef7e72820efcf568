"""The arm's action response held against robosuite's measured one (LIBERO's simulator).

``tests/data/robosuite_osc_response.json`` (made by ``tools/robosuite_reference.py``) holds,
for a battery of 7-D action sequences, the TCP trajectory robosuite 1.4.0's Panda followed
under ``OSC_POSE`` at 20 Hz. This module replays the same sequences through any driver rig,
and compares the trajectories relative to their start: the RMS distance over the sequence,
as a fraction of the reference's travel (path length), in position and in rotation.

Only the components a sequence commands are compared as a fraction of travel: under a pure
rotation robosuite's Panda also translates (tens of millimetres: the OSC decouples position and
orientation through the Panda's own inertia, and resets the position goal to wherever the arm
drifted). Those drifts are reported as RMS distances (the response reproduces them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial.transform import Rotation

from aubo_bridge.config import ArmConfig
from libero_workcell.contract import CONTROL_HZ_DEFAULT, SIM_SERVO_HZ_DEFAULT, SOURCE_POLICY, action_to_delta
from libero_workcell.layout import ROBOT

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "robosuite_osc_response.json"


@dataclass(frozen=True)
class ReferenceSequence:
    name: str
    description: str
    actions: np.ndarray  # (n, 7), warm-up included
    warmup: int
    pos: np.ndarray  # (n + 1, 3) TCP position after each action (row 0: before the first)
    R: np.ndarray  # (n + 1, 3, 3) TCP rotation (of a body fixed to the TCP: relative rotations are the TCP's)

    @property
    def commands_translation(self) -> bool:
        return bool(np.any(self.actions[:, :3] != 0))

    @property
    def commands_rotation(self) -> bool:
        return bool(np.any(self.actions[:, 3:6] != 0))


def load_reference(path: Path = DATA) -> list[ReferenceSequence]:
    data = json.loads(path.read_text())
    out = []
    for s in data["sequences"]:
        quats = np.asarray(s["states"]["eef_quat_xyzw"], float)
        out.append(
            ReferenceSequence(
                name=s["name"],
                description=s["description"],
                actions=np.asarray(s["actions"], float),
                warmup=int(s["warmup_steps"]),
                pos=np.asarray(s["states"]["eef_pos"], float),
                R=Rotation.from_quat(quats).as_matrix(),
            )
        )
    return out


@dataclass(frozen=True)
class ResponseError:
    name: str
    pos_rms: float  # m
    pos_travel: float  # m, the reference's path length after the warm-up
    rot_rms: float  # rad
    rot_travel: float  # rad
    compares_pos: bool
    compares_rot: bool

    @property
    def pos_ratio(self) -> float:
        return self.pos_rms / self.pos_travel if self.pos_travel > 0 else 0.0

    @property
    def rot_ratio(self) -> float:
        return self.rot_rms / self.rot_travel if self.rot_travel > 0 else 0.0


def _relative(pos: np.ndarray, R: np.ndarray, start: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions and rotations (world frame) relative to the pose at ``start``, from ``start`` on."""
    return pos[start:] - pos[start], np.einsum("nij,kj->nik", R[start:], R[start])


def compare(seq: ReferenceSequence, pos: np.ndarray, R: np.ndarray) -> ResponseError:
    """Our trajectory (same indexing as the reference: row i after i actions) against the reference."""
    w = seq.warmup
    rp, rR = _relative(seq.pos, seq.R, w)
    p, Rm = _relative(np.asarray(pos, float), np.asarray(R, float), w)
    pos_rms = float(np.sqrt(np.mean(np.sum((p - rp) ** 2, axis=1))))
    rot_err = Rotation.from_matrix(np.einsum("nij,nkj->nik", Rm, rR)).magnitude()
    rot_rms = float(np.sqrt(np.mean(rot_err**2)))
    pos_travel = float(np.sum(np.linalg.norm(np.diff(rp, axis=0), axis=1)))
    steps = Rotation.from_matrix(np.einsum("nij,nkj->nik", rR[1:], rR[:-1])).magnitude()
    return ResponseError(
        seq.name, pos_rms, pos_travel, rot_rms, float(np.sum(steps)), seq.commands_translation, seq.commands_rotation
    )


def replay(
    seq: ReferenceSequence, submit: Callable[[np.ndarray], None], observe: Callable[[], tuple[np.ndarray, np.ndarray]]
) -> tuple[np.ndarray, np.ndarray]:
    """Run a sequence through a rig: ``submit(action)`` applies one action and lets one control period
    pass; ``observe()`` gives the TCP (position, rotation matrix). Returns trajectories indexed like the
    reference's."""
    poses = [observe()]
    for a in seq.actions:
        submit(a)
        poses.append(observe())
    return np.array([p for p, _ in poses]), np.array([r for _, r in poses])


def response_trajectory(
    seq: ReferenceSequence, servo_period: float = 1.0 / SIM_SERVO_HZ_DEFAULT
) -> tuple[np.ndarray, np.ndarray]:
    """``seq`` through the response alone (libero_workcell.action_response.PandaResponse, what the driver
    streams before IK and its limits), at the control rate with ``servo_period`` ticks per step."""
    stepper = _ResponseStepper(servo_period)
    pos, rot = [stepper.ref.pos], [stepper.ref.R]
    for a in seq.actions:
        stepper.act(a)
        pos.append(stepper.ref.pos)
        rot.append(stepper.ref.R)
    return np.array(pos), np.array(rot)


class _ResponseStepper:
    """The response alone, one action per control period (robosuite's goal update, then its servo ticks)."""

    def __init__(self, servo_period: float, pos: np.ndarray | None = None, R: np.ndarray | None = None) -> None:
        from libero_workcell.action_response import Goal, PandaResponse

        self.response = PandaResponse(servo_period)
        if pos is not None and R is not None:
            self.response.reset(pos, R)
        self.ticks = round(1.0 / CONTROL_HZ_DEFAULT / servo_period)
        self.ref = self.response.state()
        self.goal = Goal(self.ref.pos, self.ref.R)

    def act(self, action: np.ndarray) -> None:
        from libero_workcell.action_response import next_goal

        dpos, drot, _ = action_to_delta(np.clip(action, -1.0, 1.0))
        self.goal = next_goal(self.ref, self.goal, dpos, drot)
        for _ in range(self.ticks):
            self.ref = self.response.step(self.goal)


def sim_trajectory(seq: ReferenceSequence, arm_config: ArmConfig | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``seq`` on the simulated workcell in one process, in sim time: MuJoCo's AUBO with its position
    servos, the arm driver and its sim backends (sim_cell.episode), the measured TCP after each action."""
    from libero_workcell.task import TaskSpec
    from sim_cell.episode import make_sim_rig  # MuJoCo: only when a sim run is asked for

    rig = make_sim_rig(TaskSpec.from_seed(0), arm_config, active_source=SOURCE_POLICY)

    def submit(a: np.ndarray) -> None:
        rig.act(a, SOURCE_POLICY, seq.name)

    return replay(seq, submit, rig.tcp)


def table(errors: Sequence[ResponseError]) -> str:
    """One line per sequence: what is compared, the RMS error and the travel."""
    lines = [f"{'sequence':<42} {'pos rms/travel':>16} {'rot rms/travel':>16}"]
    for e in errors:
        pos = f"{e.pos_ratio * 100:5.1f}% ({e.pos_rms * 1e3:.1f}/{e.pos_travel * 1e3:.0f} mm)"
        rot = f"{e.rot_ratio * 100:5.1f}% ({np.degrees(e.rot_rms):.2f}/{np.degrees(e.rot_travel):.1f} deg)"
        lines.append(
            f"{e.name:<42} {pos if e.compares_pos else '(drift ' + f'{e.pos_rms * 1e3:.1f} mm)':>16} "
            f"{rot if e.compares_rot else '(drift ' + f'{np.degrees(e.rot_rms):.2f} deg)':>16}"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------- the same sequences through the ROS graph
REST_STEPS = 10  # zero actions after each sequence's return: the coasting ends before the next one starts
HOME_STEPS = 40  # tracking-law actions after the negated return, back onto the home pose


@dataclass(frozen=True)
class Segment:
    """Where one reference sequence sits in a :func:`reference_demo`: observation ``start`` is the one
    before its first action, so rows ``start .. start + n`` index like the reference's (row i after i actions)."""

    seq: ReferenceSequence
    start: int


def reference_demo(seqs: Sequence[ReferenceSequence], task_spec_json: str, rest: int = REST_STEPS):
    """The sequences as one AUBO demo (LIBERO layout) to replay open loop through the graph
    (:mod:`sim_cell.replay_node`): each sequence from the home pose, then its actions negated (the
    gripper open), then HOME_STEPS actions of the tracking law back onto the home pose, then ``rest`` zero
    actions. The negated actions alone do not bring the arm back: robosuite's OSC also translates the TCP
    under a rotation, which negating the rotation does not undo, and over the battery the start crept 20 cm
    toward the AUBO's base. The law's actions are planned offline on the response itself
    (:class:`~libero_workcell.action_response.PandaResponse`, what the driver streams), so the open-loop
    replay ends each sequence back home, at rest. The recorded path of each sequence is robosuite's,
    placed at the home pose; the return's and the rest's are only placeholders (not compared)."""
    from aubo_bridge.model.kinematics import HOME_Q, fk
    from libero_workcell.libero_format import Demo, aubo_robot_states

    p0, R0 = fk(HOME_Q)
    hold = np.zeros(7)
    hold[6] = -1.0
    actions, pos, rot, segments = [], [], [], []
    for seq in seqs:
        segments.append(Segment(seq, len(actions)))
        rel_p, rel_R = _relative(seq.pos, seq.R, 0)
        n = len(seq.actions)
        pos += list(p0 + rel_p[:n])
        rot += list(np.einsum("nij,jk->nik", rel_R[:n], R0))
        actions += list(seq.actions)
        back = seq.actions.copy()
        back[:, :6] *= -1.0
        back[:, 6] = -1.0
        home = _home_actions(np.concatenate([seq.actions, back]), p0, R0)
        end_p, end_R = p0 + rel_p[n], rel_R[n] @ R0
        pos += list(end_p - rel_p[:n]) + [p0] * (len(home) + rest)
        rot += [end_R] * n + [R0] * (len(home) + rest)
        actions += list(back) + home + [hold] * rest
    t = len(actions)
    rotvec = Rotation.from_matrix(np.array(rot)).as_rotvec()
    demo = Demo(
        "demo_0", np.array(actions), np.array(pos), rotvec,
        np.zeros((t, 1)), np.tile(HOME_Q, (t, 1)), aubo_robot_states(np.zeros(t), pos, rotvec),
        attrs={"task_spec": task_spec_json, "robot": ROBOT, "source": "robosuite OSC_POSE reference sequences"},
    )  # fmt: skip
    return demo, segments


def _home_actions(actions: np.ndarray, p0: np.ndarray, R0: np.ndarray) -> list[np.ndarray]:
    """HOME_STEPS actions of the tracking law taking the response, after ``actions`` from rest at (p0, R0),
    back onto (p0, R0) (planned on the response alone, at the sim's servo rate)."""
    from libero_workcell.tracking_law import tracking_action

    stepper = _ResponseStepper(1.0 / SIM_SERVO_HZ_DEFAULT, p0, R0)
    for a in actions:
        stepper.act(a)
    home = []
    for _ in range(HOME_STEPS):
        home.append(tracking_action(p0, R0, stepper.ref.pos, stepper.ref.R, -1.0))
        stepper.act(home[-1])
    return home


def segment_errors(segments: Sequence[Segment], pos: np.ndarray, rotvec: np.ndarray) -> list[ResponseError]:
    """Each sequence's response error from a replay's per-step TCP (observed before each step's action)."""
    R = Rotation.from_rotvec(np.asarray(rotvec, float)).as_matrix()
    out = []
    for s in segments:
        rows = slice(s.start, s.start + len(s.seq.actions) + 1)
        if rows.stop > len(pos):
            raise ValueError(f"{s.seq.name}: the replay has {len(pos)} steps, the sequence needs {rows.stop}")
        out.append(compare(s.seq, np.asarray(pos, float)[rows], R[rows]))
    return out
