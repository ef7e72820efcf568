"""Loopback sockets: the one address every server of this stack binds by default, and a free port on it."""

from __future__ import annotations

import socket
from typing import Final

LOOPBACK: Final = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (for a server started right after)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
