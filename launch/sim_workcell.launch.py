"""The simulated workcell: ``ros2 launch libero_workcell sim_workcell.launch.py [ARG:=VALUE ...]``.

The graph of ``config/workcell.yaml`` with its own defaults (``use_sim:=true``):
sim world, sim backends, loopback DDS. See :mod:`workcell.workcell_launch`.
"""

from pathlib import Path

from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, job="sim_workcell")
