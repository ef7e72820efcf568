"""The console's web server: uvicorn in a thread of its own, beside the node's executor.

Why a thread: the node's executor must keep taking the graph's messages whatever the page does, and the server's
event loop must keep answering buttons whatever the executor does. The two share only the model, the frame store
and the service clients (each thread-safe).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Final

import uvicorn
from fastapi import FastAPI

from console import connections

START_TIMEOUT_S: Final = 10.0
WS_MAX_MESSAGE: Final = 4096  # bytes: the page sends only acknowledgements


class ConsoleServer:
    """Serve ``app`` on ``host:port`` until :meth:`stop`. The port is bound in :meth:`start`, so a port in use is
    an error there (a clear one), not in a thread nobody watches. Its connections are bounded
    (console.connections): per client, in total, and in the time each has to send a request."""

    def __init__(self, app: FastAPI, host: str, port: int, per_client: int = connections.MAX_PER_CLIENT,
                 total: int = connections.MAX_TOTAL) -> None:  # fmt: skip
        self.host, self.port = host, int(port)
        connections.reserve_descriptors(total + connections.IN_FLIGHT)
        self.connections = connections.ConnectionTable(per_client, total, is_closed=lambda t: t.is_closing())
        self._app = app
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, self.port))
        except OSError as exc:
            self._sock.close()
            raise OSError(f"the console cannot listen on {host}:{port}: {exc.strerror} (another console? "
                          f"choose another with console.port:=...)") from None  # fmt: skip
        self.port = self._sock.getsockname()[1]  # port 0: the one the system chose
        config = uvicorn.Config(app, log_level="warning", access_log=False, ws_ping_interval=5.0,
                                ws_ping_timeout=10.0, timeout_graceful_shutdown=1, ws_max_size=WS_MAX_MESSAGE,
                                http=connections.guarded_protocol(self.connections),  # type: ignore[arg-type]
                                timeout_keep_alive=connections.REQUEST_TIMEOUT_S,
                                backlog=connections.ACCEPT_BACKLOG)  # fmt: skip
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="console-http", daemon=True)  # fmt: skip

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the console's web server did not start on {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        closing = getattr(self._app.state, "closing", None)
        if closing is not None:
            closing.set()  # the live sockets close themselves (going away) before the server waits for them
        self._server.should_exit = True
        self._thread.join(timeout=5.0)
        self._sock.close()
