"""HOLD on the operator's console beside a flood of idle connections: its latency, and what the flood costs.

``.venv/bin/python -m bench.console_flood [--holds 200] [--flood 1100]``

The console node as bring-up starts it (``python -m console.node``, its own process, at the usual soft
open-file limit of 1,024) and the arm's stop service (what HOLD calls) in a node of this process. HOLD is
pressed ``--holds`` times, 20 a second, each on a connection of its own (as a browser must when its kept-alive
one was closed), timed from connecting to the answer. Windows: no flood; beside ``--flood`` idle sockets from
one loopback address (127.0.0.2), kept at that number (a socket the console closes is opened again at once);
the same spread over nine addresses (127.0.0.2-10: past the total bound too); and beside a churn (connections
opened and dropped as fast as one thread can). For each window: HOLD p50 / p99 / max and failures, the
flood's sockets opened per second, the console's open files (peak) and its log's "Too many open files". The
target is the issue's: HOLD p99 under 100 ms beside the flood. Not a test: a missed target never fails the
run; compare windows of one run.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import fmt

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench-output" / "console_flood"
FD_LIMIT = 1024
HOLD_HZ = 20.0
P99_TARGET_MS = 100.0


class Flood:
    """``size`` idle sockets to ``port`` from ``sources`` (round robin) until :meth:`stop`. ``mode``: "waves"
    opens them, waits until the console has closed them all, and opens them again; "kept" opens one again as soon
    as the console closes one (a connection-rate flood); "churn" connects and drops as fast as it can."""

    def __init__(self, port: int, sources: list[str], size: int, mode: str = "waves") -> None:
        self.port, self.sources, self.size, self.mode = port, sources, size, mode
        self.opened = 0
        self._socks: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _connect(self) -> socket.socket | None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind((self.sources[self.opened % len(self.sources)], 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return None
        self.opened += 1
        return s

    def _run(self) -> None:
        if self.mode == "churn":
            while not self._stop.is_set():
                s = self._connect()
                if s is not None:
                    s.close()
            return
        while not self._stop.is_set():
            poller = select.poll()
            for s in self._socks:
                poller.register(s, select.POLLIN | select.POLLHUP | select.POLLERR)
            closed = {fd for fd, _ in poller.poll(0)}
            keep = []
            for s in self._socks:
                if s.fileno() in closed:
                    s.close()
                else:
                    keep.append(s)
            refill = self.mode == "kept" or not keep  # waves: only once the console has closed the last one
            while refill and len(keep) < self.size and not self._stop.is_set():
                s = self._connect()
                if s is not None:
                    keep.append(s)
            self._socks = keep
            self._stop.wait(0.05)

    def start(self) -> Flood:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for s in self._socks:
            s.close()


class FdPeak:
    """The console process's open files, sampled until :meth:`stop`."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, len(os.listdir(f"/proc/{self.pid}/fd")))

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(5)
        return self.peak


def hold(url: str) -> tuple[float, str]:
    headers = {"x-workcell-console": "1", "content-type": "application/json"}
    request = urllib.request.Request(f"{url}/api/control/hold", data=b'{"args": []}', method="POST", headers=headers)
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            body = json.loads(reply.read())
        return time.perf_counter() - t0, "ok" if body.get("ok") else f"refused: {body.get('message')}"
    except (urllib.error.URLError, OSError) as exc:
        return time.perf_counter() - t0, f"failed: {exc}"


def window(url: str, pid: int, log: Path, holds: int, flood: Flood | None) -> dict[str, Any]:
    peak = FdPeak(pid)
    errors_before = log.read_text().count("Too many open files")
    if flood is not None:
        flood.start()
        time.sleep(1.0)
    opened0, t0 = (flood.opened if flood else 0), time.monotonic()
    times: list[float] = []
    outcomes: list[str] = []
    for _ in range(holds):
        took, outcome = hold(url)
        times.append(took * 1e3)
        outcomes.append(outcome)
        time.sleep(max(0.0, 1.0 / HOLD_HZ - took))
    wall = time.monotonic() - t0
    opened = (flood.opened - opened0) if flood else 0
    if flood is not None:
        flood.stop()
    ms = np.asarray(times)
    return {"hold_ms": {"p50": float(np.percentile(ms, 50)), "p99": float(np.percentile(ms, 99)),
                        "max": float(ms.max()), "n": len(ms), "over_1s": int((ms > 1000).sum())},
            "failures": [o for o in outcomes if o != "ok"][:5], "failed": sum(o != "ok" for o in outcomes),
            "flood_opened_per_s": opened / wall, "console_fd_peak": peak.stop(),
            "too_many_open_files": log.read_text().count("Too many open files") - errors_before,
            "load": os.getloadavg()[0]}  # fmt: skip


