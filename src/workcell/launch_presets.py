"""The argument defaults each launch file puts over the graph's (config/workcell.yaml): one home, so the
launch files, ``workcell bringup --job NAME`` and the tests compute the same graph (each job is its launch
file's name: ``ros2 launch libero_workcell NAME.launch.py`` and ``workcell bringup --job NAME`` are one graph)."""

from __future__ import annotations

from typing import Any, Final

SIM_REPLAY: Final[dict[str, Any]] = {"replay": True}
REAL_WORKCELL: Final[dict[str, Any]] = {"use_sim": False}
# The shipped scripted session (config/teleop/d2s_scripted_session.json) was made for 18 s between arrivals.
TELEOP_COLLECT_SIM: Final[dict[str, Any]] = {"teleop": True, "teleop_source": "scripted", "arrival_interval": 18.0}
TELEOP_COLLECT_REAL: Final[dict[str, Any]] = {"use_sim": False, "teleop": True, "teleop_source": "headset"}
# Deploying a checkpoint: on the physical workcell against a policy server (policy_url), and on the simulated
# one against the local server (the scripted expert's chunks over openpi's protocol, no GPU).
# on hardware the policy drives only after /policy/start (policy_node enforces it too)
DEPLOY_REAL: Final[dict[str, Any]] = {"use_sim": False, "policy": True, "policy_autostart": False}
DEPLOY_SIM: Final[dict[str, Any]] = {"policy": True, "policy_local_server": True}

# The jobs, by their launch file's name (launch/<name>.launch.py)
JOBS: Final[dict[str, dict[str, Any]]] = {
    "sim_workcell": {},
    "real_workcell": REAL_WORKCELL,
    "teleop_collect_sim": TELEOP_COLLECT_SIM,
    "teleop_collect": TELEOP_COLLECT_REAL,
    "deploy_sim": DEPLOY_SIM,
    "deploy_real": DEPLOY_REAL,
    "sim_replay": SIM_REPLAY,
}
