"""Who may use the console, checked against the real server (uvicorn on loopback, a real HTTP and websocket
client): the bind rule, the token on every route but the page's files, the control header and same-origin rules
that stop another site's page from pressing its buttons, the Host check against DNS rebinding, and the refusal of
malformed control requests. The graph's side is replaced by :class:`Recorded` (what a control would do there is
tested on the simulated graph in test_console_browser)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest
import websockets
from hypothesis import given, settings
from hypothesis import strategies as st

from console import access
from console.app import MAX_CONTROL_BODY, create_app
from console.controls import OFFERED, Outcome
from console.frames import FrameStore
from console.model import ConsoleModel
from console.server import ConsoleServer

TOKEN = "a-token-of-enough-characters-0123"
HERE = Path(__file__).resolve().parent


class Recorded:
    """The graph side of the controls: records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str]]] = []

    async def run(self, command: str, args: Sequence[str]) -> Outcome:
        self.calls.append((command, list(args)))
        return Outcome(True, f"did {command}")


def serve(token: str = "") -> tuple[ConsoleServer, Recorded, FrameStore]:
    model, frames, controls = ConsoleModel(), FrameStore(("external", "wrist")), Recorded()
    frames.put("external", 4, 6, "rgb8", np.zeros((4, 6, 3), np.uint8).tobytes())
    server = ConsoleServer(create_app(model, frames, controls, host="127.0.0.1", port=0, token=token), "127.0.0.1", 0)
    server.start()
    return server, controls, frames


@pytest.fixture
def open_console() -> Iterator[tuple[ConsoleServer, Recorded]]:
    server, controls, _ = serve()
    yield server, controls
    server.stop()


@pytest.fixture
def token_console() -> Iterator[tuple[ConsoleServer, Recorded]]:
    server, controls, _ = serve(TOKEN)
    yield server, controls
    server.stop()


def request(url: str, method: str = "GET", body: bytes | None = None, **headers: str) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers={k.replace("_", "-"): v
                                                                          for k, v in headers.items()})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, res.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def control(server: ConsoleServer, command: str, args: Sequence[str] = (), **headers: str) -> tuple[int, dict]:
    status, body = request(f"{server.url}/api/control/{command}", "POST", json.dumps({"args": list(args)}).encode(),
                           content_type="application/json", **headers)  # fmt: skip
    return status, json.loads(body)


def test_the_bind_rule_refuses_an_address_off_loopback_without_a_token() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.0.0.2"):
        access.check_bind(host, "")
    for host in ("0.0.0.0", "192.168.1.20", "::", "robot-pc.lab"):
        with pytest.raises(access.AccessError, match="not loopback: it needs a token"):
            access.check_bind(host, "")
        access.check_bind(host, TOKEN)
        with pytest.raises(access.AccessError):
            create_app(ConsoleModel(), FrameStore(()), None, host=host)


def test_the_token_comes_from_a_private_file_or_the_environment(tmp_path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    path.chmod(0o644)
    with pytest.raises(access.AccessError, match="readable by others"):
        access.load_token(str(path))
    path.chmod(0o600)
    assert access.load_token(str(path)) == TOKEN
    assert access.load_token("", {access.TOKEN_ENV: TOKEN}) == TOKEN and access.load_token("", {}) == ""
    with pytest.raises(access.AccessError, match="at least"):
        access.load_token("", {access.TOKEN_ENV: "short"})
    with pytest.raises(access.AccessError, match="No such file"):
        access.load_token(str(tmp_path / "missing"))


def test_on_loopback_the_page_and_its_controls_work_without_a_token(open_console) -> None:
    server, controls = open_console
    status, page = request(server.url + "/")
    assert status == 200 and b"HOLD" in page
    assert request(server.url + "/static/console.js")[0] == 200
    status, body = request(server.url + "/api/state")
    assert status == 200 and json.loads(body)["controls"] is True
    status, jpeg = request(server.url + "/api/camera/external.jpg")
    assert status == 200 and jpeg[:2] == b"\xff\xd8"
    assert request(server.url + "/api/camera/wrist.jpg")[0] == 404  # no frame yet
    assert control(server, "hold", x_workcell_console="1") == (200, {"ok": True, "message": "did hold",
                                                                     "command": "hold", "args": [],
                                                                     "what": "the same as stop"})  # fmt: skip
    assert controls.calls == [("hold", [])]


def test_a_control_needs_the_console_header_and_its_own_origin(open_console) -> None:
    server, controls = open_console
    status, body = control(server, "hold")  # a plain form post from anywhere
    assert status == 403 and "x-workcell-console" in body["detail"]
    status, body = control(server, "hold", x_workcell_console="1", origin="http://evil.example")
    assert status == 403 and "own page" in body["detail"]
    assert control(server, "hold", x_workcell_console="1", origin=server.url)[0] == 200
    assert controls.calls == [("hold", [])]


def test_a_rebound_host_name_is_refused(open_console) -> None:
    server, _ = open_console
    assert request(server.url + "/api/state", host=f"evil.example:{server.port}")[0] == 400
    assert request(server.url + "/api/state", host=f"localhost:{server.port}")[0] == 200


def test_malformed_or_unoffered_controls_are_refused_before_anything_is_done(open_console) -> None:
    server, controls = open_console
    ok = {"x_workcell_console": "1"}
    assert control(server, "jog", ["dx", "1"], **ok)[0] == 400  # driving from a web page is not offered
    assert control(server, "episode", ["delete"], **ok)[0] == 400
    assert control(server, "source", ["policy", "teleop"], **ok)[0] == 400
    assert control(server, "source", ["nobody"], **ok)[0] == 400
    for body in (b"not json", b'{"args": "start"}', b'{"args": [1]}', b"[]", b'{"args": ["' + b"x" * 5000 + b'"]}'):
        status, _ = request(f"{server.url}/api/control/episode", "POST", body, x_workcell_console="1")
        assert status in (400, 413), body
    assert controls.calls == []
    assert control(server, "source", ["teleop"], **ok)[0] == 200 and controls.calls == [("source", ["teleop"])]
    assert request(f"{server.url}/api/control/hold", "POST", b"", **ok)[0] == 200  # no body: no arguments
    assert controls.calls[-1] == ("hold", [])


@pytest.fixture(scope="module")
def shared_console() -> Iterator[tuple[ConsoleServer, Recorded]]:
    server, controls, _ = serve()
    yield server, controls
    server.stop()


def _json_values() -> st.SearchStrategy:
    leaves = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
    return st.recursive(leaves, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                           max_size=3), max_leaves=12)


