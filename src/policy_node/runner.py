"""The deployment loop without ROS: observation in, at most one validated action out, every control step.

:class:`PolicyRunner.step` is called at ``control_hz`` with the newest inputs. It joins chunks that came back
(policy_node.chunks: time alignment, blending, the bounded splice), decides whether to request the next one
(synchronous or prefetching), and hands out the action for this step, or None: then nothing is published and the arm
driver's watchdog holds the arm (1.5 control periods), which is how every fault ends here:

- the server is unreachable, closes the connection, times out (``timeout``), or answers with a traceback or a
  malformed reply: the queue is dropped at once, the fault is counted and kept as ``last_error``, and a new
  connection is tried every ``reconnect_period``; the loop resumes with a fresh chunk when the server is back;
- a frame the client refuses (openpi's: policy_node.clients.openpi_ws.wire; larger than ``max_reply_bytes``;
  metadata that is not the protocol's) or any failure of the client thread itself: the same, and the thread
  waits longer before each connection while the faults go on (protocol.reconnect_delay); it never ends on an
  error;
- the observation is older than ``max_obs_age`` (a stalled camera, a late state): it is never sent; what is
  queued still runs (it answered a fresh observation), then the arm holds until inputs are fresh again.

The server is reached only through policy_node.protocol: the URL's scheme selects the client and the
observation adapter that builds each request (policy_node.clients; ``ws://``: openpi's websocket). Requests run
on a worker thread (the clients are synchronous); a request carries the executed count it answers, so a late
chunk is aligned or dropped, never executed out of time. With ``policy.rtc`` a request also carries the actions
committed for the next d steps (d: :meth:`PolicyRunner.inference_delay`, measured in executed actions). Each
step's record (:class:`StepRecord`) says which action of which chunk ran and how old its observation was, or why the arm
holds (``reason``).

On the simulated workcell in lockstep (``sim``: the clock is the world's) a reply counts at a sim time of its
own: ``latency`` after its observation (0: LIBERO's protocol, the world waits for it; a fixed delay; or its
measured round trip). A step waits for a reply that is due by its time, and never uses one that is not, so
the delay each action had in steps is the one the setting says, whatever the machine's load.
"""

from __future__ import annotations

import contextlib
import math
import queue
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from libero_workcell.contract import GRIPPER_OPEN, validate_action
from policy_node.chunks import ChunkQueue, prefetch_steps
from policy_node.clients import kind_for
from policy_node.config import MODE_SYNC, SPLICE_BOUNDED, PolicyConfig
from policy_node.observation import Snapshot
from policy_node.protocol import (
    Connect,
    MalformedReply,
    PolicyClient,
    PolicyServerError,
    Reply,
    ServerMetadataError,
    reconnect_delay,
)

WAIT_ACTION = np.array([0.0] * 6 + [GRIPPER_OPEN])  # openpi's LIBERO client's start-of-episode action
RTT_WINDOW = 20  # round trips the prefetch estimate looks back over
# s a reply may take in sim lockstep with a fixed latency, where the world waits for the policy and a reply's wall
# time changes nothing: a loaded machine's slow reply must not count as a lost server (the outcome would depend on
# the load). Below the world's stall_timeout, so a server that is really gone is named first.
SIM_REPLY_TIMEOUT = 10.0


@dataclass(frozen=True)
class StepRecord:
    """One control step: what ran and why."""

    t: float  # time of the step (wall; sim time in lockstep)
    action: np.ndarray | None  # what was handed out (None: nothing; the arm holds)
    kind: str  # "chunk", "wait" (start of episode), or why nothing: "no_chunk", "server_lost", "stale_obs"
    chunk: int = -1
    index: int = -1  # in its chunk
    blended: bool = False
    obs_age_ms: float | None = None  # of the observation its chunk answered
    round_trip_ms: float | None = None  # of its chunk
    server_infer_ms: float | None = None
    queued: int = 0  # actions left after this one
    delay_steps: float | None = None  # control steps from the observation its chunk answered to this step
    reason: str = ""  # why the arm holds on a fault (server lost, stale observation, a refused reply); "" otherwise
    limited: bool = False  # the splice bound moved its pose short of the chunk's action (policy.splice: bounded)
    # when the camera frames of the observation its chunk answered were taken (the older frame's stamp: exposure,
    # the world's render time in sim; same clock as ``t``); the node adds when it went out and its first servo target
    exposure_t: float | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "action"}
        d["action"] = None if self.action is None else [float(v) for v in self.action]
        return d


class ClientFault(PolicyServerError):  # noqa: N818 (reads as what it is)
    """The client thread itself failed (an exception no handler expected); it reconnects."""


