"""Loopback sockets: the one address every server of this stack binds by default, whether an address is loopback,
and a free port on it."""

from __future__ import annotations

import ipaddress
import socket
from typing import Final

LOOPBACK: Final = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A port nothing listens on now (for a server started right after)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (127.0.0.0/8, ::1) or ``localhost``: what a server of this stack may
    bind without further protection (the console without a token, the Foxglove bridge without allow_remote)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