HOSTILE_BODIES = st.one_of(
    st.binary(max_size=300),
    st.integers(1, 5000).map(lambda n: b"[" * n),  # the issue's: thousands of nested brackets
    st.integers(1, 2000).map(lambda n: b'{"args": ' + b"[" * n + b'"start"' + b"]" * n + b"}"),
    _json_values().map(lambda v: json.dumps(v).encode()),
    _json_values().map(lambda v: json.dumps({"args": v}).encode()),
    st.lists(st.text(max_size=250), max_size=3).map(lambda a: json.dumps({"args": a}).encode()),
    st.lists(st.sampled_from(["start", "save", "teleop", "none", "stop"]), max_size=2).map(
        lambda a: json.dumps({"args": a}).encode()),
    st.sampled_from([b'{"args": [], "args": ["start"]}', b'{"args": ["start"], "more": 1}', b'{"args": ["\\ud800"]}',
                     b'{"args": ["\xff"]}', b"\xef\xbb\xbf{}", b"1e999", b'{"args": [1e999]}', b"NaN", b"",
                     b'{"args": ["' + b"x" * 5000 + b'"]}']),
)


@settings(max_examples=250, deadline=None)
@given(command=st.sampled_from([*OFFERED, "jog", "nope"]), body=HOSTILE_BODIES)
def test_whatever_a_control_body_holds_the_answer_is_a_refusal_with_a_reason_or_the_command(
        shared_console, command: str, body: bytes) -> None:  # fmt: skip
    """Any bytes as a control's body: the command when the body is {"args": [strings]} and the command takes them,
    else 400 (or 413, too large) with a reason; never a server error, and nothing done."""
    server, controls = shared_console
    before = len(controls.calls)
    status, answer = request(f"{server.url}/api/control/{command}", "POST", body, x_workcell_console="1")
    detail = json.loads(answer).get("detail")
    if status == 200:  # a body of one "args" key, a list of short strings
        pairs = json.loads(body or b"{}", object_pairs_hook=lambda p: p)
        assert [k for k, _ in pairs] in ([], ["args"]), body
        args = dict(pairs).get("args", [])
        assert all(isinstance(a, str) for a in args), body
        assert controls.calls[before:] == [(command, args)]
        return
    assert status in (400, 413), (status, answer)
    assert isinstance(detail, str) and detail, answer
    assert len(controls.calls) == before
    if status == 413:
        assert len(body) > MAX_CONTROL_BODY


