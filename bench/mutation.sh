#!/usr/bin/env bash
# Mutation testing of the safety code (mutmut, in a temporary copy of the tree): bench/mutation.sh [driver] [arcs] [conveyor] [chunks]
set -euo pipefail; cd "$(dirname "$0")/.."; scripts/bootstrap.sh --dev; exec .venv/bin/python -m bench.mutation "$@"
