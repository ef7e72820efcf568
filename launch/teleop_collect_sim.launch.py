"""Teleop collection on the simulated workcell: ``ros2 launch libero_workcell teleop_collect_sim.launch.py``.

The simulated workcell graph (``config/workcell.yaml``) with ``teleop:=true`` and the scripted source:
``teleop_pico`` plays ``teleop_session`` (default: the shipped three-workpiece D2S session)
``teleop_repeats`` times, resetting the world before each, and the ``recorder`` writes each run to
``record_path``; the world's ``arrival_interval`` is the session's 18 s. ``teleop_source:=headset`` drives
the simulated arm from a real PICO headset instead.
Arguments: docs/teleop.md. Without ROS 2's launch: ``workcell bringup --job teleop_collect_sim``.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.TELEOP_COLLECT_SIM,
                                       job="teleop_collect_sim")
