"""Servo streaming through ArcsArmBackend against the loopback ARCS emulator (no robot needed).

Measures what the real backend costs in this process: the achieved servoJoint rate and
its period error, the state poll rate the background thread keeps while streaming, and
the round trip of one RPC. The SDK keeps the GIL while it waits for a reply, so these
figures include the poller and the streamer contending for it.
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


def servo_stream(
    seconds: float = 5.0, servo_hz: float = 100.0, state_hz: float = 100.0, priority: int = CONTROL_PRIORITY
) -> dict[str, Any]:
    """Stream a slow joint sine at ``servo_hz`` for ``seconds``; return rates, period error, RPC latency."""
    if _TESTS not in sys.path:
        sys.path.insert(0, _TESTS)
    from emulators.arcs_emulator import ArcsEmulator

    from aubo_bridge.arcs_backend import ArcsArmBackend
    from aubo_bridge.arcs_config import ArcsConfig
    from aubo_bridge.kinematics import HOME_Q
    from libero_workcell.rate import run_loop

    with ArcsEmulator(boot_delay=0.05) as emu:
        backend = ArcsArmBackend(ArcsConfig(ip=emu.host, rpc_port=emu.port, servo_hz=servo_hz, state_hz=state_hz))
        backend.connect()
        try:
            # The production path: the servo stream on run_loop with the control thread's
            # real-time priority, exactly as the aubo_bridge node runs it.
            period = 1.0 / servo_hz
            times: list[float] = []
            call_ms: list[float] = []
            polls0, t0 = backend.polls, time.monotonic()

            def tick() -> None:
                now = time.monotonic()
                q = HOME_Q + 0.05 * np.sin(2 * np.pi * 0.5 * (now - t0))
                times.append(now)
                backend.servo(q)
                call_ms.append((time.monotonic() - now) * 1e3)

            stop = threading.Event()
            thread, loop = run_loop(servo_hz, tick, stop, "bench-servo", priority=priority)
            time.sleep(seconds)
            stop.set()
            thread.join(timeout=2.0)
            elapsed = time.monotonic() - t0
            polls = backend.polls - polls0
            tracking = float(np.max(np.abs(emu.q() - backend.read().q)))
            rtt_ms = [backend.ping() * 1e3 for _ in range(500)]
        finally:
            backend.close()
    errs = period_errors_ms(times, period)
    return {
        "servo_hz_target": servo_hz,
        "servo_hz_achieved": (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 else 0.0,
        "period_error_ms": percentiles(errs),
        "servo_call_ms": percentiles(call_ms),
        "state_hz_target": state_hz,
        "state_hz_achieved": polls / elapsed,
        "rpc_rtt_ms": percentiles(rtt_ms, (50, 90, 99)),
        "state_vs_emulator_max_rad": tracking,
        "servo_calls": len(times),
        "realtime_priority": loop.priority_note or "SCHED_FIFO",
    }


if __name__ == "__main__":
    import json

    print(json.dumps(servo_stream(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0), indent=2))