@contextlib.contextmanager
def arm_stop_service() -> Iterator[None]:
    """The arm's stop service, answering at once, in a node of this process."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
    from std_srvs.srv import Trigger

    from libero_workcell.contract import Services

    def stop(_request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        response.success, response.message = True, "stopped"
        return response

    context = Context()
    rclpy.init(context=context)
    node = rclpy.create_node("aubo_bridge", context=context)
    node.create_service(Trigger, Services.ARM_STOP, stop)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)

    def spin() -> None:
        with contextlib.suppress(ExternalShutdownException):
            executor.spin()

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    try:
        yield
    finally:
        executor.shutdown(2.0)
        node.destroy_node()
        context.try_shutdown()
        thread.join(5)


@contextlib.contextmanager
def console_node(log: Path, env: dict[str, str]) -> Iterator[tuple[int, str]]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    limit = FD_LIMIT if hard == resource.RLIM_INFINITY else min(FD_LIMIT, hard)
    command = [sys.executable, "-m", "console.node", "--ros-args", "-r", "__node:=console", "-p", "port:=0"]
    with open(log, "w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard)))
    try:
        deadline = time.monotonic() + 60
        while not (found := re.findall(r"console at (http://[0-9.:]+)", log.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the console did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc.pid, found[0]
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.console_flood", description=__doc__.splitlines()[0])
    ap.add_argument("--holds", type=int, default=200, help="HOLDs per window")
    ap.add_argument("--flood", type=int, default=1100, help="idle sockets kept open by the flood")
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = args.flood + 512
    if soft != resource.RLIM_INFINITY and soft < need:  # this process holds the flood's sockets
        resource.setrlimit(resource.RLIMIT_NOFILE, (need if hard == resource.RLIM_INFINITY else min(need, hard), hard))
    from libero_workcell import dds

    domain = dds.per_run_domain_id()
    dds.apply_loopback_env(domain)
    env = {**os.environ, **dds.loopback_env(domain)}
    OUT.mkdir(parents=True, exist_ok=True)
    log = OUT / "console.log"
    results: dict[str, Any] = {"holds": args.holds, "flood": args.flood, "cpus": os.cpu_count(),
                               "fd_limit": FD_LIMIT}  # fmt: skip
    with arm_stop_service(), console_node(log, env) as (pid, url):
        port = int(url.rsplit(":", 1)[1])
        deadline = time.monotonic() + 60
        while hold(url)[1] != "ok" and time.monotonic() < deadline:  # until the console's client finds the arm
            time.sleep(0.2)
        one = ["127.0.0.2"]
        nine = [f"127.0.0.{k}" for k in range(2, 11)]
        results["no_flood"] = window(url, pid, log, args.holds, None)
        results["idle_flood_one_client"] = window(url, pid, log, args.holds, Flood(port, one, args.flood))
        results["idle_flood_nine_clients"] = window(url, pid, log, args.holds, Flood(port, nine, args.flood))
        results["kept_flood_nine_clients"] = window(url, pid, log, args.holds, Flood(port, nine, args.flood, "kept"))
        results["churn"] = window(url, pid, log, args.holds, Flood(port, nine, 0, "churn"))
        results["console_warnings"] = [line for line in log.read_text().splitlines() if "WARN" in line][-3:]
    (OUT / "console_flood.json").write_text(json.dumps(results, indent=2))
    print(report(results))
    return 0


def report(r: dict[str, Any]) -> str:
    lines = [f"console flood bench: {r['holds']} HOLDs per window at {HOLD_HZ:g}/s, each on a new connection; "
             f"flood {r['flood']} idle sockets; console at an open-file limit of {r['fd_limit']}; {r['cpus']} CPUs",
             "", f"{'window':<24} {'HOLD p50 / p99 / max ms':>26} {'>1 s':>4} {'failed':>6} {'flood opens/s':>13} "
             f"{'console fds':>11} {'EMFILE':>6} {'load':>5}"]  # fmt: skip
    names = ("no_flood", "idle_flood_one_client", "idle_flood_nine_clients", "kept_flood_nine_clients", "churn")
    for name in names:
        w = r[name]
        h = w["hold_ms"]
        lines.append(f"{name:<24} {fmt(h['p50']):>8} / {fmt(h['p99']):>7} / {fmt(h['max']):>7} {h['over_1s']:>4} "
                     f"{w['failed']:>6} {w['flood_opened_per_s']:>13.0f} {w['console_fd_peak']:>11} "
                     f"{w['too_many_open_files']:>6} {w['load']:>5.1f}")  # fmt: skip
    worst = max(r[name]["hold_ms"]["p99"] for name in names[1:3])
    failed = sum(r[name]["failed"] for name in names)
    lines += ["", f"HOLD p99 beside the idle floods: {fmt(worst)} ms (target < {P99_TARGET_MS:g}), "
              f"{failed} HOLDs unanswered in all windows: {'PASS' if worst < P99_TARGET_MS and not failed else 'MISS'}",
              *(f"console: {line}" for line in r["console_warnings"]),
              f"figures: {OUT / 'console_flood.json'}"]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
