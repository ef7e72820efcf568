"""Bounds on the console's connections: per client, in total, and a deadline for each request, so that a flood of
sockets can neither use up the process's file descriptors nor stand between the operator and HOLD.

Why not uvicorn's settings alone: ``limit_concurrency`` counts idle connections and answers the next *request*
with 503, so a flood of idle sockets would make the console refuse the HOLD, not the flood; ``timeout_keep_alive``
starts only after a first response, so a socket that never sends a request (or sends one a byte at a time) stays
open for ever; and nothing bounds one client. Here a new connection beyond a bound displaces the open one that
least needs to stay: a connection the console owes nothing (it is waiting for a request), the flooding client's
and the oldest first, else the oldest websocket stream (the page reopens it). A request being answered is never
cut; the new connection is closed at once only when every other one is such a request.

The descriptors: every connection holds one, in a process whose DDS participant opens sockets and shared-memory
files of its own as it meets other processes. At start the console makes sure the open-file limit leaves room for
all its connections and :data:`FD_RESERVE` more, raising the soft limit (never past the hard one) if it must.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import resource
from collections.abc import Callable, Hashable
from typing import Any, Final

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_PER_CLIENT: Final = 64  # a browser opens 6 HTTP connections to a host, and a console tab holds 3 websockets
MAX_TOTAL: Final = 256
REQUEST_TIMEOUT_S: Final = 5  # from opening (or the last answer) to a whole request head; uvicorn's keep-alive too
ACCEPT_BACKLOG: Final = 64  # asyncio accepts up to this many per turn of its loop, before the table sees one
IN_FLIGHT: Final = 4 * ACCEPT_BACKLOG  # accepted, not yet in the table or displaced and not yet closed
FD_RESERVE: Final = 256  # descriptors left to the rest of the process (DDS sockets and shared memory, logs, files)
REPORT_PERIOD_S: Final = 10.0  # at most one log line this often about connections past the bounds

WAITING, STREAM, REQUEST = 0, 1, 2  # what a connection is doing; the lower, the sooner it is displaced


class ConnectionTable:
    """Which connections are open, from whom, doing what; and which to close when one more comes. Connections are
    any hashable handles (the transports), each reported closed by :meth:`close`, but for websocket streams:
    their end is no longer the HTTP protocol's to see, so ``is_closed`` is asked about them whenever one comes.
    Every step costs the number of clients, not of connections: a flood must not make each of its own
    connections dearer."""

    def __init__(self, per_client: int = MAX_PER_CLIENT, total: int = MAX_TOTAL,
                 is_closed: Callable[[Any], bool] = lambda conn: False) -> None:  # fmt: skip
        if per_client < 1 or total < 1:
            raise ValueError(f"connection bounds must be positive (per client {per_client}, total {total})")
        self.per_client, self.total = per_client, total
        self._is_closed = is_closed
        self._where: dict[Hashable, tuple[str, int]] = {}  # conn -> (client, state)
        self._clients: dict[str, tuple[dict[Hashable, int], ...]] = {}  # per state: conn -> order, oldest first
        self._order = itertools.count()
        self.displaced = self.refused = self.timed_out = 0
        self._reported, self._next_report = 0, 0.0

    def __len__(self) -> int:
        return len(self._where)

    def clients(self) -> dict[str, int]:
        return {client: self._count(client) for client in self._clients}

    def _count(self, client: str) -> int:
        return sum(len(by_state) for by_state in self._clients.get(client, ()))

    def open(self, conn: Hashable, client: str) -> list[Hashable]:
        """Take ``conn`` in; the connections to close now: the one it displaces, or ``[conn]`` itself when every
        connection in its way is a request being answered."""
        for _, streams, _ in list(self._clients.values()):
            for gone in [c for c in streams if self._is_closed(c)]:
                self.close(gone)
        victim: Hashable | None = None
        if self._count(client) >= self.per_client:
            victim = self._victim([client])
        elif len(self._where) >= self.total:
            victim = self._victim(list(self._clients))
        else:
            self._add(conn, client)
            return []
        if victim is None:
            self.refused += 1
            return [conn]
        self.close(victim)
        self.displaced += 1
        self._add(conn, client)
        return [victim]

    def crowding(self, now: float) -> str | None:
        """What to say (at most every :data:`REPORT_PERIOD_S`) when connections came past the bounds since the
        last time: the operator should know of a flood."""
        if self.displaced + self.refused <= self._reported or now < self._next_report:
            return None
        self._reported, self._next_report = self.displaced + self.refused, now + REPORT_PERIOD_S
        return (f"more connections than the console's bounds ({self.per_client} a client, {self.total} in all): "
                f"{self.displaced} displaced, {self.refused} refused so far (docs/console.md, \"Connections\")")

    def _victim(self, clients: list[str]) -> Hashable | None:
        """A connection waiting for a request before a stream; the biggest client's, then the oldest."""
        for state in (WAITING, STREAM):
            best: tuple[tuple[int, int], Hashable] | None = None
            for client in clients:
                by_state = self._clients[client][state]
                if by_state:
                    oldest = next(iter(by_state))
                    key = (-self._count(client), by_state[oldest])
                    if best is None or key < best[0]:
                        best = (key, oldest)
            if best is not None:
                return best[1]
        return None

    def _add(self, conn: Hashable, client: str, state: int = WAITING) -> None:
        self._where[conn] = (client, state)
        self._clients.setdefault(client, ({}, {}, {}))[state][conn] = next(self._order)

    def mark(self, conn: Hashable, state: int) -> None:
        where = self._where.get(conn)
        if where is not None and where[1] != state:
            self.close(conn)
            self._add(conn, where[0], state)

    def close(self, conn: Hashable) -> None:
        where = self._where.pop(conn, None)
        if where is None:
            return
        client, state = where
        by_state = self._clients[client]
        del by_state[state][conn]
        if not any(by_state):
            del self._clients[client]


