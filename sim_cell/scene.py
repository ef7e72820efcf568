"""MJCF of the simulated LIBERO-Industry D2S workcell.

:func:`build_mjcf` writes the whole scene as one MJCF string:

- the AUBO-i5H arm as a chain of bodies built from the URDF joint table in
  :mod:`aubo_bridge.model.description` (base frame = world frame), stiff joint
  position servos (plus a velocity-feed-forward actuator per joint),
  gravity compensated, non-colliding link visuals;
- a CTAG2F90D-like parallel gripper on the flange: two fingers on slide
  joints (0..45 mm each, 90 mm stroke), one force-limited position servo per
  finger, high-friction pads, the ``grip_site`` TCP at ``TOOL_OFFSET``;
- the conveyor (a kinematically driven belt body carries workpieces by
  friction; the static belt is what the cameras see) with a catch bin past
  its end;
- the Level-1 tray with ``slot_<k>`` sites;
- the workpieces (free bodies) and two cameras, ``external`` and ``wrist``.

Collision classes: static environment geoms (contype 2, conaffinity 1) touch
only movable things (contype 1, conaffinity 3: workpieces, gripper); arm
link geoms collide with nothing, so self-collision never blocks the arm.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
from transforms3d.euler import euler2quat

from aubo_bridge.model.description import JOINT_LIMITS, JOINT_ORIGINS, TOOL_OFFSET
from gripper.registry import default_model
from libero_workcell import layout
from libero_workcell.contract import ARM_JOINT_NAMES, IMAGE_SIZE
from libero_workcell.task import WorkpieceType

TIMESTEP: Final = 0.002  # s
FINGER_STROKE: Final = default_model().finger_stroke  # m per finger: the workcell gripper's (gripper.registry)
FINGER_JOINTS: Final = ("finger_left", "finger_right")
FINGER_ACTUATORS: Final = ("finger_left", "finger_right")
FINGER_FORCE: Final = 25.0  # N per finger: holds a 150 g part by friction, does not crush
PAD_GEOMS: Final = ("pad_left", "pad_right")
FINGER_GEOMS: Final = ("finger_left", "finger_right", "pad_left", "pad_right")
GRIP_SITE: Final = "grip_site"
GRIPPER_BODY: Final = "gripper"
BELT_BODY: Final = "belt"
BELT_SLIDE: Final = "belt_slide"  # the kinematically driven belt surface
BELT_GEOM: Final = "belt_surface"
BELT_WRAP: Final = 0.005  # m: the belt body is wrapped back within +-BELT_WRAP
ARM_BODIES: Final = tuple(n.replace("_joint", "_Link") for n in ARM_JOINT_NAMES)
ARM_POS_ACTUATORS: Final = ARM_JOINT_NAMES  # position servos carry the joint names
ARM_VEL_ACTUATORS: Final = tuple(f"{n}_ff" for n in ARM_JOINT_NAMES)  # velocity feed-forward
# Servo gains: proximal joints carry more reflected inertia (armature).
ARM_KP: Final = (8000.0, 8000.0, 6000.0, 2500.0, 2500.0, 1500.0)  # N m / rad
# Damping: doubled from the first tuning, which overshot 2-5 mm when a stream stopped; now <= 1.2 mm.
ARM_KV: Final = (240.0, 240.0, 160.0, 50.0, 50.0, 24.0)  # N m s / rad
ARM_ARMATURE: Final = (0.4, 0.4, 0.25, 0.08, 0.08, 0.05)  # kg m^2 (rotor inertia through the gears)
ARM_FORCE: Final = (300.0, 300.0, 200.0, 60.0, 60.0, 60.0)  # N m
CAMERAS: Final = ("external", "wrist")
COLLISION_GROUP: Final = 3  # geom group of invisible collision-only geoms (not rendered)

# External camera: front-right of the cell (tray side, -y), looking down across tray, arm
# and belt, so that +x (slot order left to right) runs left to right in the image.
EXTERNAL_CAMERA_POS: Final = np.array([0.90, -1.05, 1.30])
EXTERNAL_CAMERA_TARGET: Final = np.array([0.08, 0.12, 0.0])
EXTERNAL_CAMERA_FOVY: Final = 45.0
# Wrist camera on the gripper body (gripper frame = flange frame, z = approach).
WRIST_CAMERA_POS: Final = np.array([0.0, -0.07, 0.10])
WRIST_CAMERA_TARGET: Final = np.array([0.0, 0.0, 0.32])
WRIST_CAMERA_FOVY: Final = 70.0

_ARM_LINK_RADIUS: Final = (0.062, 0.058, 0.048, 0.044, 0.044, 0.040)
_ARM_HOUSING_HALF: Final = (0.065, 0.070, 0.055, 0.050, 0.050, 0.030)
_ARM_MASS: Final = (4.0, 8.0, 3.0, 1.3, 1.3, 0.6)


def _f(values: Sequence[float] | np.ndarray) -> str:
    return " ".join(f"{float(v):.6g}" for v in values)


def _quat(rpy: Sequence[float]) -> str:
    """URDF fixed-axis roll-pitch-yaw -> MuJoCo quat ``w x y z``."""
    return _f(euler2quat(rpy[0], rpy[1], rpy[2], "sxyz"))


def _xyaxes(pos: np.ndarray, target: np.ndarray, up_hint: np.ndarray) -> str:
    """MuJoCo camera xyaxes for a camera at ``pos`` looking at ``target`` (cameras look along -z)."""
    fwd = np.asarray(target, float) - np.asarray(pos, float)
    fwd /= np.linalg.norm(fwd)
    right = np.cross(fwd, up_hint)
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    return _f(np.concatenate([right, up]))


def _box(hx: float, hy: float, hz: float, x: float, y: float, z: float, material: str, cls: str = "env") -> str:
    return (
        f'<geom type="box" size="{hx:.4g} {hy:.4g} {hz:.4g}" pos="{x:.4g} {y:.4g} {z:.4g}" '
        f'material="{material}" class="{cls}"/>'
    )


def park_position(index: int) -> np.ndarray:
    """Where workpiece ``index`` waits before its arrival: high above the cell, out of every view."""
    return np.array([-1.5 + 0.3 * index, 1.5, 4.0])


def workpiece_geom_xml(name: str, wp: WorkpieceType) -> str:
    common = (
        f'name="{name}" mass="{wp.mass:.6g}" rgba="{_f(wp.rgba)}" class="movable" '
        'friction="0.9 0.01 0.0002" condim="4"'
    )
    if wp.shape == "box":
        return f'<geom type="box" size="{_f(wp.half_extents)}" {common}/>'
    return f'<geom type="cylinder" size="{wp.size[0] / 2:.6g} {wp.size[2] / 2:.6g}" {common}/>'


def _arm_xml(tool_offset: np.ndarray) -> str:
    """Nested body chain of the arm; returns the opening tags + content, closed at the end."""
    parts: list[str] = []
    # Base / pedestal (static, world frame).
    parts.append(
        '<body name="base_link" pos="0 0 0">'
        '<geom name="pedestal" type="cylinder" size="0.16 0.004" pos="0 0 0.004" material="alu" class="visual"/>'
        '<geom name="base_shell" type="cylinder" size="0.075 0.05" pos="0 0 0.05" material="arm_white" class="visual"/>'
        '<geom name="base_ring" type="cylinder" size="0.077 0.006" pos="0 0 0.097" material="arm_grey" class="visual"/>'
    )
    n = len(JOINT_ORIGINS)
    for i, jo in enumerate(JOINT_ORIGINS):
        body = ARM_BODIES[i]
        nxt = np.array(JOINT_ORIGINS[i + 1].xyz) if i + 1 < n else np.zeros(3)
        com = nxt / 2.0
        m = _ARM_MASS[i]
        inertia = max(m * float(np.dot(nxt, nxt)) / 12.0, 0.002)
        r, hh = _ARM_LINK_RADIUS[i], _ARM_HOUSING_HALF[i]
        lo, hi = JOINT_LIMITS[i]
        parts.append(
            f'<body name="{body}" pos="{_f(jo.xyz)}" quat="{_quat(jo.rpy)}" gravcomp="1">'
            f'<inertial pos="{_f(com)}" mass="{m:.6g}" diaginertia="{inertia:.6g} {inertia:.6g} {inertia:.6g}"/>'
            f'<joint name="{jo.name}" type="hinge" axis="0 0 1" range="{lo:.9g} {hi:.9g}" '
            f'armature="{ARM_ARMATURE[i]:.6g}" damping="0.5"/>'
        )
        if i < n - 1:
            # Joint housing along the joint axis, end cap, link tube to the next joint.
            parts.append(
                f'<geom type="cylinder" size="{r:.4g} {hh:.4g}" material="arm_white" class="visual"/>'
                f'<geom type="cylinder" size="{r * 0.82:.4g} {hh + 0.004:.4g}" material="arm_grey" class="visual"/>'
            )
            if float(np.linalg.norm(nxt)) > 0.01:
                parts.append(
                    f'<geom type="capsule" fromto="0 0 0 {_f(nxt)}" size="{r * 0.72:.4g}" '
                    'material="arm_white" class="visual"/>'
                )
        else:
            # wrist3: housing behind the flange, flange disc at the origin.
            parts.append(
                f'<geom type="cylinder" size="{r:.4g} 0.025" pos="0 0 -0.028" material="arm_white" class="visual"/>'
                f'<geom type="cylinder" size="{r * 0.9:.4g} 0.004" pos="0 0 -0.004" material="arm_grey" '
                'class="visual"/>'
            )
    parts.append(_gripper_xml(tool_offset))
    parts.append("</body>" * (n + 1))
    return "".join(parts)


def _gripper_xml(tool_offset: np.ndarray) -> str:
    """CTAG2F90D-like gripper: body frame = flange frame, z = approach direction."""
    s = FINGER_STROKE
    tz = float(tool_offset[2])
    pad_half_z = 0.015
    finger_top = 0.108
    finger_bot = tz + pad_half_z
    fz = (finger_top + finger_bot) / 2
    fh = (finger_bot - finger_top) / 2
    cam_xy = _xyaxes(WRIST_CAMERA_POS, WRIST_CAMERA_TARGET, np.array([0.0, -1.0, 0.0]))

    def finger(side: str, sign: int) -> str:
        return (
            f'<body name="finger_{side}_link" gravcomp="1">'
            f'<inertial pos="{0.01 * sign:.4g} 0 {fz:.4g}" mass="0.05" diaginertia="2e-5 2e-5 5e-6"/>'
            f'<joint name="finger_{side}" type="slide" axis="{sign} 0 0" range="0 {s:.6g}" damping="60" '
            'armature="0.01"/>'
            f'<geom name="finger_{side}" type="box" size="0.006 0.012 {fh:.4g}" pos="{0.010 * sign:.4g} 0 {fz:.4g}" '
            'material="finger" class="movable"/>'
            f'<geom name="pad_{side}" type="box" size="0.002 0.011 {pad_half_z:.4g}" '
            f'pos="{0.002 * sign:.4g} 0 {tz:.4g}" material="pad" class="movable" friction="1.8 0.02 0.0005" '
            'condim="4" solref="0.005 1" solimp="0.95 0.99 0.001"/>'
            "</body>"
        )

    return (
        f'<body name="{GRIPPER_BODY}" gravcomp="1">'
        '<inertial pos="0 0 0.06" mass="0.9" diaginertia="0.002 0.002 0.001"/>'
        '<geom name="gripper_adapter" type="cylinder" size="0.034 0.008" pos="0 0 0.008" material="alu" '
        'class="visual"/>'
        '<geom name="gripper_housing" type="box" size="0.066 0.03 0.045" pos="0 0 0.061" '
        'material="gripper_dark" class="movable"/>'
        '<geom name="gripper_cover" type="box" size="0.0665 0.0305 0.008" pos="0 0 0.098" material="gripper_accent" '
        'class="visual"/>'
        # Wrist camera housing on the side of the gripper (a RealSense-like box).
        f'<geom name="wrist_cam_body" type="box" size="0.045 0.012 0.012" pos="0 {WRIST_CAMERA_POS[1] + 0.004:.4g} '
        f'{WRIST_CAMERA_POS[2] - 0.014:.4g}" material="gripper_dark" class="visual"/>'
        f'<camera name="wrist" pos="{_f(WRIST_CAMERA_POS)}" xyaxes="{cam_xy}" fovy="{WRIST_CAMERA_FOVY:.4g}"/>'
        f'<site name="{GRIP_SITE}" pos="{_f(tool_offset)}" size="0.006" rgba="1 0.2 0.2 1" group="4"/>'
        f"{finger('left', 1)}{finger('right', -1)}"
        "</body>"
    )


def _conveyor_xml() -> str:
    x0, x1 = layout.BELT_X_MIN, layout.BELT_X_MAX
    y, w, top = layout.BELT_Y, layout.BELT_WIDTH, layout.BELT_TOP_Z
    L = (x1 - x0) / 2
    xc = (x1 + x0) / 2
    th = 0.012  # belt thickness (half)
    roller_r = 0.016
    parts = [
        # Static, visible belt, frame rails, end rollers and feet.
        f'<geom name="belt_visual" type="box" size="{L:.4g} {w / 2:.4g} {th:.4g}" '
        f'pos="{xc:.4g} {y:.4g} {top - th:.4g}" material="belt" class="visual"/>',
    ]
    for side in (-1, 1):
        yr = y + side * (w / 2 + 0.012)
        parts.append(
            f'<geom type="box" size="{L + 0.03:.4g} 0.01 0.022" pos="{xc:.4g} {yr:.4g} 0.026" material="alu" '
            'class="visual"/>'
        )
        for xf in (x0 + 0.05, xc, x1 - 0.05):
            parts.append(
                f'<geom type="box" size="0.025 0.018 0.004" pos="{xf:.4g} {yr + side * 0.01:.4g} 0.004" '
                'material="arm_grey" class="visual"/>'
            )
    for xr in (x0, x1):
        parts.append(
            f'<geom type="cylinder" size="{roller_r:.4g} {w / 2:.4g}" pos="{xr:.4g} {y:.4g} {top - roller_r:.4g}" '
            'quat="0.7071068 0.7071068 0 0" material="belt" class="visual"/>'
        )
    # Drive box at the far end.
    parts.append(
        f'<geom type="box" size="0.05 0.045 0.035" pos="{x0 + 0.02:.4g} {y + w / 2 + 0.07:.4g} 0.035" '
        'material="drive" class="visual"/>'
    )
    # Catch bin past the end: workpieces that run off the belt drop in and are lost.
    bx0, bx1 = x1 + 0.03, x1 + 0.27
    bxc, bL = (bx0 + bx1) / 2, (bx1 - bx0) / 2
    bw = w / 2 + 0.06
    parts += [
        f'<geom name="catch_floor" type="box" size="{bL:.4g} {bw:.4g} 0.003" pos="{bxc:.4g} {y:.4g} 0.003" '
        'material="catch" class="env"/>',
        _box(bL, 0.005, 0.025, bxc, y - bw, 0.025, "catch"),
        _box(bL, 0.005, 0.025, bxc, y + bw, 0.025, "catch"),
        _box(0.005, bw, 0.025, bx1, y, 0.025, "catch"),
        _box(0.005, bw, 0.008, bx0, y, 0.008, "catch"),
    ]
    # The belt surface that carries workpieces: a heavy body on a slide joint whose
    # velocity the world sets every step (invisible; the static belt above is drawn).
    parts.append(
        f'<body name="{BELT_BODY}" pos="{xc:.4g} {y:.4g} {top - th:.4g}">'
        f'<joint name="{BELT_SLIDE}" type="slide" axis="1 0 0" damping="0"/>'
        '<inertial pos="0 0 0" mass="200" diaginertia="10 10 10"/>'
        f'<geom name="{BELT_GEOM}" type="box" size="{L:.4g} {w / 2:.4g} {th:.4g}" class="env" '
        f'group="{COLLISION_GROUP}" rgba="0.1 0.1 0.1 1" friction="1.0 0.01 0.0002"/>'
        "</body>"
    )
    return "".join(parts)


def _tray_xml() -> str:
    c = layout.TRAY_CENTER
    n = layout.NUM_SLOTS
    sx, sy = float(layout.SLOT_SIZE[0]), float(layout.SLOT_SIZE[1])
    pitch = layout.SLOT_PITCH
    h = layout.TRAY_WALL_HEIGHT
    fz = layout.TRAY_FLOOR_Z
    wall = 0.01
    divider = pitch - sx
    inner_x = n * sx + (n - 1) * divider
    half_x = inner_x / 2 + wall
    half_y = sy / 2 + wall
    parts = [
        f'<body name="tray" pos="{_f(c[:2])} 0">',
        f'<geom name="tray_floor" type="box" size="{half_x:.4g} {half_y:.4g} {fz / 2:.4g}" pos="0 0 {fz / 2:.4g}" '
        'material="tray_floor" class="env"/>',
        f'<geom name="tray_wall_front" type="box" size="{half_x:.4g} {wall / 2:.4g} {h / 2:.4g}" '
        f'pos="0 {-(half_y - wall / 2):.4g} {h / 2:.4g}" material="tray" class="env"/>',
        f'<geom name="tray_wall_back" type="box" size="{half_x:.4g} {wall / 2:.4g} {h / 2:.4g}" '
        f'pos="0 {half_y - wall / 2:.4g} {h / 2:.4g}" material="tray" class="env"/>',
        f'<geom name="tray_wall_left" type="box" size="{wall / 2:.4g} {half_y:.4g} {h / 2:.4g}" '
        f'pos="{-(half_x - wall / 2):.4g} 0 {h / 2:.4g}" material="tray" class="env"/>',
        f'<geom name="tray_wall_right" type="box" size="{wall / 2:.4g} {half_y:.4g} {h / 2:.4g}" '
        f'pos="{half_x - wall / 2:.4g} 0 {h / 2:.4g}" material="tray" class="env"/>',
    ]
    centers = layout.slot_centers()
    for k in range(n - 1):
        xd = (centers[k, 0] + centers[k + 1, 0]) / 2 - c[0]
        parts.append(
            f'<geom name="tray_divider_{k}" type="box" size="{divider / 2:.4g} {half_y - wall:.4g} {h / 2:.4g}" '
            f'pos="{xd:.4g} 0 {h / 2:.4g}" material="tray" class="env"/>'
        )
    parts.append("</body>")
    for k in range(n):
        parts.append(
            f'<site name="slot_{k}" pos="{_f(centers[k])}" type="box" size="{sx / 2:.4g} {sy / 2:.4g} 0.001" '
            'rgba="0.2 0.9 0.2 0.4" group="4"/>'
        )
        # Slot number marks on the tray floor (visual aid for the camera).
        parts.append(
            f'<geom type="box" size="{0.004 + 0.004 * k:.4g} 0.003 0.0005" pos="{centers[k, 0]:.4g} '
            f'{centers[k, 1] - sy / 2 + 0.012:.4g} {fz + 0.0005:.4g}" rgba="0.9 0.9 0.9 1" class="visual"/>'
        )
    return "".join(parts)


def _workpieces_xml(workpieces: Sequence[tuple[str, WorkpieceType]]) -> str:
    parts = []
    for i, (name, wp) in enumerate(workpieces):
        p = park_position(i)
        # gravcomp in the MJCF: MuJoCo only compensates gravity at run time for models compiled with some
        # compensated body (the world switches it per workpiece: parked floating, on the belt falling).
        parts.append(
            f'<body name="{name}" pos="{_f(p)}" gravcomp="1"><freejoint name="{name}"/>'
            f"{workpiece_geom_xml(name, wp)}</body>"
        )
    return "".join(parts)


def build_mjcf(
    workpieces: Sequence[tuple[str, WorkpieceType]] = (),
    *,
    tool_offset: Sequence[float] | np.ndarray = TOOL_OFFSET,
    image_size: int = IMAGE_SIZE,
    with_aubo: bool = True,
) -> str:
    """The whole workcell scene as an MJCF string.

    ``workpieces`` is a sequence of (body name, type); each becomes a free
    body parked at :func:`park_position` (the world moves it onto the belt at
    its arrival time). ``tool_offset`` is the flange -> grip_site offset.
    ``with_aubo=False`` leaves the arm, its gripper and their actuators out:
    the same cell for another arm (the Panda source attaches its own).
    """
    tool_offset = np.asarray(tool_offset, float)
    ext_xy = _xyaxes(EXTERNAL_CAMERA_POS, EXTERNAL_CAMERA_TARGET, np.array([0.0, 0.0, 1.0]))
    acts = []
    for i, name in enumerate(ARM_JOINT_NAMES if with_aubo else ()):
        lo, hi = JOINT_LIMITS[i]
        acts.append(
            f'<position name="{name}" joint="{name}" kp="{ARM_KP[i]:.6g}" ctrlrange="{lo:.9g} {hi:.9g}" '
            f'forcerange="{-ARM_FORCE[i]:.6g} {ARM_FORCE[i]:.6g}"/>'
        )
    for i, name in enumerate(ARM_JOINT_NAMES if with_aubo else ()):
        acts.append(
            f'<velocity name="{ARM_VEL_ACTUATORS[i]}" joint="{name}" kv="{ARM_KV[i]:.6g}" ctrlrange="-5 5" '
            f'forcerange="{-ARM_FORCE[i]:.6g} {ARM_FORCE[i]:.6g}"/>'
        )
    for j, a in zip(FINGER_JOINTS if with_aubo else (), FINGER_ACTUATORS, strict=False):
        acts.append(
            f'<position name="{a}" joint="{j}" kp="1500" ctrlrange="0 {FINGER_STROKE:.6g}" '
            f'forcerange="{-FINGER_FORCE:.6g} {FINGER_FORCE:.6g}"/>'
        )
    return f"""<mujoco model="libero_industry_workcell">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP}" integrator="implicitfast" cone="elliptic" impratio="10"/>
  <visual>
    <global offwidth="{max(image_size, 640)}" offheight="{max(image_size, 480)}"/>
    <quality shadowsize="0" offsamples="0" numslices="16" numstacks="8"/>
    <headlight ambient="0.32 0.32 0.32" diffuse="0.35 0.35 0.35" specular="0.05 0.05 0.05"/>
    <map znear="0.01" zfar="20"/>
  </visual>
  <asset>
    <texture name="floor_tex" type="2d" builtin="checker" rgb1="0.36 0.38 0.40" rgb2="0.50 0.52 0.54"
             width="256" height="256" mark="edge" markrgb="0.25 0.25 0.27"/>
    <material name="floor" texture="floor_tex" texrepeat="16 16" reflectance="0"/>
    <material name="arm_white" rgba="0.90 0.91 0.92 1" specular="0.3" shininess="0.3"/>
    <material name="arm_grey" rgba="0.42 0.45 0.50 1" specular="0.2"/>
    <material name="alu" rgba="0.70 0.72 0.75 1" specular="0.4"/>
    <material name="gripper_dark" rgba="0.16 0.17 0.19 1" specular="0.2"/>
    <material name="gripper_accent" rgba="0.85 0.30 0.10 1"/>
    <material name="finger" rgba="0.78 0.80 0.83 1" specular="0.4"/>
    <material name="pad" rgba="0.30 0.32 0.36 1"/>
    <material name="belt" rgba="0.10 0.11 0.12 1" specular="0.05"/>
    <material name="drive" rgba="0.20 0.35 0.60 1"/>
    <material name="tray" rgba="0.15 0.45 0.75 1" specular="0.1"/>
    <material name="tray_floor" rgba="0.10 0.30 0.55 1"/>
    <material name="catch" rgba="0.30 0.30 0.32 1"/>
  </asset>
  <default>
    <default class="visual">
      <geom contype="0" conaffinity="0" group="1" density="0"/>
    </default>
    <default class="env">
      <geom contype="2" conaffinity="1" group="0" friction="0.8 0.01 0.0002"/>
    </default>
    <default class="movable">
      <geom contype="1" conaffinity="3" group="0"/>
    </default>
  </default>
  <worldbody>
    <light name="key" directional="true" pos="0.4 -1.0 2.5" dir="-0.15 0.35 -1" castshadow="false"
           diffuse="0.65 0.65 0.62" specular="0.15 0.15 0.15"/>
    <geom name="floor" type="plane" size="4 4 0.5" material="floor" class="env"/>
    <camera name="external" pos="{_f(EXTERNAL_CAMERA_POS)}" xyaxes="{ext_xy}" fovy="{EXTERNAL_CAMERA_FOVY:.4g}"/>
    {_arm_xml(tool_offset) if with_aubo else ""}
    {_conveyor_xml()}
    {_tray_xml()}
    {_workpieces_xml(workpieces)}
  </worldbody>
  {'<contact><exclude body1="finger_left_link" body2="finger_right_link"/></contact>' if with_aubo else ""}
  <actuator>
    {"".join(acts)}
  </actuator>
</mujoco>
"""
