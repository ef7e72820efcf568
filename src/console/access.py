"""Who may use the console: the bind rule and the token.

The rule (docs/console.md): bound to a loopback address, the page is the operator's on this machine and needs no
token; bound to any other address it refuses to start without one, and then every request but the page's own
files (the state, the cameras, every control) must carry it. Whatever the address, a control request must come
from the page itself: a custom header (which a foreign page's script cannot send to another origin without a
preflight the console never grants) and, when the browser says where it comes from, an Origin on this server.
That stops another site in the operator's browser from pressing the console's buttons (cross-site request
forgery) and a rebound DNS name from reaching it (the Host must be this server's).
"""

from __future__ import annotations

import hmac
import os
import secrets
import stat
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from libero_workcell.loopback import is_loopback

CONTROL_HEADER: Final = "x-workcell-console"  # every control request carries it (value: "1")
TOKEN_HEADER: Final = "x-workcell-token"
TOKEN_QUERY: Final = "token"  # websockets cannot carry headers from a browser
TOKEN_ENV: Final = "WORKCELL_CONSOLE_TOKEN"
MIN_TOKEN_CHARS: Final = 16


class AccessError(ValueError):
    """A bind address or token setting the console refuses to start with."""


def load_token(token_file: str, env: dict[str, str] | None = None) -> str:
    """The token from ``token_file`` (it must not be readable by group or others) or :data:`TOKEN_ENV`; "" for
    none. Never a ROS parameter: parameters are readable by anyone on the graph."""
    env = dict(os.environ) if env is None else env
    if token_file:
        path = Path(token_file).expanduser()
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise AccessError(f"console token file {path}: {exc.strerror}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise AccessError(f"console token file {path} is readable by others (mode {stat.filemode(mode)}): "
                              f"chmod 600 {path}")  # fmt: skip
        token = path.read_text(encoding="utf-8").strip()
    else:
        token = env.get(TOKEN_ENV, "").strip()
    if token and len(token) < MIN_TOKEN_CHARS:
        raise AccessError(f"the console token has {len(token)} characters: use at least {MIN_TOKEN_CHARS} "
                          f"(e.g. {secrets.token_urlsafe(24)})")  # fmt: skip
    return token


def check_bind(host: str, token: str) -> None:
    """Refuse an address off loopback without a token."""
    if not host:
        raise AccessError("the console needs an address to bind (console.host)")
    if not is_loopback(host) and not token:
        raise AccessError(f"the console binds {host}, which is not loopback: it needs a token (console.token_file "
                          f"or {TOKEN_ENV}; docs/console.md)")  # fmt: skip


def token_ok(expected: str, given: str | None) -> bool:
    """True when no token is required, or ``given`` is it (compared in constant time)."""
    if not expected:
        return True
    return given is not None and hmac.compare_digest(expected.encode(), given.encode())


def bearer(authorization: str | None) -> str | None:
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return None


def same_origin(origin: str | None, host_header: str | None) -> bool:
    """An absent Origin (a command-line client) or one naming this server's host:port."""
    if origin is None:
        return True
    if not host_header:
        return False
    return urlsplit(origin).netloc.lower() == host_header.lower()


def allowed_hosts(host: str, port: int) -> set[str]:
    """Host headers the console answers: its own address (a rebound DNS name is not one of them)."""
    names = {host, "127.0.0.1", "localhost", "[::1]"} if is_loopback(host) else {host}
    if ":" in host and not host.startswith("["):
        names.add(f"[{host}]")
    return {f"{name}:{port}" for name in names} | names
