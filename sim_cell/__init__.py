"""The simulated workcell (MuJoCo) as the graph runs it: the world and its scene, its clock and renderer, the
world node, and the nodes that drive it in sim (the scripted expert, demo replay, the local policy server).

MuJoCo reads MUJOCO_GL when it is imported: default to headless EGL rendering (works with Mesa's software
rasteriser, no display needed) unless the user chose a backend.
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
