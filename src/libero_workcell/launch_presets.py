"""The argument defaults each launch file puts over the graph's (config/workcell.yaml): one home, so the
launch files, ``workcell`` commands and the tests compute the same graph."""

from __future__ import annotations

from typing import Any, Final

SIM_REPLAY: Final[dict[str, Any]] = {"replay": True}
REAL_WORKCELL: Final[dict[str, Any]] = {"use_sim": False}
# The shipped scripted session (config/teleop/d2s_scripted_session.json) was made for 18 s between arrivals.
TELEOP_COLLECT_SIM: Final[dict[str, Any]] = {"teleop": True, "teleop_source": "scripted", "arrival_interval": 18.0}
TELEOP_COLLECT_REAL: Final[dict[str, Any]] = {"use_sim": False, "teleop": True, "teleop_source": "headset"}
# Deploying a checkpoint: on the physical workcell against a policy server (policy_url), and on the simulated
# one against the local server (the scripted expert's chunks over openpi's protocol, no GPU).
DEPLOY_REAL: Final[dict[str, Any]] = {"use_sim": False, "policy": True}
DEPLOY_SIM: Final[dict[str, Any]] = {"policy": True, "policy_local_server": True}
