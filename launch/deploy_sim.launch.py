"""Deploy on the simulated workcell: ``ros2 launch libero_workcell deploy_sim.launch.py [ARG:=VALUE ...]``.

The simulated workcell graph (``config/workcell.yaml``) with ``policy:=true`` and the local policy server
(``policy_local_server:=true``: openpi-server serving the scripted expert's chunks on 127.0.0.1:``policy_port``):
the whole deploy loop, openpi's protocol included, with no GPU. ``policy_local_server:=false
policy_url:=ws://GPU-HOST:8000`` runs a real checkpoint against the simulated workcell instead.
Arguments: docs/policy.md. Without ROS 2's launch: ``workcell bringup --job deploy_sim``.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.DEPLOY_SIM,
                                       job="deploy_sim")