class GuardedH11Protocol(H11Protocol):
    """uvicorn's HTTP/1.1 protocol under a :class:`ConnectionTable`, with a deadline for every request head."""

    def __init__(self, *args: Any, table: ConnectionTable, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._table = table
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        peer = transport.get_extra_info("peername")
        for conn in self._table.open(transport, str(peer[0]) if peer else "?"):
            conn.close()
        if said := self._table.crowding(self.loop.time()):
            self.logger.warning(said)  # uvicorn's error log: the node's own output
        self._follow()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._table.close(self.transport)
        super().connection_lost(exc)

    def _follow(self) -> None:
        """Note what the connection does now; a connection the console owes nothing has until the deadline to
        send a whole request."""
        if self.transport.is_closing():
            return
        if self.transport.get_protocol() is not self:  # upgraded: the websocket protocol has it now
            self._cancel_deadline()
            self._table.mark(self.transport, STREAM)
        elif self.cycle is not None and not self.cycle.response_complete:
            self._cancel_deadline()
            self._table.mark(self.transport, REQUEST)
        elif self._deadline is None:
            self._table.mark(self.transport, WAITING)
            self._deadline = self.loop.call_later(REQUEST_TIMEOUT_S, self._no_request)

    def _no_request(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self._table.timed_out += 1
            self.transport.close()

    def _cancel_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None


def guarded_protocol(table: ConnectionTable) -> Callable[..., GuardedH11Protocol]:
    """What uvicorn's ``Config(http=...)`` makes each connection's protocol with."""
    return functools.partial(GuardedH11Protocol, table=table)


def reserve_descriptors(connections: int, reserve: int = FD_RESERVE) -> None:
    """Make the open-file limit hold what the process has open, ``connections`` and ``reserve`` more: raise the
    soft limit up to the hard one if needed, else refuse (OSError) with what to do."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = len(os.listdir("/proc/self/fd")) + connections + reserve
    if soft == resource.RLIM_INFINITY or soft >= need:
        return
    if hard != resource.RLIM_INFINITY and hard < need:
        raise OSError(f"the console needs {need} open files (room for {connections} connections beside the "
                      f"process's own), the limit is {soft} (hard {hard}): raise it (ulimit -n {need})")  # fmt: skip
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
