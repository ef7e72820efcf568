"""Which policy client a URL selects: its scheme names the protocol (``ws``, ``wss``: openpi's websocket).

A protocol is a :class:`policy_node.protocol.ClientKind`: its client (a :class:`~policy_node.protocol.Connect`),
its observation adapter and, if its server has one, an HTTP health endpoint for ``workcell check``. Each is
registered under its URL schemes with a loader (the protocol's package imports the registry's types from
policy_node.protocol, never the registry: no import loop), imported only when a URL selects it: validating
``policy.url`` needs only the scheme list, and a protocol whose libraries are not installed costs nothing until it
is asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

from libero_workcell.cell_file import redact_text
from libero_workcell.loopback import LOOPBACK
from policy_node.protocol import MAX_REPLY_BYTES_DEFAULT, ClientKind, PolicyClient

LOCAL_SCHEME: Final = "ws"  # policy_node.serve: the local server is openpi's websocket server


_LOADERS: dict[str, Callable[[], ClientKind]] = {}


def register(schemes: tuple[str, ...], load: Callable[[], ClientKind]) -> None:
    """Select ``load()``'s kind for URLs of these schemes (a later registration of a scheme replaces it)."""
    for scheme in schemes:
        _LOADERS[scheme.lower()] = load


def unregister(schemes: tuple[str, ...]) -> None:
    """No client for these schemes any more (a test's protocol, gone with the test)."""
    for scheme in schemes:
        _LOADERS.pop(scheme.lower(), None)


def schemes() -> tuple[str, ...]:
    """The URL schemes a client is registered for, sorted."""
    return tuple(sorted(_LOADERS))


def scheme_of(url: str) -> str:
    """The URL's scheme, if a client is registered for it and the URL names a host; ValueError naming the
    supported schemes otherwise."""
    parts = urlsplit(str(url))
    supported = ", ".join(f"{s}://" for s in schemes())
    if parts.scheme.lower() not in _LOADERS:
        raise ValueError(f"no policy client for {redact_text(str(url))!r}: the URL's scheme must be one of {supported}")
    try:
        named = bool(parts.hostname) and (parts.port is None or parts.port > 0)  # (.port raises on a bad one)
    except ValueError:
        named = False
    if not named:
        raise ValueError(f"{redact_text(str(url))!r} names no server (SCHEME://HOST:PORT, SCHEME one of {supported})")
    return parts.scheme.lower()


def kind_for(url: str) -> ClientKind:
    """The protocol a URL selects; ValueError naming the supported schemes for any other."""
    return _LOADERS[scheme_of(url)]()


def client_for(url: str, timeout: float, *, max_reply_bytes: int = MAX_REPLY_BYTES_DEFAULT,
               **settings: Any) -> PolicyClient:  # fmt: skip
    """A connected client of the protocol ``url`` selects (the runner's default ``connect``); PolicyServerError
    when it cannot connect, ValueError for a scheme no client speaks."""
    return kind_for(url).connect(url, timeout, max_reply_bytes=max_reply_bytes, **settings)


def frame_transform(view: str, url: str | None = None) -> Callable[[Any], Any] | None:
    """What the policy ``url`` selects (None: the local server's protocol) is shown of an upright frame from
    ``view``, as its client sends it; None where its protocol has no per-frame part (the adapter does it all)."""
    kind = kind_for(url) if url else _LOADERS[LOCAL_SCHEME]()
    shown = kind.frame_input
    return None if shown is None else lambda rgb: shown(rgb, view)


def local_url(port: int, host: str = LOOPBACK) -> str:
    """The URL of the local policy server (policy_node.serve) on ``port``."""
    return f"{LOCAL_SCHEME}://{host}:{port}"


def _openpi_ws() -> ClientKind:
    from policy_node.clients.openpi_ws import KIND

    return KIND


register(("ws", "wss"), _openpi_ws)
