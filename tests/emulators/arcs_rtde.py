"""The RTDE side of the emulated ARCS controller: what pyaubo_sdk 0.24.1's ``RtdeClient`` speaks (docs/rtde.md).

Runs inside the emulator's child process (the SDK keeps the GIL while ``connect`` waits for the greeting, so a
server in the client's process could never answer), on its own 127.0.0.1 port:

- on accepting, the greeting: raw JSON ``{"protocol": "rtde", "version": 1, "input": {...}, "output": {...}}``
  and ``\\n\\n`` (the output map names the fields a recipe may ask for);
- from the client: recipe frames ``SOF 0x00 <u16 length>`` + CBOR ``[100, {"chanel", "frequency", "segments",
  "to_server", "trigger"}]`` (frequency 0: the topic is removed) and the raw keepalive ``__ping__\\0``;
- to the client: one frame per topic at its frequency, ``SOF 0x00 <u16 length>`` + CBOR
  ``[channel, value, ...]`` in the recipe's order, the enums as strings.

Fault injection (through the emulator's stdin, ArcsEmulator): ``rtde_silence`` (keep the socket, push nothing:
a stream gone stale), ``rtde_drop`` (close every RTDE connection), ``rtde_no_greeting`` (accept, never greet).
"""

from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import cbor2

SOF = b"SOF"
PING = b"__ping__\x00"
RECIPE_CHANNEL = 100
# Field -> id, as the greeting's output map gives them (ids are the controller's; only the names are checked).
OUTPUTS = {
    "R1_actual_q": 41, "R1_actual_qd": 42, "R1_actual_TCP_pose": 50, "R1_robot_mode": 60, "R1_safety_mode": 61,
    "runtime_state": 70, "line_number": 71,
}  # fmt: skip
INPUTS = {"set_recipe": 100}


class RtdeServer:
    """Serves RTDE topics from the controller model ``ctl`` (its q, qd, modes, TCP pose)."""

    def __init__(self, ctl: Any, mode_names: dict[int, str], safety_names: dict[int, str],
                 drop: Callable[[socket.socket], None]) -> None:  # fmt: skip
        """``drop``: how the emulator drops a client (its RPC side's, so both sides drop alike)."""
        self.ctl, self.mode_names, self.safety_names, self._drop = ctl, mode_names, safety_names, drop
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.port = int(self.sock.getsockname()[1])
        self.lock = threading.Lock()
        self.silent = False
        self.greet = True
        self.malformed = False  # push five joints instead of six (a frame the client must refuse)
        self.outputs = dict(OUTPUTS)  # the greeting's output map (a controller without some field)
        self.conns: list[socket.socket] = []
        self.recipes: list[dict[str, Any]] = []  # every recipe frame received, in order
        self.pings = 0
        self.pushed: dict[int, int] = {}  # channel -> frames sent
        self.sent: deque[float] = deque(maxlen=100_000)  # time.monotonic() after each frame went out (benchmarks)

    def start(self) -> RtdeServer:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def op(self, cmd: dict[str, Any]) -> Any:
        op = cmd["op"]
        with self.lock:
            if op == "rtde_silence":
                self.silent = bool(cmd.get("on", True))
            elif op == "rtde_no_greeting":
                self.greet = not bool(cmd.get("on", True))
            elif op == "rtde_malformed":
                self.malformed = bool(cmd.get("on", True))
            elif op == "rtde_outputs":
                self.outputs = {k: v for k, v in OUTPUTS.items() if k in cmd["names"]}
            elif op == "rtde_drop":
                for conn in self.conns:
                    self._drop(conn)
                self.conns.clear()
            elif op == "rtde_sent":  # and forget them
                out = list(self.sent)
                self.sent.clear()
                return out
            elif op == "rtde_state":
                return {"recipes": list(self.recipes), "pings": self.pings,
                        "pushed": {str(k): v for k, v in self.pushed.items()}, "clients": len(self.conns)}  # fmt: skip
        return None

    # ---- serving ----------------------------------------------------------------------------------
    def _accept(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self.lock:
                self.conns.append(conn)
                greet = self.greet
            if greet:
                greeting = {"protocol": "rtde", "version": 1, "input": INPUTS, "output": self.outputs}
                conn.sendall(json.dumps(greeting).encode() + b"\n\n")
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        buf = b""
        topics: dict[int, threading.Event] = {}
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                buf += data
                while True:
                    if buf.startswith(PING):
                        buf = buf[len(PING) :]
                        with self.lock:
                            self.pings += 1
                        continue
                    frame, buf = _take_frame(buf)
                    if frame is None:
                        break
                    msg = cbor2.loads(frame)
                    if isinstance(msg, list) and len(msg) == 2 and msg[0] == RECIPE_CHANNEL:
                        self._recipe(conn, dict(msg[1]), topics)
        except OSError:
            pass
        finally:
            for stop in topics.values():
                stop.set()
            with self.lock:  # "clients": the connections still open
                if conn in self.conns:
                    self.conns.remove(conn)

    def _recipe(self, conn: socket.socket, recipe: dict[str, Any], topics: dict[int, threading.Event]) -> None:
        with self.lock:
            self.recipes.append(recipe)
        channel = int(recipe["chanel"])
        if channel in topics:
            topics.pop(channel).set()
        freq, names = float(recipe.get("frequency", 0.0)), list(recipe.get("segments", []))
        if freq > 0 and names and not recipe.get("to_server"):
            stop = threading.Event()
            topics[channel] = stop
            threading.Thread(target=self._push, args=(conn, channel, names, freq, stop), daemon=True).start()

    def _push(self, conn: socket.socket, channel: int, names: list[str], freq: float, stop: threading.Event) -> None:
        period, due = 1.0 / freq, time.monotonic()
        while not stop.is_set():
            due += period
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                due = time.monotonic()  # fell behind: no burst to catch up
            with self.lock:
                silent = self.silent
            if silent:
                continue
            body = cbor2.dumps([channel, *self._values(names)])
            try:
                conn.sendall(SOF + b"\x00" + struct.pack(">H", len(body)) + body)
            except OSError:
                return
            sent = time.monotonic()
            with self.lock:
                self.pushed[channel] = self.pushed.get(channel, 0) + 1
                self.sent.append(sent)

    def _values(self, names: list[str]) -> list[Any]:
        ctl = self.ctl
        with ctl.lock:
            state = {
                "R1_actual_q": [float(x) for x in ctl.q], "R1_actual_qd": [float(x) for x in ctl.qd],
                "R1_actual_TCP_pose": ctl.tcp_pose(), "R1_robot_mode": self.mode_names.get(ctl.mode, "Error"),
                "R1_safety_mode": self.safety_names.get(ctl.safety, "Fault"),
                "runtime_state": "Stopped", "line_number": 0,
            }  # fmt: skip
        if self.malformed:
            state["R1_actual_q"] = state["R1_actual_q"][:5]
        return [state[n] for n in names if n in state]


def _take_frame(buf: bytes) -> tuple[bytes | None, bytes]:
    """One frame's body off the front of ``buf`` (junk before SOF skipped), or None while it is incomplete."""
    start = buf.find(SOF)
    if start < 0:
        return None, buf[-2:]
    buf = buf[start:]
    if len(buf) < 4:
        return None, buf
    kind = buf[3]
    head = 6 if kind == 0 else 8
    if len(buf) < head:
        return None, buf
    n = struct.unpack(">H", buf[4:6])[0] if kind == 0 else struct.unpack(">I", buf[4:8])[0]
    if len(buf) < head + n:
        return None, buf
    return buf[head : head + n], buf[head + n :]

