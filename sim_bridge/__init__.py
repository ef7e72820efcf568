"""The simulated workcell (MuJoCo) and the Panda-to-AUBO bridge.

MuJoCo reads MUJOCO_GL when it is imported: default to headless EGL
rendering (works with Mesa's software rasteriser, no display needed) unless
the user chose a backend.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
