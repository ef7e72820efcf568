"""The console under a flood of connections (issue 35, item 6): the console node as bring-up starts it (its own
process, the usual open-file limit of 1,024) takes more idle sockets than its bounds allow, per client and in
total, from loopback addresses; an operator's HOLD is still answered, by the arm's service, and the flood's
sockets are closed: the excess at once, the rest once they have sent no request in time. The rule that decides
which connection gives way is a property of :class:`ConnectionTable` over any sequence of connections."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import websockets
from conftest import wait_for
from hypothesis import example, given, settings
from hypothesis import strategies as st
from test_console_access import Recorded, control, request

from console import connections
from console.app import create_app
from console.connections import REQUEST, STREAM, WAITING, ConnectionTable
from console.controls import Outcome
from console.frames import FrameStore
from console.model import ConsoleModel
from console.server import ConsoleServer
from libero_workcell.contract import Services

FD_LIMIT = 1024  # the usual soft open-file limit of a login session
FLOOD = 1100  # the flood, from one client
OTHER_CLIENTS = 8  # loopback addresses 127.0.0.3.. that each open a client's worth more: past the total bound
SETTLE_S = 60.0  # how long the server may take to sort a flood out on a loaded machine (not a speed figure)


# ------------------------------------------------------------------ the rule, as a property


class _Conn:
    def __init__(self, client: str) -> None:
        self.client, self.state, self.vanished = client, WAITING, False


@st.composite
def _scripts(draw: st.DrawFn) -> tuple[int, int, list[tuple[str, int, int]]]:
    per_client = draw(st.integers(1, 3))
    total = draw(st.integers(1, 5))
    ops = draw(st.lists(st.tuples(st.sampled_from(["open", "open", "request", "stream", "answered", "close", "vanish"]),
                                  st.integers(0, 2), st.integers(0, 40)), max_size=40))  # fmt: skip
    return per_client, total, ops


@settings(max_examples=1000, deadline=None)
@given(_scripts())
@example((3, 3, [("open", 0, 0), ("open", 1, 0), ("open", 1, 0), ("open", 2, 0)]))  # the biggest client's first
def test_a_new_connection_displaces_the_one_that_least_needs_to_stay(script) -> None:
    """Whatever connections come and go: no client holds more than its bound, nor all more than theirs; a request
    being answered is never displaced; a connection waiting for a request goes before a websocket stream, the
    biggest client's and the oldest first; a new one is refused only when every connection in its way is a
    request being answered; one that has gone counts for nothing, whether it said so or not (a websocket)."""
    per_client, total, ops = script
    table = ConnectionTable(per_client, total, is_closed=lambda c: c.vanished)
    live: list[_Conn] = []  # what the table should hold, oldest state change first
    for op, who, pick in ops:
        if op == "open":
            conn, client = _Conn(f"10.0.0.{who}"), f"10.0.0.{who}"
            counts = {c.client: sum(1 for d in live if d.client == c.client) for c in live}
            closed = table.open(conn, client)
            mine = [c for c in live if c.client == client]
            in_way_client = len(mine) >= per_client
            if closed == [conn]:
                assert in_way_client or len(live) >= total
                assert all(c.state == REQUEST for c in (mine if in_way_client else live))
                assert table.refused and len(table) == len(live)
                continue
            assert all(c.state != REQUEST for c in closed)
            if in_way_client:  # one of its own gives way (then the total is not in the way)
                assert len(closed) == 1
                _assert_least_needed(closed[0], mine, counts, live)
            elif len(live) >= total:  # one of anybody's
                assert len(closed) == 1
                _assert_least_needed(closed[0], live, counts, live)
            else:
                assert closed == []
            for c in closed:
                live.remove(c)
            live.append(conn)
            assert len(table) == len(live)  # those that have gone no longer count
        elif live:
            conn = live[pick % len(live)]
            if op in ("request", "stream", "answered"):
                state = {"request": REQUEST, "stream": STREAM, "answered": WAITING}[op]
                table.mark(conn, state)
                if conn.state != state:
                    conn.state = state
                    live.remove(conn)
                    live.append(conn)
            elif op == "close" or conn.state != STREAM:  # an HTTP connection's end is always reported
                live.remove(conn)
                table.close(conn)
            else:  # a websocket's is not
                live.remove(conn)
                conn.vanished = True
        assert len(live) <= total
        assert all(sum(1 for d in live if d.client == c.client) <= per_client for c in live)


def _assert_least_needed(victim: _Conn, among: list[_Conn], counts: dict[str, int], live: list[_Conn]) -> None:
    candidates = [c for c in among if c.state != REQUEST]
    order = {id(c): i for i, c in enumerate(live)}
    best = min(candidates, key=lambda c: (c.state, -counts[c.client], order[id(c)]))
    assert victim is best


def test_a_flood_is_reported_at_most_every_report_period() -> None:
    table = ConnectionTable(1, 10)
    assert table.crowding(0.0) is None  # nothing past the bounds yet
    table.open("a", "x")
    table.open("b", "x")  # displaces a
    said = table.crowding(100.0)
    assert said and "1 displaced, 0 refused" in said and "(1 a client, 10 in all)" in said
    table.open("c", "x")
    assert table.crowding(100.0 + connections.REPORT_PERIOD_S / 2) is None  # not again so soon
    assert "2 displaced" in (table.crowding(100.0 + connections.REPORT_PERIOD_S) or "")
    assert table.crowding(1000.0) is None  # nothing new since


def test_the_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="must be positive"):
        ConnectionTable(0, 10)
    with pytest.raises(ValueError, match="must be positive"):
        ConnectionTable(10, 0)


# ------------------------------------------------------------------ the console node under a flood


def _closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError as exc:
        return exc.errno in (errno.ECONNRESET, errno.EPIPE)


def _still_open(socks: list[socket.socket]) -> list[socket.socket]:
    readable = set()
    poller = select.poll()
    for s in socks:
        poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
    for fd, _ in poller.poll(0):
        readable.add(fd)
    return [s for s in socks if s.fileno() not in readable or not _closed_by_peer(s)]


def _flood(port: int, source: str, count: int) -> list[socket.socket]:
    """``count`` connections from ``source`` that never send anything."""
    socks = []
    for _ in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((source, 0))
        s.settimeout(30)
        s.connect(("127.0.0.1", port))
        socks.append(s)
    return socks


@contextlib.contextmanager
def _descriptors(needed: int) -> Iterator[None]:
    """This test process may hold the flood's sockets (its soft limit raised for the test, never past the hard)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.skip(f"the flood needs {needed} open files in the test, the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.contextmanager
