#!/usr/bin/env bash
# The test suite: lint + pytest (unit, integration on real rclpy, colcon build). Sets itself up.
#   ./test.sh                everything, in two phases (below)
#   ./test.sh -m "not slow"  quick subset; with arguments, one plain pytest run with them
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh --dev
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache  # the layers (pyproject.toml, docs/architecture.md): no import points up
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# Phase 1: the modules that run in one process on sim time (tests/conftest.py PARALLEL_MODULES), two at a
# time. Phase 2: everything else, one at a time, on one xdist worker: a vendor SDK that crashes its process
# (pyaubo_sdk's RTDE close, librealsense's playback stop: tests marked flaky) fails that attempt, not the run.
# Both always run.
status=0
.venv/bin/python -m pytest -m parallel -n 2 --dist loadfile || status=$?
.venv/bin/python -m pytest -m "not parallel" -n 1 || status=$?
exit $status
