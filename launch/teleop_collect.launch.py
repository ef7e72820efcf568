"""Teleop collection on the physical workcell: ``ros2 launch libero_workcell teleop_collect.launch.py``.

The physical workcell graph (``use_sim:=false``, docs/bringup.md) with ``teleop:=true``: ``teleop_pico``
reads the PICO headset (the XRoboToolkit PC service must run with the headset connected) and drives the
AUBO as source ``teleop``; the ``recorder`` writes the demos to ``record_path``. With
``recorder.plan_per_config:=N`` each demo records the collection plan's next configuration (its instruction
and ``task_spec``); ``workcell plan next --session RECORD_PATH`` says what to set up (and prints the JSON
``recorder.task:='{...}'`` takes, for a single configuration). Arguments and the operator's procedure:
docs/teleop.md.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.TELEOP_COLLECT_REAL,
                                       job="teleop_collect")