def _arm_stop_service() -> Iterator[list[int]]:
    """The arm's stop service (what HOLD calls), in a node of this process: it counts the calls it answers."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from std_srvs.srv import Trigger

    calls: list[int] = []

    def stop(_request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        calls.append(1)
        response.success, response.message = True, "stopped"
        return response

    context = Context()
    rclpy.init(context=context)
    with contextlib.ExitStack() as stack:
        stack.callback(context.try_shutdown)
        arm = rclpy.create_node("aubo_bridge", context=context)
        stack.callback(arm.destroy_node)
        arm.create_service(Trigger, Services.ARM_STOP, stop)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(arm)

        def spin() -> None:
            with contextlib.suppress(ExternalShutdownException):
                executor.spin()

        thread = threading.Thread(target=spin, daemon=True)
        thread.start()
        stack.callback(thread.join, 5.0)
        stack.callback(executor.shutdown, 2.0)
        yield calls


@contextlib.contextmanager
def _console_node(log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """``python -m console.node`` as bring-up runs it, at the usual open-file limit; its URL from its log line."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    command = [sys.executable, "-m", "console.node", "--ros-args", "-r", "__node:=console", "-p", "port:=0"]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard)))
    try:
        found: list[str] = []

        def started() -> bool:
            found[:] = re.findall(r"console at (http://[0-9.:]+)", log.read_text())
            return bool(found) or proc.poll() is not None

        assert wait_for(started, 60, interval=0.1) and found, log.read_text()
        yield proc, found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.ros
