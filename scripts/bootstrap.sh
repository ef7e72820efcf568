#!/usr/bin/env bash
# Make a fresh machine ready: system libraries (apt-get, only if missing), a
# virtual environment in .venv, the pinned pip packages and this package in
# editable mode. Idempotent and quick when nothing changed.
#   scripts/bootstrap.sh            runtime packages
#   scripts/bootstrap.sh --dev      runtime + test/lint/colcon packages
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
req=requirements.txt
[ "${1:-}" = "--dev" ] && req=requirements-dev.txt

# System libraries: EGL + Mesa for MuJoCo's offscreen rendering, libusb for
# pyrealsense2, socat for the serial-bus emulators' pty pairs.
need_apt=()
ldconfig -p 2>/dev/null | grep -q 'libEGL.so.1' || need_apt+=(libegl1)
ldconfig -p 2>/dev/null | grep -q 'libGL.so.1' || need_apt+=(libgl1)
ls /usr/lib/*/dri/swrast_dri.so /usr/lib/*/dri/*swrast* >/dev/null 2>&1 || need_apt+=(libgl1-mesa-dri)
ldconfig -p 2>/dev/null | grep -q 'libglib-2.0.so.0' || need_apt+=(libglib2.0-0)
ldconfig -p 2>/dev/null | grep -q 'libusb-1.0.so.0' || need_apt+=(libusb-1.0-0)   # pyrealsense2
command -v socat >/dev/null || need_apt+=(socat)   # pty pairs for the Modbus emulators
if [ "$req" = requirements-dev.txt ]; then
  command -v chromium >/dev/null || need_apt+=(chromium)   # headless browser: the preference report's test and the console's (tests/console)
  command -v ss >/dev/null || need_apt+=(iproute2)   # ss: the tests check which addresses Ray and DDS listen on
fi
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: apt-get install ${need_apt[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else
    echo "bootstrap: please install: ${need_apt[*]}" >&2
  fi
fi

py="${PYTHON:-}"
if [ -z "$py" ]; then
  for cand in python3.11 python3; do
    if command -v "$cand" >/dev/null && "$cand" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
      py="$cand"; break
    fi
  done
fi
[ -n "$py" ] || { echo "bootstrap: Python 3.11 is required (the ros-kilted wheels are cp311)" >&2; exit 1; }

# The servo path's kernels (libero_workcell.kernels) compiled into numba's cache beside their modules, where a change
# or a fresh clone left them out: seconds once here, not in the first process of every kind that needs them.
compile_kernels() {
  .venv/bin/python -c "import aubo_bridge.model.kinematics, libero_workcell.osc_law, libero_workcell.kernels as k; k.compile_kernels()"
}

[ -x .venv/bin/python ] || "$py" -m venv .venv
extras=()
[ "$req" = requirements-dev.txt ] && extras=(requirements-export.txt)   # the LeRobot export and its test
stamp=.venv/.bootstrap-$(cat "$req" requirements.txt requirements-openpi.txt setup.py "${extras[@]}" | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "bootstrap: installing $req into .venv (first run takes a few minutes)"
  # Not compiled by pip, which compiles each package's files one at a time as it installs them (half of its time):
  # see below.
  pipi=(.venv/bin/python -m pip install -q --disable-pip-version-check --no-compile)
  "${pipi[@]}" --upgrade pip
  "${pipi[@]}" -r "$req"
  "${pipi[@]}" --no-deps -r requirements-openpi.txt   # it says why
  "${pipi[@]}" --no-deps --no-build-isolation -e .
  compile_kernels & kernels=$!   # (below) on the other core, while pip unpacks torch
  for extra in "${extras[@]}"; do
    "${pipi[@]}" -r "$extra"
    "${pipi[@]}" --no-deps lerobot==0.3.3   # requirements-export.txt says why
  done
  wait "$kernels"
  rm -f .venv/.bootstrap-* .venv/.compiled
  touch "$stamp"
fi
# Bytecode: where PYTHONDONTWRITEBYTECODE is set (as on CI's machines) a module is otherwise compiled again by every
# process that imports it, and the suite ran twice as long: then every installed package is compiled once here, on
# every core. test.sh clears the variable instead: its processes write the bytecode of what they import, once, and
# the two thirds of site-packages nothing imports are never compiled.
# (a few files in site-packages are another Python's syntax, e.g. torch's py312 test helpers: pip's own compile
# skips them too, and compileall's status counts them, so it is not checked)
if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] && [ ! -f .venv/.compiled ]; then
  .venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  touch .venv/.compiled
fi
[ -n "${kernels:-}" ] || compile_kernels   # (a fresh install compiled them above)

# The Panda source (sim_bridge/panda) uses robosuite 1.4.0's Panda model, taken once from its PyPI wheel
# into ~/.cache/libero_workcell (only the model files: robosuite's code is never installed or imported).
.venv/bin/python -m sim_bridge.panda.assets >/dev/null || echo "bootstrap: the Panda model is not available (see above); the Panda source and its tests need it" >&2
