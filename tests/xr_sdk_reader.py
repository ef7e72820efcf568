"""A child process reading the right controller through the real xrobotoolkit-sdk (teleop_pico.sources).

The SDK keeps process-wide state and threads, so tests drive it here, one process per scenario: each
``read`` line on stdin answers with one line ``SAMPLE <json>`` (the SDK prints its own log text to stdout
without newlines, hence the marker); ``close`` closes the source and exits.
"""

from __future__ import annotations

import dataclasses
import json
import sys

from teleop_pico.sources import HeadsetSource

source = HeadsetSource()
print("\nREADY", flush=True)
for line in sys.stdin:
    if line.strip() == "read":
        s = source.read()
        print("\nSAMPLE " + json.dumps(None if s is None else dataclasses.asdict(s)), flush=True)
    elif line.strip() == "close":
        source.close()
        print("\nCLOSED", flush=True)
        break