@pytest.mark.slow
def test_a_flood_of_idle_connections_leaves_hold_answered_and_is_closed(tmp_path) -> None:
    per_client, total = connections.MAX_PER_CLIENT, connections.MAX_TOTAL
    flood: list[socket.socket] = []
    log = tmp_path / "console.log"
    with (_descriptors(FLOOD + OTHER_CLIENTS * per_client + 256), _arm_stop_service() as stops,
          _console_node(log) as (proc, url)):  # fmt: skip
        port = int(url.rsplit(":", 1)[1])
        try:
            # one client opens the 1,100 sockets: it keeps at most its bound of them
            flood = _flood(port, "127.0.0.2", FLOOD)
            assert wait_for(lambda: len(_still_open(flood)) <= per_client, SETTLE_S, interval=0.2), \
                len(_still_open(flood))  # fmt: skip
            # more clients, each within its bound, past the total: all of them keep at most the total
            for k in range(OTHER_CLIENTS):
                flood += _flood(port, f"127.0.0.{3 + k}", per_client)
            assert wait_for(lambda: len(_still_open(flood)) <= total, SETTLE_S, interval=0.2), len(_still_open(flood))
            # the operator's HOLD, beside them, reaches the arm's service and its answer comes back
            assert proc.poll() is None and not stops
            status, body = _hold(url)
            assert (status, body["ok"], body["message"]) == (200, True, "stopped"), body
            assert len(stops) == 1
            # the flood's idle sockets are closed once they have sent no request in time
            assert wait_for(lambda: not _still_open(flood), connections.REQUEST_TIMEOUT_S + SETTLE_S, interval=0.2), \
                len(_still_open(flood))  # fmt: skip
            assert proc.poll() is None
        finally:
            for s in flood:
                s.close()
    said = log.read_text()
    assert "Too many open files" not in said and "more connections than the console's bounds" in said


def _hold(url: str) -> tuple[int, dict]:
    status, body = request(f"{url}/api/control/hold", "POST", b'{"args": []}', content_type="application/json",
                           x_workcell_console="1")  # fmt: skip
    return status, json.loads(body)


# ------------------------------------------------------------------ the protocol's side, in this process


@pytest.fixture
def small_console(monkeypatch) -> Iterator[tuple[ConsoleServer, Recorded]]:
    """A console whose bounds are small: 3 connections a client, 5 in all, 1 s to send a request."""
    monkeypatch.setattr(connections, "REQUEST_TIMEOUT_S", 1)
    controls = Recorded()
    server = ConsoleServer(create_app(ConsoleModel(), FrameStore(("external",)), controls, port=0), "127.0.0.1", 0,
                           per_client=3, total=5)  # fmt: skip
    server.start()
    yield server, controls
    server.stop()


def test_a_head_sent_a_byte_at_a_time_is_cut_at_the_deadline(small_console) -> None:
    """A client that keeps sending but never finishes a request is closed when its time is up (uvicorn alone
    would keep it open for ever)."""
    server, _ = small_console
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    try:
        sock.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        deadline = time.monotonic() + connections.REQUEST_TIMEOUT_S + SETTLE_S

        def trickle_until_closed() -> bool:
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except OSError:
                return True
            return _closed_by_peer(sock)

        assert wait_for(trickle_until_closed, deadline - time.monotonic(), interval=0.5)
    finally:
        sock.close()


