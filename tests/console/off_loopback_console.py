"""Run inside a network namespace of its own (test_console_access): the console bound to 10.213.7.1, a veth
interface's address, asked without, with a wrong and with the right token. Prints one JSON line of what it saw."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_console_access import TOKEN, Recorded, control, request

from console import access
from console.app import create_app
from console.frames import FrameStore
from console.model import ConsoleModel
from console.server import ConsoleServer

HOST = "10.213.7.1"
out: dict[str, object] = {"host": HOST}
try:
    create_app(ConsoleModel(), FrameStore(()), Recorded(), host=HOST)
    out["no_token_start"] = "started"
except access.AccessError:
    out["no_token_start"] = "refused"
controls = Recorded()
server = ConsoleServer(create_app(ConsoleModel(), FrameStore(()), controls, host=HOST, token=TOKEN), HOST, 0)
server.start()
try:
    out["state_without"] = request(server.url + "/api/state")[0]
    out["control_without"] = control(server, "hold", x_workcell_console="1")[0]
    out["control_wrong"] = control(server, "hold", x_workcell_console="1", x_workcell_token="x" * 40)[0]
    out["control_with"] = control(server, "hold", x_workcell_console="1", x_workcell_token=TOKEN)[0]
    out["calls"] = [[c, a] for c, a in controls.calls]
finally:
    server.stop()
print(json.dumps(out))
