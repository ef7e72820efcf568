"""Servo streaming to the loopback ARCS emulator through the real SDK (no robot needed).

The production path: :class:`~aubo_bridge.process.arcs_hosted.HostedArcsArm` (the SDK in its own
process) driven from ``run_loop`` at the control thread's real-time priority, as the
aubo_bridge node runs it. Two clocks, both CLOCK_MONOTONIC:

* ``sent``: when each tick issued its servoJoint (the node's side);
* ``arrived``: when each request reached the emulator (the controller's side; the emulator
  runs with SCHED_FIFO like a controller's real-time kernel).

``slow_getter`` makes the controller answer one state getter (``getTcpPose``) late by a
random 0..``slow_getter`` seconds, as a busy controller might, well inside the request timeout.
:func:`servo_comparison` runs the SDK in the node's process (``ArcsArmBackend``: one session,
its poller holding the GIL through each late reply) and hosted (servo and state on their own
sessions and processes) against that same controller, in one run.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from libero_workcell.rate import CONTROL_PRIORITY

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import percentiles, period_errors_ms

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
EMULATOR_PRIORITY = 30  # above the node's control thread: the controller is not what is measured


def servo_stream(
    seconds: float = 5.0,
    servo_hz: float = 100.0,
    state_hz: float = 100.0,
    hosted: bool = True,
    slow_getter: float = 0.0,
    priority: int = CONTROL_PRIORITY,
) -> dict[str, Any]:
    """Stream a slow joint sine at ``servo_hz`` for ``seconds``; rates and period errors on both sides."""
    if _TESTS not in sys.path:
        sys.path.insert(0, _TESTS)
    from emulators.arcs_emulator import ArcsEmulator

    from aubo_bridge.backends.arcs import ArcsArmBackend
    from aubo_bridge.backends.arcs_config import ArcsConfig
    from aubo_bridge.model.kinematics import HOME_Q
    from aubo_bridge.process.arcs_hosted import HostedArcsArm
    from libero_workcell.rate import run_loop

    with ArcsEmulator(boot_delay=0.05, realtime=EMULATOR_PRIORITY) as emu:
        config = ArcsConfig(ip=emu.host, rpc_port=emu.port, servo_hz=servo_hz, state_hz=state_hz)
        backend: Any = HostedArcsArm(config, priority=priority) if hosted else ArcsArmBackend(config)
        backend.connect()
        try:
            period = 1.0 / servo_hz
            sent: list[float] = []
            call_ms: list[float] = []
            if slow_getter:
                emu.slow_replies(slow_getter, "getTcpPose")
            emu.servo_arrivals()  # forget start-up
            polls0, t0 = backend.polls, time.monotonic()

            def tick() -> None:
                now = time.monotonic()
                q = HOME_Q + 0.05 * np.sin(2 * np.pi * 0.5 * (now - t0))
                sent.append(now)
                backend.servo(q)
                call_ms.append((time.monotonic() - now) * 1e3)

            stop = threading.Event()
            thread, loop = run_loop(servo_hz, tick, stop, "bench-servo", priority=priority)
            time.sleep(seconds)
            stop.set()
            thread.join(timeout=2.0)
            elapsed = time.monotonic() - t0
            polls = backend.polls - polls0
            arrived = emu.servo_arrivals()
            emu.slow_replies(0.0, "getTcpPose")
            time.sleep(0.1)
            tracking = float(np.max(np.abs(emu.q() - backend.read().q)))
            rtt_ms = [backend.ping() * 1e3 for _ in range(300)]
        finally:
            backend.close()
    return {
        "hosted": hosted,
        "slow_getter_s": slow_getter,
        "servo_hz_target": servo_hz,
        "servo_hz_achieved": (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) > 1 else 0.0,
        "period_error_ms": percentiles(period_errors_ms(sent, period)),
        "arrival_hz": (len(arrived) - 1) / (arrived[-1] - arrived[0]) if len(arrived) > 1 else 0.0,
        "arrival_period_error_ms": percentiles(period_errors_ms(arrived, period)),
        "servo_call_ms": percentiles(call_ms),
        "state_hz_target": state_hz,
        "state_hz_achieved": polls / elapsed,
        "rpc_rtt_ms": percentiles(rtt_ms, (50, 90, 99)),
        "state_vs_emulator_max_rad": tracking,
        "servo_calls": len(sent),
        "realtime_priority": loop.priority_note or "SCHED_FIFO",
    }


def servo_comparison(seconds: float = 5.0, slow_getter: float = 0.005) -> dict[str, Any]:
    """The production stream, then the SDK in-process vs hosted with one state getter answering late."""
    return {
        "hosted": servo_stream(seconds),
        "inprocess_slow_getter": servo_stream(seconds, hosted=False, slow_getter=slow_getter),
        "hosted_slow_getter": servo_stream(seconds, hosted=True, slow_getter=slow_getter),
    }


if __name__ == "__main__":
    import json

    print(json.dumps(servo_comparison(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0), indent=2))