def test_a_request_after_an_idle_connection_opened_is_answered_and_a_stream_outlives_the_deadline(
        small_console) -> None:  # fmt: skip
    """A websocket (the page's state) is no idle connection: it stays past the deadline; a client at its bound
    with idle sockets still gets its HOLD through (an idle one gives way), and with every socket a stream, a
    stream gives way (the page reopens it) rather than the HOLD."""
    server, controls = small_console
    ws_url = server.url.replace("http", "ws") + "/ws/state"

    async def run() -> list[str]:
        seen = []
        async with websockets.connect(ws_url) as first, websockets.connect(ws_url):
            await asyncio.wait_for(first.recv(), 10)
            late = socket.create_connection(("127.0.0.1", server.port))  # idle, opened after the streams
            try:  # closed at its deadline: the streams, older, are past theirs
                closed = await asyncio.to_thread(wait_for, lambda: _closed_by_peer(late), SETTLE_S)
            finally:
                late.close()
            seen.append(f"first {first.state.name} after the deadline" if closed else "the idle one never closed")
            idle = socket.create_connection(("127.0.0.1", server.port))  # the client's third connection
            try:
                status, _ = await asyncio.to_thread(control, server, "hold", x_workcell_console="1")
                seen.append(f"hold {status}")
                seen.append("idle closed" if await asyncio.to_thread(wait_for, lambda: _closed_by_peer(idle), 10)
                            else "idle open")  # fmt: skip
            finally:
                idle.close()
            async with websockets.connect(ws_url) as third:  # three streams: the client's bound
                await asyncio.wait_for(third.recv(), 10)
                status, _ = await asyncio.to_thread(control, server, "hold", x_workcell_console="1")
                seen.append(f"hold {status}")
                with contextlib.suppress(websockets.ConnectionClosed, TimeoutError):
                    for _ in range(50):
                        await asyncio.wait_for(first.recv(), 10)
                    seen.append("first streaming")
                seen.append("first closed" if first.close_code is not None or first.state.name != "OPEN"
                            else "first open")  # fmt: skip
        return seen

    assert asyncio.run(run()) == ["first OPEN after the deadline", "hold 200", "idle closed", "hold 200",
                                  "first closed"]  # fmt: skip
    assert controls.calls == [("hold", []), ("hold", [])]


class SlowControls(Recorded):
    """A graph whose services take longer to answer than a connection has to send its request."""

    started = 0

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()  # set by the test once no answer needs to be slow: the rest come at once

    async def run(self, command: str, args: Sequence[str]) -> Outcome:
        self.started += 1
        until = time.monotonic() + 2.0
        while time.monotonic() < until and not self.go.is_set():
            await asyncio.sleep(0.01)
        return await super().run(command, args)


def test_a_request_being_answered_stays_and_answered_connections_give_way(monkeypatch) -> None:
    """A control whose answer takes longer than the deadline is answered, however many connections its client
    opens meanwhile; connections whose request was answered (kept alive) give way to a new one."""
    monkeypatch.setattr(connections, "REQUEST_TIMEOUT_S", 1)
    controls = SlowControls()
    server = ConsoleServer(create_app(ConsoleModel(), FrameStore(()), controls, port=0), "127.0.0.1", 0,
                           per_client=3, total=5)  # fmt: skip
    server.start()
    kept: list[socket.socket] = []
    answers: list[tuple[int, dict]] = []
    try:
        slow = threading.Thread(target=lambda: answers.append(control(server, "hold", x_workcell_console="1")))
        slow.start()
        assert wait_for(lambda: server.connections.clients().get("127.0.0.1") == 1, 10)
        for _ in range(3):  # three requests answered on connections kept open: the client's bound
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"GET /api/state HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200")
            kept.append(sock)
        slow.join(30)
        assert answers == [(200, {"ok": True, "message": "did hold", "command": "hold", "args": [],
                                  "what": "the same as stop"})]  # fmt: skip
        controls.go.set()  # the next answer's speed is not what is tested
        assert control(server, "hold", x_workcell_console="1")[0] == 200  # one of the answered ones gave way
        assert controls.calls == [("hold", []), ("hold", [])]
    finally:
        for sock in kept:
            sock.close()
        server.stop()


