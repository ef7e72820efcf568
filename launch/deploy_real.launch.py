"""Deploy a checkpoint on the physical workcell: ``ros2 launch libero_workcell deploy_real.launch.py
policy_url:=ws://GPU-HOST:8000 task:="pick up ..." [preference:=...] [ARG:=VALUE ...]``.

The physical workcell graph (``config/workcell.yaml``, ``use_sim:=false``) with ``policy:=true``:
``policy_node`` queries openpi's policy server at ``policy_url`` at 20 Hz and drives as source ``policy``
(the bridge's active source). The arm still waits for ``/aubo/enable`` and the policy for ``/policy/start``
(``workcell call enable``, ``workcell call policy start``: it never drives by itself here). Arguments: docs/policy.md,
docs/interfaces.md. Without ROS 2's launch: ``workcell bringup --job deploy_real policy_url:=...``.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.DEPLOY_REAL,
                                       job="deploy_real")
