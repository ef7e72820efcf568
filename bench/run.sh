#!/usr/bin/env bash
# Benchmarks of the simulated workcell: bootstrap the venv, then run bench/run.py (args pass through, e.g. --quick).
set -euo pipefail; cd "$(dirname "$0")/.."; scripts/bootstrap.sh --dev; exec .venv/bin/python -m bench.run "$@"
