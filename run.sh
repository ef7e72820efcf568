#!/usr/bin/env bash
# The main job: the full stack on the simulated workcell. Sets itself up.
#   ./run.sh                 scripted expert, one episode at each belt speed, metrics printed
#   ./run.sh --source policy the deploy loop: policy_node against the local openpi server (no GPU)
#   ./run.sh --help          other modes (bringup only, speeds, seeds)
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh
exec .venv/bin/workcell demo "$@"