def test_a_control_body_that_does_not_come_or_never_ends_is_refused(open_console, monkeypatch) -> None:
    """A body announced and not sent is given up after BODY_TIMEOUT_S (408); one that goes on past the bound is
    refused as it comes (413), whatever length it announced."""
    import socket

    from console import app as app_module

    monkeypatch.setattr(app_module, "BODY_TIMEOUT_S", 0.5)
    server, controls = open_console
    head = (f"POST /api/control/hold HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nx-workcell-console: 1\r\n"
            "content-type: application/json\r\n")  # fmt: skip
    for rest, expected in ((b"content-length: 100\r\n\r\n{", b"HTTP/1.1 408 "),
                           (b"transfer-encoding: chunked\r\n\r\n" + b"400\r\n" + b" " * 1024 + b"\r\n", None)):
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
            s.sendall(head.encode() + rest)
            if expected is None:  # chunks of spaces without end
                expected = b"HTTP/1.1 413 "
                for _ in range(8):
                    s.sendall(b"400\r\n" + b" " * 1024 + b"\r\n")
            got = s.recv(65536)
        assert got.startswith(expected), got[:200]
    assert controls.calls == []


def test_with_a_token_every_route_but_the_page_files_needs_it(token_console) -> None:
    server, controls = token_console
    assert request(server.url + "/")[0] == 200  # the page itself (its script asks with the token)
    for path in ("/api/state", "/api/camera/external.jpg"):
        assert request(server.url + path)[0] == 401
        assert request(server.url + path, x_workcell_token="wrong-token-of-enough-chars")[0] == 401
        assert request(server.url + path, x_workcell_token=TOKEN)[0] == 200
        assert request(server.url + path, authorization=f"Bearer {TOKEN}")[0] == 200
    status, body = control(server, "hold", x_workcell_console="1")
    assert status == 401 and "token" in body["detail"] and controls.calls == []
    assert control(server, "hold", x_workcell_console="1", x_workcell_token=TOKEN)[0] == 200
    assert controls.calls == [("hold", [])]

    async def socket(path: str) -> str:
        try:
            async with websockets.connect(server.url.replace("http", "ws") + path, open_timeout=10) as ws:
                return "open: " + str(await asyncio.wait_for(ws.recv(), 10))[:20]
        except websockets.InvalidStatus as exc:
            return f"refused {exc.response.status_code}"
        except websockets.ConnectionClosed as exc:
            return f"closed {exc.rcvd.code if exc.rcvd else None}"

    for path in ("/ws/state", "/ws/camera/external", f"/ws/state?token=wrong{TOKEN}"):
        assert asyncio.run(socket(path)) in ("closed 4401", "refused 403"), path
    assert asyncio.run(socket(f"/ws/state?token={TOKEN}")).startswith('open: {"t"')


def test_the_camera_socket_sends_the_newest_frame_only_when_the_page_has_the_last() -> None:
    server, _, frames = serve()
    try:
        async def run() -> list[int]:
            seqs = []
            async with websockets.connect(server.url.replace("http", "ws") + "/ws/camera/external") as ws:
                await asyncio.wait_for(ws.recv(), 10)
                seqs.append(frames.seq("external"))
                for _ in range(5):  # five frames arrive while the page has not acknowledged the first
                    frames.put("external", 4, 6, "rgb8", np.full((4, 6, 3), 9, np.uint8).tobytes())
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(ws.recv(), 0.5)  # nothing is pushed meanwhile
                await ws.send("shown")
                await asyncio.wait_for(ws.recv(), 10)  # one frame: the newest
                seqs.append(frames.seq("external"))
                await ws.send("shown")
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(ws.recv(), 0.5)  # no newer frame: nothing
            return seqs

        assert asyncio.run(run()) == [1, 6]
    finally:
        server.stop()


def test_a_port_in_use_is_a_clear_error_at_start() -> None:
    server, _, _ = serve()
    try:
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{server.port}.*console.port"):
            ConsoleServer(create_app(ConsoleModel(), FrameStore(()), None), "127.0.0.1", server.port)
    finally:
        server.stop()


def _can_make_a_network_namespace() -> bool:
    if shutil.which("unshare") is None or shutil.which("ip") is None or os.geteuid() != 0:
        return False
    return subprocess.run(["unshare", "--net", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _can_make_a_network_namespace(), reason="needs root, unshare and ip (iproute2)")
def test_bound_off_loopback_a_control_without_the_token_is_refused() -> None:
    """The console bound to a LAN address (in a network namespace of its own: a veth pair whose both ends are in
    it, so nothing reaches another machine) refuses to start without a token, and with one refuses every control
    that lacks it."""
    script = HERE / "off_loopback_console.py"
    setup = ("ip link set lo up && ip link add lan0 type veth peer name lan1 && ip addr add 10.213.7.1/24 dev lan0 "
             f"&& ip link set lan0 up && ip link set lan1 up && exec {sys.executable} {script}")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(["unshare", "--net", "sh", "-c", setup], capture_output=True, text=True, timeout=120,
                          env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert results == {"no_token_start": "refused", "state_without": 401, "control_without": 401,
                       "control_wrong": 401, "control_with": 200, "calls": [["hold", []]],
                       "host": "10.213.7.1"}  # fmt: skip