@dataclass(frozen=True)
class _Request:
    chunk: int
    requested_at: int
    obs: dict[str, Any]
    obs_age_ms: float
    t_obs: float = 0.0  # the clock's time of the observation (sim time in lockstep)
    sent: float = 0.0  # time.monotonic() when it was handed to the worker
    exposure: float | None = None  # the observation's older camera frame's stamp (Snapshot.exposure)


class PolicyRunner:
    def __init__(
        self,
        config: PolicyConfig,
        clock: Callable[[], float] = time.time,
        connect: Connect | None = None,
        sim: bool = False,
    ) -> None:
        """``connect`` makes each connection (default: the client ``config.url``'s scheme selects); the
        request is always built by that scheme's observation adapter."""
        self.config = config
        self._clock = clock
        self.sim = sim  # lockstep: replies count at their sim time (config.latency)
        # connecting and each reply; in lockstep at a fixed latency the world waits, whatever the wall time
        self.reply_timeout = max(config.timeout, SIM_REPLY_TIMEOUT) if sim and config.latency_s is not None \
            else config.timeout  # fmt: skip
        self._arrived: list[tuple[_Request, Reply | Exception]] = []  # sim: replies here, not due yet
        kind = kind_for(config.url)
        self._connect: Connect = connect or kind.connect
        self._observation = kind.observation
        # the protocol's per-frame transform (frame, view), made as frames arrive (policy_node.observation.FrameInput)
        self.frame_input = kind.frame_input
        self.queue = ChunkQueue(config.replan_steps, config.blend_old, config.splice == SPLICE_BOUNDED,
                                config.min_splice_step)  # fmt: skip
        self._delays: deque[int] = deque(maxlen=RTT_WINDOW)  # steps executed while each chunk was computed
        self._cold = True  # the next chunk is the first of a connection or episode: its delay is not counted
        self.counters: Counter[str] = Counter()
        self.last_error = ""
        self._refused = ""  # the last reply refused, until a valid chunk comes: why the arm holds meanwhile
        self._faults = 0  # consecutive faults of a reachable server (client thread): its reconnect backoff
        self._pending: _Request | None = None  # the request the client thread is answering
        self._started = 0.0  # time.monotonic() when the client thread began answering it
        # the client thread's start and hand-over of a request, and the control step's giving up on it, each as one
        self._handover = threading.Lock()
        self.metadata: dict[str, Any] | None = None
        self._requests: queue.Queue[_Request | None] = queue.Queue(maxsize=1)
        self._replies: queue.Queue[tuple[_Request, Reply | Exception]] = queue.Queue()
        self._in_flight: _Request | None = None
        self._chunk_info: dict[int, tuple] = {}  # chunk -> (obs age, rtt, infer, t_obs, exposure)
        self._rtt_ms: deque[float] = deque(maxlen=RTT_WINDOW)
        self._waited = 0
        self._client: PolicyClient | None = None
        self._connected = threading.Event()
        self._lost = threading.Event()  # the worker saw the connection fail: drop the queue
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="policy-client", daemon=True)
        self._worker.start()

    # ------------------------------------------------------------------ the control step
    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    def prefetch(self) -> int:
        """Queued actions at which the next chunk is requested (async), from the recent round trips."""
        if self.sim and self.config.latency_s is not None:  # the delay the replies count, not the machine's
            rtt = self.config.latency_s
        else:
            rtt = max(self._rtt_ms) / 1e3 if self._rtt_ms else self.config.timeout / 2
        return prefetch_steps(self.config.replan_steps, rtt / self.config.control_period, self.config.prefetch_share)

    def inference_delay(self) -> int:
        """d: the control steps a chunk requested now is expected to take to arrive, from the delays measured
        in actions executed while earlier chunks were computed (the largest of the recent ones, the first,
        cold inference excluded); before any, the round-trip estimate's."""
        if self._delays:
            return max(self._delays)
        if self.sim and self.config.latency_s is not None:
            return math.ceil(self.config.latency_s / self.config.control_period - 1e-9)
        rtt = max(self._rtt_ms) / 1e3 if self._rtt_ms else 0.0
        return math.ceil(rtt / self.config.control_period)

    def step(self, snap: Snapshot | None, task: str) -> StepRecord:
        now = self._clock()
        self._join_replies(now)
        if self._lost.is_set():
            self._lost.clear()
            self._cold = True
            if self.queue.clear():
                self.counters["dropped_on_loss"] += 1
        fresh_age = snap.age(now) if snap is not None else math.inf
        fresh = fresh_age <= self.config.max_obs_age
        waiting = self._waited < self.config.start_wait_steps
        if self._wants_request(waiting) and self.connected:
            if fresh and snap is not None:
                self._request(snap, task, fresh_age, now)
            else:
                self.counters["stale_observations"] += 1
        if self.sim:
            self._await_due(now)
        if waiting:
            self._waited += 1
            return StepRecord(now, WAIT_ACTION.copy(), "wait")
        x = self.queue.next()
        if x is None:
            kind = "server_lost" if not self.connected else ("stale_obs" if not fresh else "no_chunk")
            self.counters[f"idle_{kind}"] += 1
            return StepRecord(now, None, kind, reason=self._hold_reason(kind, fresh_age))
        validate_action(x.action)  # never hand out what was not checked (the chunk was; this is the last gate)
        age, rtt, infer, t_obs, exposure = self._chunk_info.get(x.chunk, (None,) * 5)
        self.counters["actions"] += 1
        delay = None if t_obs is None else round((now - t_obs) / self.config.control_period, 6)
        return StepRecord(now, x.action, "chunk", x.chunk, x.index, x.blended, age, rtt, infer, self.queue.remaining,
                          delay, exposure_t=exposure, limited=x.limited)  # fmt: skip

    def _hold_reason(self, kind: str, age: float) -> str:
        """Why nothing is handed out on a fault; "" while a chunk is merely on its way."""
        if kind == "server_lost":
            return self.last_error or "connecting"
        if kind == "stale_obs":
            limit = f"policy.max_obs_age {self.config.max_obs_age * 1e3:.0f} ms"
            if math.isinf(age):
                return f"no observation yet ({limit})"
            return f"observation {age * 1e3:.0f} ms old ({limit})"
        return self._refused

    def restart_episode(self) -> None:
        """A new episode: drop what is queued and wait the start steps again."""
        self.queue.clear()
        self._waited = 0
        self._cold = True

    def _wants_request(self, waiting: bool) -> bool:
        if self._in_flight is not None:
            return False
        if self.config.mode == MODE_SYNC:
            return self.queue.remaining == 0 and not waiting
        ahead = self.prefetch()
        return self.queue.remaining <= ahead and self.config.start_wait_steps - self._waited <= ahead

    def _request(self, snap: Snapshot, task: str, age: float, now: float) -> None:
        rtc = {"committed": self.queue.committed(self.inference_delay())} if self.config.rtc else {}
        obs = self._observation(snap, self.config.image_view, self.config.state_format, task,
                                self.config.preference_text, sim_clock_ns=round(now * 1e9) if self.sim else None,
                                **rtc)  # fmt: skip
        chunk, at = self.queue.request()
        req = _Request(chunk, at, obs, age * 1e3, now, time.monotonic(), snap.exposure())
        self._in_flight = req
        self._requests.put(req)

    # ---- sim lockstep: when a reply counts
    def _due_at(self, req: _Request, result: Reply | Exception) -> float:
        """The sim time at which a reply that came counts: its observation's time plus the latency (fixed, or
        its measured round trip). An error counts at once: nothing of it is executed."""
        if isinstance(result, Exception):
            return -math.inf
        latency = self.config.latency_s
        return req.t_obs + (result.round_trip_ms / 1e3 if latency is None else latency)

    def _await_due(self, now: float) -> None:
        """Wait (the world waits) for the reply in flight if it is due by ``now``: with a fixed latency when its
        time has come; with a measured one while the client thread has held it less wall time than sim time
        has passed since its observation (had it come, it would count). The measured round trip is the client
        thread's own interval, taken under the lock this wait gives up under, so a reply counts at the first
        step its round trip allows, never one later, however the threads are scheduled."""
        while (req := self._in_flight) is not None and not any(r is req for r, _ in self._arrived):
            latency = self.config.latency_s
            if latency is not None:
                if req.t_obs + latency > now + 1e-9:
                    return
                wait = self.reply_timeout + 1.0  # the worker always answers within its client's timeout
            else:  # measured: wait while the client thread has held it less wall time than its sim time budget
                with self._handover:
                    started = self._started if self._pending is req else None
                    wait = math.inf if started is None else (now - req.t_obs) - (time.monotonic() - started)
                    if wait <= 0 and self._replies.empty():
                        return  # what is handed over from now on measures more than the budget: not due by now
                if math.isinf(wait):  # not picked up yet: its interval has not begun; the worker takes it once
                    if time.monotonic() - req.sent > self.reply_timeout + 1.0:  # connected, within the timeout
                        self.counters["late_replies"] += 1
                        return
                    wait = 0.01
            try:
                self._arrived.append(self._replies.get(timeout=max(wait, 0.0)))
            except queue.Empty:
                if latency is not None:
                    self.counters["late_replies"] += 1
                    return
                continue  # measured: look again, under the handover lock
            self._join_replies(now)

    def _join_replies(self, now: float) -> None:
        while True:
            try:
                self._arrived.append(self._replies.get_nowait())
            except queue.Empty:
                break
        due = [(r, x) for r, x in self._arrived if not self.sim or self._due_at(r, x) <= now + 1e-9]
        self._arrived = [(r, x) for r, x in self._arrived if not any(r is d for d, _ in due)]
        for req, result in due:
            self._in_flight = None
            if isinstance(result, Exception):  # whatever is queued answered a server now in doubt: hold
                self.last_error = self._refused = str(result)
                if not isinstance(result, ClientFault):  # counted by the client thread (client_faults)
                    self.counters["malformed_replies" if isinstance(result, MalformedReply) else "server_errors"] += 1
                self.queue.clear()
                continue
            self._refused = ""
            self._rtt_ms.append(result.round_trip_ms)
            joined = self.queue.join(req.chunk, result.actions, req.requested_at)
            if not self._cold:
                self._delays.append(joined.dropped_past)
            self._cold = False
            self._chunk_info[req.chunk] = (req.obs_age_ms, result.round_trip_ms, result.server_infer_ms, req.t_obs,
                                           req.exposure)  # fmt: skip
            self._chunk_info.pop(req.chunk - 8, None)
            self.counters["chunks"] += 1
            if joined.queued == 0:
                self.counters["stale_chunks"] += 1

    # ------------------------------------------------------------------ the worker
    def _work(self) -> None:
        """The client thread. Whatever fails in it ends in a reported error (``last_error``, ``connected``
        False), the request it was answering answered with the error, and a reconnect after a backoff: the
        catch-all below is the last line, for what no handler expected (a bug, a MemoryError)."""
        while not self._stop.is_set():
            try:
                if not self._serve_once():
                    return
            except Exception as exc:  # the thread's top: nothing may end it
                self._fault(ClientFault(f"the policy client failed: {type(exc).__name__}: {exc}"))

    def _serve_once(self) -> bool:
        """Connect, or answer one request; False once told to end."""
        if self._client is None or not self._client.is_open:
            self._reconnect()
            return True
        try:
            req = self._requests.get(timeout=0.05)
        except queue.Empty:
            return True
        if req is None:
            return False
        with self._handover:
            self._pending = req
            self._started = time.monotonic()
        try:
            result: Reply | Exception = self._client.infer_reply(req.obs)
            self._faults = 0
        except PolicyServerError as exc:
            result = exc
            if not self._client.is_open:
                if isinstance(exc, MalformedReply):  # a frame refused unread or undecoded: the server's fault
                    self._faults += 1
                self._mark_lost(str(exc))
        with self._handover:  # see _await_due: the interval is taken and the reply handed over as one
            if self.sim and self.config.latency_s is None and isinstance(result, Reply):
                result = replace(result, round_trip_ms=(time.monotonic() - self._started) * 1e3)
            self._pending = None
            self._replies.put((req, result))
        if self._faults and self._client is None:
            self._stop.wait(reconnect_delay(self.config.reconnect_period, self._faults))
        return True

    def _fault(self, exc: ClientFault) -> None:
        """The catch-all's safe state: counted, reported, the pending request answered, the connection dropped,
        then the backoff."""
        self.counters["client_faults"] += 1
        self._faults += 1
        req, self._pending = self._pending, None
        if req is not None:
            self._replies.put((req, exc))
        self._mark_lost(str(exc))
        self._stop.wait(reconnect_delay(self.config.reconnect_period, self._faults))

    def _reconnect(self) -> None:
        if self._client is not None:
            self._mark_lost(self.last_error or "the connection closed")
        try:
            self._client = self._connect(self.config.url, self.reply_timeout,
                                         max_reply_bytes=self.config.max_reply_bytes)  # fmt: skip
        except PolicyServerError as exc:
            self._client = None
            self.last_error = str(exc)
            self.counters["connect_failures"] += 1
            if isinstance(exc, ServerMetadataError):  # it answered, with a bad frame: back off
                self._faults += 1
            self._stop.wait(max(self.config.reconnect_period,
                                reconnect_delay(self.config.reconnect_period, self._faults)))  # fmt: skip
            return
        self.metadata = self._client.metadata
        self.counters["connects"] += 1
        self._connected.set()

    def _mark_lost(self, reason: str) -> None:
        if self._connected.is_set():
            self.counters["server_lost"] += 1
        self._connected.clear()
        self._lost.set()
        self.last_error = reason
        with contextlib.suppress(queue.Empty):  # a request not sent yet answers an observation from before
            req = self._requests.get_nowait()
            if req is not None:
                self._replies.put((req, PolicyServerError(f"not sent: {reason}")))
        if self._client is not None:
            self._client.close()
            self._client = None

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(queue.Full):
            self._requests.put_nowait(None)
        self._worker.join(timeout=2.0)
        if self._client is not None:
            self._client.close()
