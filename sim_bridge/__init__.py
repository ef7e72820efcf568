"""The Panda-to-AUBO bridge and the data made on the simulated cell: retargeting and conversion of Panda demos
(one, a batch, on a Ray cluster), expert and preference demos, scripted teleop sessions, the response reference.

It builds on the simulated workcell (:mod:`sim_cell`), never the other way round; importing it first sets MuJoCo's
headless default there.
"""

import sim_cell  # noqa: F401 (MuJoCo's rendering backend is chosen before any MuJoCo import)
