"""Modbus RTU figures over a socat pty pair: round trip and achieved poll rate.

``python -m bench.modbus``. The device is the CTAG emulator
(``tests/emulators``); ptys have no baud-rate timing, so these figures are
the software floor (pymodbus + pyserial + the emulator), not the wire: at
115200 8N1 a write (8 B) + reply (8 B) and a 2-register read (8 B + 9 B)
add about 3 ms of line time on real RS-485.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

_TESTS = str(Path(__file__).resolve().parents[1] / "tests")
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

from emulators.modbus_devices import CtagEmulator  # noqa: E402
from emulators.serial_link import SocatPair  # noqa: E402
from pymodbus import FramerType  # noqa: E402
from pymodbus.client import ModbusSerialClient  # noqa: E402

from bench.common import percentiles  # noqa: E402
from gripper.ctag.modbus_backend import CtagConfig, CtagGripperBackend  # noqa: E402


def gripper_round_trip(n: int = 200, poll_window: float = 2.0) -> dict[str, float]:
    """Write target + read feedback through a real client, n times; then the backend's achieved poll rates."""
    pair = SocatPair()
    emu = CtagEmulator(pair.b)
    out: dict[str, float] = {}
    try:
        client = ModbusSerialClient(pair.a, framer=FramerType.RTU, baudrate=115200, timeout=0.5, retries=0)
        client.connect()
        rts: list[float] = []
        for i in range(n):
            t0 = time.perf_counter()
            client.write_registers(0x0102, [0, (i * 37) % 9001], device_id=1)
            client.read_holding_registers(0x0418, count=2, device_id=1)
            rts.append((time.perf_counter() - t0) * 1e3)
        client.close()
        p = percentiles(rts)
        out.update(round_trip_n=float(n), round_trip_p50_ms=p["p50"], round_trip_p99_ms=p["p99"])
        for hz in (50.0, 500.0):  # the configured rate, and asking for far more than the link gives
            backend = CtagGripperBackend(CtagConfig(port=pair.a, poll_hz=hz, max_age=max(0.25, 2.0 / hz)))
            try:
                n0, t0 = backend.bus.stats["polls"], time.monotonic()
                time.sleep(poll_window)
                out[f"poll_rate_at_{hz:g}hz"] = (backend.bus.stats["polls"] - n0) / (time.monotonic() - t0)
            finally:
                backend.close()
    finally:
        emu.close()
        pair.close()
    return out


if __name__ == "__main__":
    print(json.dumps(gripper_round_trip(), indent=2))
