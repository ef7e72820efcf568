"""Sim-in-the-loop replay: ``ros2 launch libero_workcell sim_replay.launch.py demo_path:=DEMO.hdf5 [ARG:=VALUE ...]``.

The simulated workcell graph (``config/workcell.yaml``) with ``replay:=true``: the sim world starts in
the demo's task with the arm on its first pose, and the ``demo_replay`` node replays it as source
``policy`` (``replay_mode:=open_loop`` the recorded actions, ``closed_loop`` the recorded TCP path), writes
``replay_report.json`` and ``replay_strip.png`` to ``replay_out`` and exits, which ends the launch.
``demo:=demo_3`` picks a demo of the file. Without ROS 2's launch: ``workcell replay DEMO.hdf5``.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.SIM_REPLAY,
                                       job="sim_replay")