def test_requests_whose_client_went_away_leave_room(monkeypatch) -> None:
    """A client that drops its connections while their requests are being answered has them no longer: its
    next request is answered, however many it dropped."""
    monkeypatch.setattr(connections, "REQUEST_TIMEOUT_S", 1)
    controls = SlowControls()
    server = ConsoleServer(create_app(ConsoleModel(), FrameStore(()), controls, port=0), "127.0.0.1", 0,
                           per_client=3, total=5)  # fmt: skip
    server.start()
    try:
        for k in range(3):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(b"POST /api/control/hold HTTP/1.1\r\nHost: 127.0.0.1\r\nx-workcell-console: 1\r\n"
                         b"content-length: 2\r\n\r\n{}")  # fmt: skip
            assert wait_for(lambda k=k: controls.started == k + 1, 10)
            sock.close()  # gone while the graph is still answering
        assert wait_for(lambda: not server.connections.clients(), 10)
        assert request(server.url + "/api/state")[0] == 200
        assert server.connections.refused == 0
    finally:
        controls.go.set()  # the dropped requests end now: the server's stop need not wait for them
        server.stop()


def test_closed_streams_leave_room(small_console, monkeypatch) -> None:
    """Websockets the page closed are no longer counted (they are not the HTTP protocol's to report): after
    three of them came and went, three idle connections of the same client all stay."""
    server, _ = small_console
    monkeypatch.setattr(connections, "REQUEST_TIMEOUT_S", SETTLE_S)  # no idle one reaches its deadline here

    async def streams() -> None:
        for _ in range(3):
            async with websockets.connect(server.url.replace("http", "ws") + "/ws/state") as ws:
                await asyncio.wait_for(ws.recv(), 10)

    asyncio.run(streams())
    idle = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(3)]
    try:
        assert request(server.url + "/api/state")[0] == 200  # served beside them (one of them gave way for it)
        assert wait_for(lambda: len(_still_open(idle)) == 2, SETTLE_S), len(_still_open(idle))
        assert server.connections.displaced == 1 and len(_still_open(idle)) == 2
    finally:
        for s in idle:
            s.close()


def test_the_open_file_limit_is_made_to_hold_the_connections() -> None:
    """At start the console raises a soft open-file limit that leaves too little room for its connections beside
    the process's own (never past the hard limit), and refuses to start, saying what to do, when the hard limit
    is too low; in a process of its own, as the limit is the process's."""
    script = ("import resource, sys\n"
              "from console.connections import reserve_descriptors\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (int(sys.argv[1]), int(sys.argv[2])))\n"
              "try:\n"
              "    reserve_descriptors(600)\n"
              "except OSError as exc:\n"
              "    print('refused:', exc); sys.exit(0)\n"
              "print('soft', resource.getrlimit(resource.RLIMIT_NOFILE)[0])\n")  # fmt: skip

    def start(soft: int, hard: int) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", script, str(soft), str(hard)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)  # fmt: skip

    def result(proc: subprocess.Popen) -> str:
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        return out.strip()

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2000:
        pytest.skip(f"needs a hard open-file limit of 2000 or more (it is {hard})")
    untouched, raising, refused = start(2000, 2000), start(500, 2000), start(500, 500)  # at once: each its own
    assert result(untouched) == "soft 2000"  # room enough: untouched
    raised = int(result(raising).split()[1])
    assert 600 + connections.FD_RESERVE < raised < 2000  # what it needs, not all it may
    assert re.fullmatch(r"refused: the console needs \d+ open files .*limit is 500 \(hard 500\).*ulimit -n \d+\)",
                        result(refused))  # fmt: skip
