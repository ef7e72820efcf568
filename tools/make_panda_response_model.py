"""Write the Panda's rigid-body model the action response runs (``libero_workcell/resources/panda_inertia.xml``).

``python -m tools.make_panda_response_model`` (in the project's .venv; needs robosuite's Panda model files,
``sim_bridge.panda.assets``). The response (:class:`libero_workcell.action_response.PandaResponse`) runs
robosuite's OSC law on the Panda's dynamics, because the response's shape (the creep after a rotation, the
coupling of combined actions) comes from that law acting through the Panda's pose-dependent inertia. It needs
only what the arm's dynamics are made of: the kinematic tree to the grip site, each link's inertia as
robosuite's assembly compiles it, joint damping, armature and friction loss, the arm's torque limits and
robosuite's options. Geometry, meshes, gravity (the law compensates the bias forces), joint limits and the
finger joints (fixed where they start) are left out, so the file is small and ships with the contract: the
robot PC needs no robosuite. A test regenerates it and compares byte for byte.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import mujoco
import numpy as np

from sim_bridge.panda.model import ARM_ACTUATORS, GRIP_SITE, GRIPPER_JOINTS, attach_panda, robosuite_options

OUT = Path(__file__).resolve().parents[1] / "src" / "libero_workcell" / "resources" / "panda_inertia.xml"


def replica_spec() -> mujoco.MjSpec:
    """robosuite's Panda at the world origin, as the replica (sim_bridge.panda) assembles it."""
    spec = mujoco.MjSpec()
    robosuite_options(spec)
    attach_panda(spec, np.zeros(3))
    return spec


def response_model_xml() -> str:
    spec = replica_spec()
    compiled = spec.compile()
    spec.modelname = "panda_inertia"
    spec.compiler.inertiafromgeom = mujoco.mjtInertiaFromGeom.mjINERTIAFROMGEOM_FALSE
    spec.option.gravity = np.zeros(3)
    for body in spec.bodies:
        if body.name == "world":
            continue
        b = compiled.body(body.name)
        body.explicitinertial = True
        body.mass = float(b.mass[0])
        body.ipos = np.array(b.ipos, float)
        body.iquat = np.array(b.iquat, float)
        body.inertia = np.array(b.inertia, float)
    for collection in (spec.geoms, spec.meshes, spec.materials, spec.textures, spec.sensors, spec.cameras):
        for element in list(collection):
            spec.delete(element)
    for site in list(spec.sites):
        if site.name != GRIP_SITE:
            spec.delete(site)
    for actuator in list(spec.actuators):
        if actuator.name not in ARM_ACTUATORS:
            spec.delete(actuator)
    for joint in list(spec.joints):
        if joint.name in GRIPPER_JOINTS:
            spec.delete(joint)
        else:
            joint.limited = mujoco.mjtLimited.mjLIMITED_FALSE
    spec.compile()  # it must compile before it is written
    return spec.to_xml()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    args.out.write_text(response_model_xml())
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
