#!/usr/bin/env python3
"""Record robosuite 1.4.0's OSC_POSE response to LIBERO-style 7-D actions, as reference data for our arm driver.

What: drives robosuite's Panda in the ``Lift`` task with the default ``OSC_POSE`` controller at 20 Hz (the setup
LIBERO trains and evaluates in) through a fixed set of action sequences (constant, impulse, ramp, sinusoid,
rotation, combined and gripper commands) and writes, per control step, the end-effector position, orientation and
gripper finger positions to ``tests/data/robosuite_osc_response.json``.

Why: a LIBERO action is a delta pose that robosuite re-applies to the *current* pose every step and then tracks
with a critically damped task-space spring, so it behaves more like a velocity command with lag and coasting than
like a goal step. Our driver must reproduce that meaning; this file is the ground truth its tests compare with.

How: ``python3 tools/robosuite_reference.py [--venv DIR] [--out FILE]`` (any Python 3; the outer part uses only
the standard library). It creates a throw-away virtual environment (default ``/tmp/robosuite-ref-venv``, Python
3.11) with the pinned packages below unless that venv already has them, re-runs itself inside it to measure, and
writes the JSON. The project's own ``.venv`` is never touched and no robosuite code is copied into the repo. The run
is headless (no renderer, no cameras) and deterministic (fixed seed, no initialization noise).

Pins: robosuite 1.4.0 is installed with ``--no-deps`` because its declared dependencies pull packages it does not
need here (``pynput``, the GUI build ``opencv-python``); what it needs is numpy (< 2 for numba 0.60), numba, scipy
(numba's ``np.linalg.eigh`` in robosuite's ``mat2quat`` calls LAPACK through scipy), opencv (the headless build
provides the same ``cv2``), Pillow, termcolor and mujoco. mujoco 3.1.x is required: mujoco 4 breaks robosuite 1.4's
joint lookup.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_VENV = Path("/tmp/robosuite-ref-venv")
DEFAULT_OUT = REPO / "tests" / "data" / "robosuite_osc_response.json"

# Everything the venv holds, pinned; installed in one ``pip install --no-deps`` so the set is exactly this.
PINS = (
    "robosuite==1.4.0",
    "mujoco==3.1.6",
    "numpy==1.26.4",
    "numba==0.60.0",
    "llvmlite==0.43.0",
    "scipy==1.17.1",
    "opencv-python-headless==4.11.0.86",
    "pillow==13.0.0",
    "termcolor==3.3.0",
    # mujoco's own dependencies
    "absl-py==2.5.1",
    "etils==1.15.0",
    "fsspec==2026.9.0",
    "typing_extensions==4.16.0",
    "zipp==4.1.2",
    "glfw==2.11.0",
    "PyOpenGL==3.1.10",
)

SEED = 0
ENV_NAME = "Lift"
ROBOT = "Panda"
CONTROL_FREQ = 20
WARMUP_STEPS = 10
OPEN = -1.0  # gripper command: -1 open, +1 closed (robosuite only uses its sign)
ROUND = 7  # decimals kept in the JSON (1e-7)
# Zero steps after a rotation: the position drifts for ~40 steps after rotation stops (robosuite resets the position
# goal to the current position every step, so nothing pulls the drift back); record until it has settled.
ROT_COAST = 40
TABLE_CLEARANCE = 0.05  # m: every recorded eef z must stay this far above the table top


# ----------------------------------------------------------------------------------------------- sequences
def act(x=0.0, y=0.0, z=0.0, rx=0.0, ry=0.0, rz=0.0, g=OPEN) -> list[float]:
    """One 7-D LIBERO action: position delta, axis-angle delta (both in [-1, 1]), gripper."""
    return [round(float(v), ROUND) for v in (x, y, z, rx, ry, rz, g)]


ZERO = act()


def build_sequences() -> list[dict]:
    """The measured sequences (without the warm-up, which is prepended to each)."""
    dt = 1.0 / CONTROL_FREQ
    seqs: list[dict] = []

    def add(name: str, description: str, actions: list[list[float]]) -> None:
        seqs.append({"name": name, "description": description, "actions": actions})

    add("hold_x_0.2", "x = +0.2 for 20 steps, then 20 zero steps", [act(x=0.2)] * 20 + [ZERO] * 20)
    add("impulse_x_1.0", "one step of x = +1.0, then 30 zero steps", [act(x=1.0)] + [ZERO] * 30)
    for axis in "xyz":
        for sign, tag in ((1, "pos"), (-1, "neg")):
            add(
                f"const_{axis}_{tag}_0.3",
                f"{axis} = {sign * 0.3:+.1f} for 15 steps, then 15 zero steps",
                [act(**{axis: sign * 0.3})] * 15 + [ZERO] * 15,
            )
    ramp = [0.5 * k / 20 for k in range(1, 21)] + [0.5 * (20 - k) / 20 for k in range(1, 21)]
    add(
        "ramp_x_0.5",
        "x ramps linearly 0.025 -> 0.5 over 20 steps, then 0.475 -> 0 over 20 steps, then 20 zero steps",
        [act(x=v) for v in ramp] + [ZERO] * 20,
    )
    n_sin = 3 * CONTROL_FREQ
    add(
        "sine_x_0.3_1hz",
        "x = 0.3 sin(2 pi t / 1.0 s), t = k / 20 s, for 3 s (60 steps), then 20 zero steps",
        [act(x=0.3 * math.sin(2 * math.pi * k * dt / 1.0)) for k in range(n_sin)] + [ZERO] * 20,
    )
    add(
        "lissajous_yz_0.3",
        "y = 0.3 sin(2 pi t / 1.0 s), z = 0.3 sin(2 pi t / 0.5 s) (z only rises), t = k / 20 s, for 3 s, "
        "then 20 zero steps",
        [
            act(y=0.3 * math.sin(2 * math.pi * k * dt / 1.0), z=0.3 * math.sin(2 * math.pi * k * dt / 0.5))
            for k in range(n_sin)
        ]
        + [ZERO] * 20,
    )
    for axis in ("rx", "ry", "rz"):
        for sign, tag in ((1, "pos"), (-1, "neg")):
            add(
                f"rot_{axis}_{tag}_0.1",
                f"d{axis} = {sign * 0.1:+.1f} (world-frame axis-angle) for 15 steps, then {ROT_COAST} zero steps",
                [act(**{axis: sign * 0.1})] * 15 + [ZERO] * ROT_COAST,
            )
    add("impulse_rz_0.5", f"one step of drz = +0.5, then {ROT_COAST} zero steps", [act(rz=0.5)] + [ZERO] * ROT_COAST)
    combo = act(0.2, -0.1, 0.15, 0.05, -0.05, 0.1)
    add(
        "combined_0.2_-0.1_0.15_0.05_-0.05_0.1",
        f"action [0.2, -0.1, 0.15, 0.05, -0.05, 0.1, -1] for 20 steps, then {ROT_COAST} zero steps",
        [combo] * 20 + [ZERO] * ROT_COAST,
    )
    # Its two halves alone: robosuite's response to the combined action is (nearly) their sum, and its
    # rotation half alone shows how far the Panda translates under a rotation (its dynamic coupling).
    add(
        "combined_translation_part",
        f"action [0.2, -0.1, 0.15, 0, 0, 0, -1] for 20 steps, then {ROT_COAST} zero steps",
        [act(0.2, -0.1, 0.15)] * 20 + [ZERO] * ROT_COAST,
    )
    add(
        "combined_rotation_part",
        f"action [0, 0, 0, 0.05, -0.05, 0.1, -1] for 20 steps, then {ROT_COAST} zero steps",
        [act(0, 0, 0, 0.05, -0.05, 0.1)] * 20 + [ZERO] * ROT_COAST,
    )
    add(
        "gripper_close_open",
        "arm still; gripper +1 (close) for 15 steps, then -1 (open) for 15 steps",
        [act(g=1.0)] * 15 + [ZERO] * 15,
    )
    add(
        "gripper_close_while_x_0.2",
        "x = +0.2 with gripper +1 (closing) for 20 steps, arm still with gripper +1 for 10 steps, "
        "then arm still with gripper -1 (open) for 15 steps",
        [act(x=0.2, g=1.0)] * 20 + [act(g=1.0)] * 10 + [ZERO] * 15,
    )
    return seqs


# ----------------------------------------------------------------------------------------------- outer: venv
def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def venv_works(venv: Path) -> bool:
    """True if the venv imports robosuite and mujoco and holds exactly the pinned versions."""
    py = venv_python(venv)
    if not py.exists():
        return False
    check = (
        "import importlib.metadata as m, sys\n"
        f"pins = {list(PINS)!r}\n"
        "bad = [p for p in pins if m.version(p.split('==')[0]) != p.split('==')[1]]\n"
        "import mujoco, robosuite\n"
        "sys.exit(1 if bad else 0)\n"
    )
    env = dict(os.environ, MUJOCO_GL="egl")
    res = subprocess.run([str(py), "-c", check], capture_output=True, env=env, check=False)
    return res.returncode == 0


def ensure_venv(venv: Path, python: str) -> None:
    if venv_works(venv):
        print(f"venv {venv} already has the pinned packages")
        return
    print(f"creating venv {venv} with {python} and installing {len(PINS)} pinned packages ...", flush=True)
    subprocess.run([python, "-m", "venv", "--clear", str(venv)], check=True)
    subprocess.run(
        [str(venv_python(venv)), "-m", "pip", "install", "--quiet", "--no-deps", *PINS],
        check=True,
    )
    if not venv_works(venv):
        sys.exit(f"venv {venv} was installed but does not import robosuite with the pinned versions")


def pick_python(requested: str | None) -> str:
    if requested:
        return requested
    found = shutil.which("python3.11")
    if found:
        return found
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    sys.exit("python3.11 not found; pass --python")


# ----------------------------------------------------------------------------------------------- inner: measure
def dump_json(obj, path: Path) -> None:
    """JSON with one line per innermost number list (a state row, an action) to stay small and readable."""
    text = json.dumps(obj, indent=1)
    text = re.sub(r"\[\s+([^\[\]{}\"]*?)\s+\]", lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def measure(out: Path) -> None:
    import datetime
    from importlib import metadata

    import mujoco
    import numpy as np
    import robosuite
    from robosuite.controllers import load_controller_config

    def r(values) -> list[float]:
        return [round(float(v), ROUND) + 0.0 for v in values]  # + 0.0 turns -0.0 into 0.0

    np.random.seed(SEED)  # Lift draws the cube's size from numpy's global RNG when it builds the model
    controller_file_config = load_controller_config(default_controller="OSC_POSE")
    config_as_loaded = dict(controller_file_config)
    env = robosuite.make(
        ENV_NAME,
        robots=ROBOT,
        controller_configs=controller_file_config,
        control_freq=CONTROL_FREQ,
        initialization_noise=None,
        has_renderer=False,
        has_offscreen_renderer=False,
        use_camera_obs=False,
        ignore_done=True,
        hard_reset=False,
    )
    robot = env.robots[0]

    def reset():
        np.random.seed(SEED)  # robosuite 1.4 draws the cube placement from numpy's global RNG
        return env.reset()

    def state(obs) -> dict:
        return {
            "pos": r(obs["robot0_eef_pos"]),
            "quat": r(obs["robot0_eef_quat"]),
            "grip": r(obs["robot0_gripper_qpos"]),
        }

    obs0 = reset()
    qpos0 = env.sim.data.qpos.copy()
    ctrl = robot.controller
    table_top_z = float(env.table_offset[2])
    metadata_block = {
        "what": "robosuite 1.4.0 OSC_POSE response of the Panda to LIBERO-style 7-D actions, per control step",
        "generated_by": "tools/robosuite_reference.py (rerun: python3 tools/robosuite_reference.py)",
        "date_utc": datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        "versions": {
            "python": sys.version.split()[0],
            "robosuite": robosuite.__version__,
            "mujoco": mujoco.__version__,
            "numpy": np.__version__,
            "numba": metadata.version("numba"),
        },
        "pinned_packages": list(PINS),
        "env": ENV_NAME,
        "robot": ROBOT,
        "env_kwargs": {
            "controller_configs": "load_controller_config(default_controller='OSC_POSE')",
            "control_freq": CONTROL_FREQ,
            "initialization_noise": None,
            "has_renderer": False,
            "has_offscreen_renderer": False,
            "use_camera_obs": False,
            "ignore_done": True,
            "hard_reset": False,
        },
        "controller_config_file": config_as_loaded,
        "controller_as_instantiated": {
            "type": type(ctrl).__name__,
            "name": ctrl.name,
            "kp": r(ctrl.kp),
            "kd": r(ctrl.kd),
            "damping_ratio": config_as_loaded["damping_ratio"],
            "input_max": r(ctrl.input_max),
            "input_min": r(ctrl.input_min),
            "output_max": r(ctrl.output_max),
            "output_min": r(ctrl.output_min),
            "control_freq": ctrl.control_freq,
            "control_delta": ctrl.use_delta,
            "control_ori": ctrl.use_ori,
            "uncouple_pos_ori": ctrl.uncoupling,
            "impedance_mode": ctrl.impedance_mode,
            "interpolation": None if ctrl.interpolator_pos is None else type(ctrl.interpolator_pos).__name__,
            "position_limits": None if ctrl.position_limits is None else ctrl.position_limits.tolist(),
            "orientation_limits": None if ctrl.orientation_limits is None else ctrl.orientation_limits.tolist(),
            "eef_site": ctrl.eef_name,
        },
        "timing": {
            "control_timestep_s": env.control_timestep,
            "sim_timestep_s": float(env.sim.model.opt.timestep),
            "substeps_per_control_step": round(env.control_timestep / env.sim.model.opt.timestep),
            "goal_set": "once per control step (first substep); torques recomputed every substep",
        },
        "initial_state": {
            "how": (
                f"np.random.seed({SEED}) and robosuite.make(...) as in env_kwargs, then before every sequence "
                f"np.random.seed({SEED}) and env.reset(); then {WARMUP_STEPS} zero steps [0,0,0,0,0,0,-1] "
                "(LIBERO's warm-up), recorded"
            ),
            "init_qpos": r(robot.init_qpos),
            "joint_pos_at_reset": r(env.sim.data.qpos[robot._ref_joint_pos_indexes]),
            "robot_base_pos": r(env.sim.data.get_body_xpos("robot0_base")),
            "table_top_z": table_top_z,
            "cube_pos_at_reset": r(obs0["cube_pos"]),
            "cube_half_size": r(env.cube.size),
        },
        "conventions": {
            "frame": "MuJoCo world frame of the Lift scene (x forward from the robot, z up), metres",
            "actions": (
                "7 floats: dx, dy, dz, drx, dry, drz in [-1, 1] (clipped to input_min/max), gripper. Goal = current "
                "eef pose + scaled delta: position 0.05 m per unit, axis-angle 0.5 rad per unit, rotation applied "
                "in the world frame (goal_R = Rot(delta) @ current_R)"
            ),
            "gripper_action": (
                "only its sign counts: each substep the finger command moves 0.01 toward +1 (close) or -1 (open), "
                "i.e. 0.25 per control step: the command crosses -1 -> +1 in 8 steps, the fingers follow with lag"
            ),
            "orientation_goal_quirk": (
                "robosuite only updates the orientation goal when a rotation delta is nonzero; with zero rotation "
                "the previous orientation goal is kept, so rotation coasts on toward it after the actions stop"
            ),
            "position_goal_quirk": (
                "the position goal is reset to the current position + delta every step, so drift (for instance "
                "the translation a pure rotation causes) is never pulled back"
            ),
            "eef_pos": "robot0_eef_pos: world position of site gripper0_grip_site (between the fingertips)",
            "eef_quat": (
                "robot0_eef_quat: orientation of body robot0_right_hand (the flange, not the grip site) as "
                "x, y, z, w (robosuite converts MuJoCo's w-first xquat with convert_quat(to='xyzw')); the grip site "
                "the controller tracks is rotated from it by a fixed -90 deg about the hand z axis"
            ),
            "gripper_qpos": "robot0_gripper_qpos: the two finger slide joints, m (left positive, right negative)",
            "indexing": (
                "states[i] is the observation after i actions: states[0] is the reset state, actions[i] is applied "
                "between states[i] and states[i + 1]; the first warmup_steps actions are the warm-up"
            ),
            "rounding": f"all floats rounded to 1e-{ROUND}",
        },
        "sequences_note": "each sequence's summary is computed from states[warmup_steps:]",
    }

    sequences = []
    warmup = [ZERO] * WARMUP_STEPS
    for spec in build_sequences():
        obs = reset()
        if not np.array_equal(env.sim.data.qpos, qpos0):
            raise RuntimeError("reset is not deterministic")
        actions = warmup + spec["actions"]
        states = [state(obs)]
        for a in actions:
            obs, _, _, _ = env.step(np.array(a))
            states.append(state(obs))
        seq = {
            "name": spec["name"],
            "description": spec["description"],
            "warmup_steps": WARMUP_STEPS,
            "n_actions": len(actions),
            "actions": actions,
            "summary": summarize(actions, states),
            "states": {
                "eef_pos": [s["pos"] for s in states],
                "eef_quat_xyzw": [s["quat"] for s in states],
                "gripper_qpos": [s["grip"] for s in states],
            },
        }
        min_z = min(p[2] for p in seq["states"]["eef_pos"])
        if min_z < table_top_z + TABLE_CLEARANCE:
            raise RuntimeError(f"{spec['name']}: eef z {min_z:.3f} comes within {TABLE_CLEARANCE} m of the table")
        sequences.append(seq)
        print_summary(seq)

    env.close()
    dump_json({"metadata": metadata_block, "sequences": sequences}, out)


def summarize(actions: list[list[float]], states: list[dict]) -> dict:
    """Travel figures (mm, deg) of the part after the warm-up."""
    import numpy as np

    pos = np.array([s["pos"] for s in states[WARMUP_STEPS:]])
    quat = np.array([s["quat"] for s in states[WARMUP_STEPS:]])
    grip = np.array([s["grip"] for s in states[WARMUP_STEPS:]])
    opening = grip[:, 0] - grip[:, 1]  # left finger positive, right negative
    acts = np.array(actions[WARMUP_STEPS:])
    active = np.nonzero(np.any(acts[:, :6] != 0.0, axis=1))[0]
    last = int(active[-1]) + 1 if len(active) else 0  # state index right after the last nonzero arm action
    steps = np.linalg.norm(np.diff(pos, axis=0), axis=1) * 1e3

    def angle(q1, q2) -> float:
        return math.degrees(2 * math.acos(min(1.0, abs(float(np.dot(q1, q2))))))

    rot_steps = [angle(quat[i], quat[i + 1]) for i in range(len(quat) - 1)]
    return {
        "active_steps": last,
        "net_displacement_mm": r3((pos[-1] - pos[0]) * 1e3),
        "travel_during_mm": round(float(np.linalg.norm(pos[last] - pos[0]) * 1e3), 3),
        "coast_after_mm": round(float(np.linalg.norm(pos[-1] - pos[last]) * 1e3), 3),
        "path_length_mm": round(float(steps.sum()), 3),
        "max_step_mm": round(float(steps.max()), 3),
        "per_step_mm": [round(float(s), 3) for s in steps],
        "rotation_during_deg": round(angle(quat[0], quat[last]), 3),
        "rotation_coast_deg": round(angle(quat[last], quat[-1]), 3),
        "max_step_rotation_deg": round(max(rot_steps), 3),
        "finger_opening_mm_start_min_end": r3(np.array([opening[0], opening.min(), opening[-1]]) * 1e3),
    }


def r3(values) -> list[float]:
    return [round(float(v), 3) + 0.0 for v in values]


def print_summary(seq: dict) -> None:
    s = seq["summary"]
    line = (
        f"{seq['name']:<38} active {s['active_steps']:>2}  net {s['net_displacement_mm']} mm  "
        f"during {s['travel_during_mm']:.2f}  coast {s['coast_after_mm']:.2f}  max/step {s['max_step_mm']:.2f} mm"
    )
    if s["rotation_during_deg"] + s["rotation_coast_deg"] > 0.5:
        line += (
            f"  rot during {s['rotation_during_deg']:.2f} coast {s['rotation_coast_deg']:.2f} "
            f"max/step {s['max_step_rotation_deg']:.2f} deg"
        )
    if seq["name"].startswith("gripper"):
        line += f"  opening start/min/end {s['finger_opening_mm_start_min_end']} mm"
    print(line, flush=True)
    if seq["name"] == "hold_x_0.2":
        x = [p[0] for p in seq["states"]["eef_pos"][WARMUP_STEPS:]]
        dx = [f"{(b - a) * 1e3:.2f}" for a, b in itertools.pairwise(x)]
        print(f"    x per step (mm): {' '.join(dx)}")
        print(f"    x during {(x[20] - x[0]) * 1e3:.2f} mm (ref 46.6), coast {(x[-1] - x[20]) * 1e3:.2f} mm (ref 4.3)")
    if seq["name"] == "impulse_x_1.0":
        x = [p[0] for p in seq["states"]["eef_pos"][WARMUP_STEPS:]]
        cum = [f"{(v - x[0]) * 1e3:.2f}" for v in x[1:10]]
        print(f"    cumulative x (mm): {' '.join(cum)} ... {(x[-1] - x[0]) * 1e3:.2f} (ref 5.43 9.57 10.45 ... 12.60)")


# ----------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV, help=f"throw-away venv (default {DEFAULT_VENV})")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON (default tests/data/...)")
    parser.add_argument("--python", help="interpreter for a new venv (default python3.11)")
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = args.out.resolve()

    if args.inside:
        measure(out)
        return 0

    t0 = time.monotonic()
    venv = args.venv.resolve()
    if venv == (REPO / ".venv").resolve():
        sys.exit("refusing to use the project's own .venv: pass a throw-away --venv")
    ensure_venv(venv, pick_python(args.python))
    t1 = time.monotonic()
    env = dict(os.environ, MUJOCO_GL="egl", PYTHONNOUSERSITE="1")
    cmd = [str(venv_python(venv)), str(Path(__file__).resolve()), "--inside", "--out", str(out)]
    res = subprocess.run(cmd, env=env, check=False)
    if res.returncode:
        return res.returncode
    t2 = time.monotonic()
    data = json.loads(out.read_text())
    print(
        f"wrote {out} ({out.stat().st_size / 1024:.0f} KiB, {len(data['sequences'])} sequences); "
        f"venv {t1 - t0:.1f} s, measurement {t2 - t1:.1f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
