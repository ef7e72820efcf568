#!/usr/bin/env bash
# The test suite: lint + pytest (unit, integration on real rclpy, colcon build). Sets itself up.
#   ./test.sh                everything
#   ./test.sh -m "not slow"  quick subset; other arguments go to pytest
set -euo pipefail
cd "$(dirname "$0")"
scripts/bootstrap.sh --dev
.venv/bin/ruff check .
exec .venv/bin/python -m pytest "$@"
