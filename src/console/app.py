"""The console's web application (FastAPI): the page, its live state and camera feeds, and its controls.

- ``GET /``: the page (``console/page/``), which needs nothing else from the network.
- ``GET /api/state``, ``WS /ws/state``: :meth:`ConsoleModel.snapshot` with the cameras' figures (the socket pushes
  it ``state_hz`` times a second).
- ``WS /ws/camera/{camera}?view=raw|policy``: JPEG frames, one at a time: the next is sent when the page says it
  received the last (it decodes one at a time and keeps only the newest waiting), and it is the newest then. A page
  that lags skips frames; nothing queues.
- ``GET /api/camera/{camera}.jpg``: the newest frame once.
- ``POST /api/control/{command}`` ``{"args": [...]}``: a button (console.controls), answered with its outcome.

Access (console.access): a token on every route but the page's files when one is set; every control also needs
the console's header and this server's Origin. A control is a request of its own, never behind a camera feed:
a hold reaches the arm however far the video lags.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
from pathlib import Path
from typing import Any, Final

from fastapi import FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.websockets import WebSocketState

from console import access
from console.controls import ControlError, Controls, describe, parse_body, plan
from console.frames import RAW, VIEWS, FrameStore
from console.model import ConsoleModel

STATE_HZ: Final = 5.0
FRAME_POLL_S: Final = 0.01  # how often a camera socket looks for a newer frame
MAX_CONTROL_BODY: Final = 4096  # bytes
BODY_TIMEOUT_S: Final = 5.0  # to send a control's body, once its head came


def _clean(value: Any) -> Any:
    """JSON without NaN or infinity (a browser's JSON.parse refuses them): such numbers become null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


async def _body(request: Request) -> bytes:
    """The request's body, read no further than :data:`MAX_CONTROL_BODY` (413) nor longer than
    :data:`BODY_TIMEOUT_S` (408): a body sent a byte at a time, or without end, holds nothing."""
    body = bytearray()
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            async for chunk in request.stream():
                body += chunk
                if len(body) > MAX_CONTROL_BODY:
                    raise HTTPException(status_code=413, detail=f"a control's body is at most {MAX_CONTROL_BODY} bytes")
    except TimeoutError:
        raise HTTPException(status_code=408, detail=f"the body did not come within {BODY_TIMEOUT_S:g} s") from None
    return bytes(body)


def create_app(model: ConsoleModel, frames: FrameStore, controls: Controls | None, *, host: str = "127.0.0.1",
               port: int = 8080, token: str = "", state_hz: float = STATE_HZ,
               title: str = "workcell") -> FastAPI:  # fmt: skip
    """The application. ``controls`` None: a page that only shows (the evaluation's progress)."""
    access.check_bind(host, token)
    app = FastAPI(title="workcell console", docs_url=None, redoc_url=None, openapi_url=None)
    closing = app.state.closing = threading.Event()  # set by ConsoleServer.stop: the live sockets end on their own
    if access.is_loopback(host) and not token:  # with a token, the token is what protects; names vary off loopback
        app.add_middleware(TrustedHostMiddleware, allowed_hosts=sorted(access.allowed_hosts(host, port)))
    page = Path(__file__).with_name("page")  # beside this module, whatever else is named "console"
    app.mount("/static", StaticFiles(directory=str(page)), name="static")
    index = (page / "index.html").read_text(encoding="utf-8")

    def authorised(given: str | None) -> None:
        if not access.token_ok(token, given):
            raise HTTPException(status_code=401, detail="this console needs its token (docs/console.md)")

    def request_token(request: Request) -> str | None:
        return request.headers.get(access.TOKEN_HEADER) or access.bearer(request.headers.get("authorization"))

    def state() -> dict[str, Any]:
        snap = model.snapshot()
        snap["cameras"] = frames.stats()
        snap["policy_view"] = frames.has_policy_view
        snap["controls"] = controls is not None
        snap["graph"] = controls is not None or bool(frames.cameras)  # a graph behind the page (not an evaluation's)
        snap["title"] = title
        return _clean(snap)

    @app.get("/", response_class=HTMLResponse)
    def page_index() -> HTMLResponse:
        return HTMLResponse(index, headers={"cache-control": "no-store"})

    @app.get("/api/state")
    def get_state(request: Request) -> JSONResponse:
        authorised(request_token(request))
        return JSONResponse(state())

    @app.get("/api/camera/{camera}.jpg")
    async def get_frame(camera: str, request: Request, view: str = RAW) -> Response:
        authorised(request_token(request))
        if camera not in frames.cameras or view not in VIEWS:
            raise HTTPException(status_code=404, detail=f"no camera {camera!r} in view {view!r}")
        encoded = await asyncio.to_thread(frames.jpeg, camera, view)
        if encoded is None:
            raise HTTPException(status_code=404, detail=f"no frame from {camera} yet")
        return Response(encoded[1], media_type="image/jpeg", headers={"x-frame-seq": str(encoded[0]),
                                                                      "cache-control": "no-store"})  # fmt: skip

    @app.post("/api/control/{command}")
    async def post_control(command: str, request: Request) -> JSONResponse:
        authorised(request_token(request))
        if request.headers.get(access.CONTROL_HEADER) != "1":
            raise HTTPException(status_code=403, detail=f"a control request needs the header {access.CONTROL_HEADER}")
        if not access.same_origin(request.headers.get("origin"), request.headers.get("host")):
            raise HTTPException(status_code=403, detail="a control request must come from the console's own page")
        if controls is None:
            raise HTTPException(status_code=404, detail="this console has no controls")
        try:
            args = parse_body(await _body(request))
        except ControlError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        try:
            plan(command, args)
        except ControlError as exc:
            raise HTTPException(status_code=400, detail=str(exc)) from None
        outcome = await controls.run(command, args)
        model.notice(" ".join([command, *args]), outcome.ok, outcome.message)
        return JSONResponse({**outcome.as_dict(), "command": command, "args": args, "what": describe(command)})

    async def accept(ws: WebSocket) -> bool:
        if not access.token_ok(token, ws.query_params.get(access.TOKEN_QUERY)) or not access.same_origin(
                ws.headers.get("origin"), ws.headers.get("host")):  # fmt: skip
            await ws.close(code=4401)
            return False
        await ws.accept()
        return True

    @app.websocket("/ws/state")
    async def ws_state(ws: WebSocket) -> None:
        if not await accept(ws):
            return
        try:
            while ws.client_state == WebSocketState.CONNECTED and not closing.is_set():
                await ws.send_text(json.dumps(state()))
                await asyncio.sleep(1.0 / state_hz)
            await ws.close(code=1001)
        except (WebSocketDisconnect, RuntimeError):
            pass

    @app.websocket("/ws/camera/{camera}")
    async def ws_camera(ws: WebSocket, camera: str) -> None:
        view = ws.query_params.get("view", RAW)
        if camera not in frames.cameras or view not in VIEWS:
            await ws.close(code=4404)
            return
        if not await accept(ws):
            return
        sent = 0
        try:
            while not closing.is_set():
                while frames.seq(camera) <= sent and not closing.is_set():
                    frames.want(camera)
                    await asyncio.sleep(FRAME_POLL_S)
                encoded = await asyncio.to_thread(frames.jpeg, camera, view)
                if encoded is None:
                    await asyncio.sleep(0.2)
                    continue
                sent = encoded[0]
                await ws.send_bytes(encoded[1])
                while not closing.is_set():  # the page has it: only now the next (the newest then)
                    try:
                        await asyncio.wait_for(ws.receive_text(), 0.5)
                        break
                    except TimeoutError:
                        continue
            await ws.close(code=1001)
        except (WebSocketDisconnect, RuntimeError):
            pass

    return app
