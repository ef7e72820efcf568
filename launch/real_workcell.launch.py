"""The physical workcell: ``ros2 launch libero_workcell real_workcell.launch.py [ARG:=VALUE ...]``.

The same graph as the simulated workcell (``config/workcell.yaml``) with
``use_sim:=false``: no sim world, the AUBO ARCS, CTAG2F90D Modbus, conveyor
and camera backends with the device settings in the graph's ``not use_sim``
blocks. Bring-up step by step: ``docs/bringup.md``.
"""

from pathlib import Path

from workcell import launch_presets
from workcell.workcell_launch import workcell_launch_description


def generate_launch_description():
    return workcell_launch_description(Path(__file__).resolve().parent, defaults=launch_presets.REAL_WORKCELL,
                                       job="real_workcell")
