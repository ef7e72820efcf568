"""openpi's websocket protocol (``ws://``, ``wss://``): openpi-server, msgpack-numpy frames, LIBERO's keys.

:mod:`.client` is openpi-client's ``WebsocketClientPolicy`` with deadlines and a bound on every frame,
:mod:`.wire` decodes the server's frames without trusting them, :mod:`.adapter` builds the request openpi's
LIBERO client sends.
"""

from __future__ import annotations

import urllib.parse

from policy_node.clients.openpi_ws.adapter import camera_input, openpi_observation
from policy_node.clients.openpi_ws.client import TimedPolicyClient
from policy_node.protocol import ClientKind


def health_url(url: str) -> str:
    """openpi-server's ``GET /healthz`` beside its websocket (https for wss)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit(("https" if parts.scheme == "wss" else "http", parts.netloc, "/healthz", "", ""))


KIND = ClientKind("openpi websocket", TimedPolicyClient, openpi_observation, health_url, camera_input)
