"""The local policy server: openpi-server's ``WebsocketPolicyServer`` serving a built-in policy.

``python -m policy_node.serve [--port 8000] [--policy reach] [--target X Y Z] [--delay-ms 0]
[--fault nan|shape|missing|raise --fault-after N] [--host 127.0.0.1]`` serves until SIGINT / SIGTERM
(``--policy reach-rtc [--noise 0.1]``: reach as a sampled policy that does real-time chunking with
``prev_actions`` / ``inference_delay``, policy_node.builtin_policies.SampledReachPolicy).
It binds 127.0.0.1 unless ``--host`` says otherwise (openpi's own default is 0.0.0.0: every interface). In Python,
:class:`LocalPolicyServer` runs one in a thread, for tests and for the sim workcell's launch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence

from openpi_client.base_policy import BasePolicy
from openpi_server import WebsocketPolicyServer

from libero_workcell.loopback import LOOPBACK, free_port
from policy_node.builtin_policies import FAULTS, SAMPLE_NOISE_DEFAULT, FaultyPolicy, ReachPolicy, SampledReachPolicy
from policy_node.clients import local_url

REACH_TARGET_DEFAULT = (0.45, 0.0, 0.35)  # m, base frame: above the belt, in the workspace


def healthy(host: str, port: int, timeout: float = 0.5) -> bool:
    """openpi-server's ``GET /healthz`` answered 200."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=timeout) as r:
            return r.status == 200
    except OSError:
        return False


class LocalPolicyServer:
    """A WebsocketPolicyServer on its own event loop in a thread; ``stop()`` ends it and its connections."""

    def __init__(self, policy: BasePolicy, host: str = LOOPBACK, port: int = 0, metadata: dict | None = None) -> None:
        self.host = host
        self.port = port or free_port(host)
        self._server = WebsocketPolicyServer(policy, host, self.port, metadata or {})
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._run, name=f"policy-server-{self.port}", daemon=True)

    @property
    def url(self) -> str:
        return local_url(self.port, self.host)

    def start(self, timeout: float = 10.0) -> LocalPolicyServer:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not healthy(self.host, self.port):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError(f"the policy server did not come up on {self.url}")
            time.sleep(0.02)
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._task = loop.create_task(self._server.run())
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(self._task)
        loop.close()

    def stop(self) -> None:
        """End the server and its connections (again: nothing)."""
        if self._loop is not None and self._task is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self._loop.call_soon_threadsafe(self._task.cancel)
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def __enter__(self) -> LocalPolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def make_policy(args: argparse.Namespace) -> BasePolicy:
    policy: BasePolicy
    if args.policy == "reach-rtc":
        policy = SampledReachPolicy(args.target, args.horizon, args.delay_ms, noise=args.noise)
    else:
        policy = ReachPolicy(args.target, args.horizon, args.delay_ms)
    if args.fault:
        policy = FaultyPolicy(policy, args.fault, args.fault_after)
    return policy


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m policy_node.serve", description=__doc__.splitlines()[0])
    ap.add_argument("--host", default=LOOPBACK, help="interface to bind (default: loopback only)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--policy", choices=("reach", "reach-rtc"), default="reach")
    ap.add_argument("--noise", type=float, default=SAMPLE_NOISE_DEFAULT, help="reach-rtc: spread of its samples")
    ap.add_argument("--target", type=float, nargs=3, default=REACH_TARGET_DEFAULT, metavar=("X", "Y", "Z"))
    ap.add_argument("--horizon", type=int, default=10, help="actions per chunk (pi05_libero: 10)")
    ap.add_argument("--delay-ms", type=float, default=0.0, help="inference time to spend per request")
    ap.add_argument("--fault", choices=FAULTS, default=None)
    ap.add_argument("--fault-after", type=int, default=0, help="good replies before the fault starts")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="policy_server: %(message)s")
    try:
        policy = make_policy(args)
    except ValueError as exc:
        print(f"policy_server: {exc}", file=sys.stderr)
        return 2
    server = LocalPolicyServer(policy, args.host, args.port, {"policy": args.policy, "horizon": args.horizon})
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server.start()
    except RuntimeError as exc:
        print(f"policy_server: {exc} (is the port in use?)", file=sys.stderr)
        return 1
    print(f"policy_server: serving {args.policy} on {server.url} (delay {args.delay_ms:g} ms)", flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
