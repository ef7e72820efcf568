#!/usr/bin/env bash
# The test suite: lint + pytest (unit, integration on real rclpy, colcon build). Sets itself up.
#   ./test.sh                everything, in two phases (below)
#   ./test.sh -m "not slow"  quick subset; with arguments, one plain pytest run with them
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=  # each module's bytecode written once, by the first process that imports it
scripts/bootstrap.sh --dev
.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache  # the layers (pyproject.toml, docs/architecture.md): no import points up
if [ $# -gt 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi
# The suite, in one pytest session on two xdist workers, a module at a time on each, the longest modules first
# (tests/conftest.py orders them: FIRST_MODULES, then the others with slow tests; --no-loadscope-reorder keeps it):
# graph tests run two at a time, each worker on a ROS domain it claimed. Then the modules that mostly wait on the
# wall clock (tests/realtime_modules.py: the `realtime` ones, sub-second deadlines of a device or a protocol, and
# the `waiting` ones, timeouts and planned delays), four tests at a time among themselves (docs/testing.md says
# why four), spread a test at a time (--dist load): a vendor SDK that crashes its process (pyaubo_sdk's RTDE
# close, librealsense's playback stop: tests marked flaky) costs that attempt and the test runs again on a new
# worker (pytest-rerunfailures reruns a crashed test only under --dist load: under loadfile it failed the run).
# Both always run.
status=0
.venv/bin/python -m pytest -m "not realtime and not waiting" -n 2 --dist loadfile --no-loadscope-reorder || status=$?
mapfile -t second < <(.venv/bin/python tests/realtime_modules.py)  # (collecting only them: tests/realtime_modules.py)
.venv/bin/python -m pytest -m "realtime or waiting" -n 4 --dist load "${second[@]}" || status=$?
exit $status
