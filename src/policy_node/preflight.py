"""What ``workcell check`` checks for policy_node (libero_workcell.preflight): the policy server it will query.

The server's HTTP health check answers 200 (a protocol that has one: openpi-server's ``GET /healthz``), and a
connection of the client ``policy.url`` selects (policy_node.clients) gets the server's metadata within
``policy.timeout``; nothing is inferred. On the physical cell a missing ``policy.task`` is a
warning: ``/policy/start`` is refused until one is set.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from libero_workcell import faults
from libero_workcell.cell_file import redact_text
from libero_workcell.contract import Params
from libero_workcell.preflight import FAIL, OK, SKIP, WARN, Check, Context
from policy_node.clients import kind_for
from policy_node.config import TASK_PARAM, PolicyConfig
from policy_node.protocol import ClientKind, PolicyServerError

LOCAL_SERVER_NODE = "policy_server"  # the graph's own server (policy_local_server:=true), up only with the graph


def check(node: str, params: Mapping[str, Any], ctx: Context) -> list[Check]:
    url = str(params.get("policy.url", PolicyConfig.url))
    timeout = max(float(params.get("policy.timeout", PolicyConfig.timeout)), 2.0)  # no control loop waits here
    out: list[Check] = []
    if not params.get(Params.USE_SIM, True) and not str(params.get(TASK_PARAM, "")):
        out.append(Check(node, "task", WARN, "no policy.task: `/policy/start` is refused until there is one",
                         faults.BY_CODE["POLICY-NO-TASK"].recovery))  # fmt: skip
    what = f"policy server {redact_text(url)}"  # (a report is printed: never the URL's credentials)
    if LOCAL_SERVER_NODE in ctx.nodes:
        return [*out, Check(node, what, SKIP, f"the graph starts its own ({LOCAL_SERVER_NODE}, policy_local_server)")]
    todo = faults.BY_CODE["POLICY-NO-SERVER"].recovery
    try:
        kind = kind_for(url)
    except ValueError as exc:
        return [*out, Check(node, what, FAIL, str(exc), todo)]
    if kind.health_url is None:
        return [*out, _metadata(node, what, url, timeout, todo, kind)]
    health = kind.health_url(url)
    try:
        with urllib.request.urlopen(health, timeout=timeout) as reply:
            status = reply.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (OSError, ValueError) as exc:  # (http.client.InvalidURL is a ValueError)
        return [*out, Check(node, what, FAIL, redact_text(f"GET {health}: {exc}"), todo)]
    if status != 200:
        return [*out, Check(node, what, FAIL, redact_text(f"GET {health} answered {status}, not 200 (not an "
                                                          f"{kind.name} server?)"), todo)]  # fmt: skip
    return [*out, _metadata(node, what, url, timeout, todo, kind)]


def _metadata(node: str, what: str, url: str, timeout: float, todo: str, kind: ClientKind) -> Check:
    try:
        client = kind.connect(url, timeout)
    except PolicyServerError as exc:
        healthy = "its health check answered, but " if kind.health_url is not None else ""
        return Check(node, what, FAIL, redact_text(f"{healthy}the {kind.name} client did not connect: {exc}"), todo)
    try:
        metadata = client.metadata
    finally:
        client.close()
    shown = ", ".join(f"{k} {v!r}" for k, v in list(metadata.items())[:6]) if isinstance(metadata, dict) else \
        repr(metadata)  # fmt: skip
    return Check(node, what, OK, f"healthy; metadata: {shown or 'empty'}")
