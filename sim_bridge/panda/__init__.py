"""The Panda source: robosuite's Panda in the workcell's MuJoCo world, driven by this project's OSC.

LIBERO's data comes from a Panda under robosuite's ``OSC_POSE``; it cannot be downloaded here, so
the workcell makes its own: the same arm model (robosuite 1.4.0's, from its PyPI wheel), the same
controller law, the same 7-D action, in the same task world as the AUBO.
"""
