"""What the policy runner needs from a policy server's client, whichever protocol it speaks.

The runner (policy_node.runner) talks to a server only through :class:`PolicyClient`: connect (a
:class:`Connect`), send one observation and get one validated :class:`Reply` within a deadline, say whether the
connection is still open, close. Every failure is a :class:`PolicyServerError`, so the runner's fault handling
(hold the arm, report, reconnect, back off) is the same for every protocol. What the request holds (the wire's
keys, the image transform, the state's layout) is the protocol's :class:`ObservationAdapter`. Which client and
adapter a URL selects is :mod:`policy_node.clients`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

import numpy as np

from libero_workcell.contract import ContractError
from policy_node.chunks import validate_chunk
from policy_node.observation import Snapshot

MAX_REPLY_BYTES_DEFAULT: Final = 4 * 1024 * 1024  # openpi's replies are a few KiB; the node's policy.max_reply_bytes
# actions in one chunk: pi0's is 50, 51 s at 20 Hz is more than any policy plans; refused before any is validated
MAX_CHUNK_ACTIONS: Final = 1024
# after consecutive faults of a server that answers, the wait before the next connection doubles up to this many
# reconnect periods (a server sending bad frames is not reconnected to at the control rate)
BACKOFF_MAX_PERIODS: Final = 8


class PolicyServerError(RuntimeError):
    """The server could not be reached, closed the connection, timed out or reported a failure of its own."""


class MalformedReply(PolicyServerError):  # noqa: N818 (reads as what it is)
    """A reply that is not a valid chunk of contract actions (or a request the wire cannot carry)."""


class ServerMetadataError(PolicyServerError):
    """The server answered the connection, but not with the protocol's metadata: it is reachable, and wrong."""


def reconnect_delay(period: float, faults: int) -> float:
    """s to wait before connecting again after ``faults`` consecutive faults of a reachable server (bad
    metadata, a refused reply, a failure of the client): ``period`` doubled per fault after the first, at
    most BACKOFF_MAX_PERIODS periods; 0 with none."""
    if faults <= 0:
        return 0.0
    return period * min(2 ** (faults - 1), BACKOFF_MAX_PERIODS)


@dataclass(frozen=True)
class Reply:
    actions: np.ndarray  # (H, 7), validated (use reply_from)
    round_trip_ms: float  # request sent to reply received, measured by the client
    policy_infer_ms: float | None  # the policy's own inference, if the server says
    server_infer_ms: float | None  # the server's time around it, if it says
    server_prev_total_ms: float | None
    extra: dict[str, Any] = field(default_factory=dict)


def reply_from(actions: object, round_trip_ms: float, policy_infer_ms: float | None = None,
               server_infer_ms: float | None = None, server_prev_total_ms: float | None = None) -> Reply:  # fmt: skip
    """A Reply whose actions are a valid (H, 7) chunk of contract actions; MalformedReply with the reason
    otherwise. Every client builds its replies here, so no protocol hands the runner an unchecked chunk, nor
    one longer than MAX_CHUNK_ACTIONS (validating each action costs CPU the control loop shares)."""
    shape = getattr(actions, "shape", None)
    length = shape[0] if shape else len(actions) if isinstance(actions, (list, tuple)) else None
    if length is not None and length > MAX_CHUNK_ACTIONS:
        raise MalformedReply(f"a chunk of {length} actions (at most {MAX_CHUNK_ACTIONS})")
    try:
        checked = validate_chunk(actions)
    except ContractError as exc:
        raise MalformedReply(str(exc)) from None
    return Reply(checked, round_trip_ms, policy_infer_ms, server_infer_ms, server_prev_total_ms)


@runtime_checkable
class PolicyClient(Protocol):
    """One connection to a policy server. After any error from :meth:`infer_reply` the runner looks at
    :attr:`is_open` and, when it is False, makes a new client (a protocol that cannot trust its stream after a
    fault closes it)."""

    @property
    def url(self) -> str: ...

    @property
    def metadata(self) -> dict[str, Any]:
        """What the server said about itself on connecting (shown by diagnostics and `workcell check`)."""
        ...

    @property
    def is_open(self) -> bool: ...

    def infer_reply(self, obs: Any) -> Reply:
        """One request (an adapter's output), one validated reply within the client's timeout;
        PolicyServerError (MalformedReply for a bad reply) otherwise."""
        ...

    def close(self) -> None:
        """Drop the connection; never raises (it may already be broken)."""
        ...


class Connect(Protocol):
    """Makes a connected client, or raises PolicyServerError (ServerMetadataError: reachable, but wrong)."""

    def __call__(self, url: str, timeout: float, *, max_reply_bytes: int = ...) -> PolicyClient: ...


class ObservationAdapter(Protocol):
    """The request one protocol sends for the stack's observation: the checkpoint's camera view
    (image_convention.POLICY_VIEWS) and state format (observation.STATE_FORMATS), the task and preference as
    the prompt, and in sim lockstep the observation's sim clock. With ``policy.rtc`` the runner also passes
    ``committed``: the (d, 7) actions the arm will execute while the chunk is computed (real-time chunking);
    a protocol that cannot carry them may leave the keyword out (the option then fails at the first request)."""

    def __call__(self, snap: Snapshot, view: str, state_format: str, task: str, preference: str = "", *,
                 sim_clock_ns: int | None = None, committed: Any = None) -> Any: ...  # fmt: skip


@dataclass(frozen=True)
class ClientKind:
    """One protocol as the client registry (policy_node.clients) selects it by a URL's scheme."""

    name: str  # says which protocol in errors ("openpi websocket")
    connect: Connect
    observation: ObservationAdapter
    health_url: Callable[[str], str] | None = None  # the server's HTTP health check for a URL, if it has one
    # the per-frame part of the observation (frame, view) -> what the adapter sends, made when a frame arrives
    # (policy_node.observation.FrameInput), so the control tick only assembles; None: the adapter does it all
    frame_input: Callable[[Any, str], Any] | None = None
