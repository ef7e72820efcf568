"""Policy deployment figures: overhead around inference, the action stream under slow inference.

``.venv/bin/python -m bench.policy_server [--requests 300] [--seconds 20]``:

1. observation-to-action overhead, excluding inference (targets: p99 <= 0.6 x openpi's own loop's, and
   <= 2 ms): from the control tick to a validated chunk, for policy_node's real path (frames preprocessed
   as they arrive, policy_node.observation.LatestInputs with the protocol's frame_input, as the image
   callbacks do; at the tick its snapshot, the adapter, TimedPolicyClient, parse), minus the server's own
   ``infer_ms``; next to it, in the same run and against the same server, openpi's own LIBERO client loop
   (its ``[::-1, ::-1]`` + ``image_tools.resize_with_pad`` at the tick, then ``WebsocketClientPolicy.infer``),
   measured the same way; the preprocessing on arrival is shown beside them, and the transport's floor (a plain
   websocket round trip of the images' bytes to a server process: below it no client can go);
2. the action stream at 20 Hz with prefetching under 100 ms inference (policy_node.runner against the local
   server with ``delay_ms`` 100): period error of the handed-out actions and the longest pause, next to
   the synchronous mode.

3. end-to-end latency (``--timing FILE``: of a deploy run's policy_node timing record, e.g. the deploy graph's
   ``policy_timing:=FILE``; otherwise policy_node itself at 20 Hz against a server process with 30 ms of
   inference, frames stamped as published, the action results answered as aubo_bridge's 500 Hz servo loop):
   camera exposure to the action on the wire to its first servo target, p50 / p99 / max.

Evaluation throughput is bench.scale's.

Not a test: a missed target never fails the run. The machine is small and shared: read the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from bench.common import fmt, percentiles

OVERHEAD_TARGET_MS = 2.0  # p99, absolute
OVERHEAD_TARGET_RATIO = 0.6  # p99, of openpi's own client loop's in the same run


@contextlib.contextmanager
def server_process(delay_ms: float = 0.0) -> Iterator[tuple[str, int]]:
    """``python -m policy_node.serve`` (the reach policy) in its own process, as a deployed server is on its own
    machine: its work never takes the client's GIL. (host, port); ended on exit."""
    from libero_workcell.loopback import LOOPBACK, free_port
    from policy_node.serve import healthy

    port = free_port(LOOPBACK)
    proc = subprocess.Popen([sys.executable, "-m", "policy_node.serve", "--port", str(port), "--delay-ms",
                             str(delay_ms)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while not healthy(LOOPBACK, port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the policy server process did not come up")
            time.sleep(0.05)
        yield LOOPBACK, port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


# A websocket server in its own process that answers every message with a reply the size of a chunk's frame:
# the transport's own round trip, with no msgpack and no policy server around it.
_ECHO_SERVER = """
import sys
from websockets.sync.server import serve
def answer(ws):
    for _ in ws:
        ws.send(bytes(400))
with serve(answer, sys.argv[1], 0, compression=None, max_size=None) as server:
    print(server.socket.getsockname()[1], flush=True)
    server.serve_forever()
"""


def transport_floor(requests: int, payload_bytes: int, warmup: int = 20) -> dict[str, float]:
    """The plain websocket round trip (websockets' sync client, as openpi's, to a server process) of a request
    of ``payload_bytes``: what no client can go below on this machine."""
    from websockets.sync.client import connect

    from libero_workcell.loopback import LOOPBACK

    proc = subprocess.Popen([sys.executable, "-c", _ECHO_SERVER, LOOPBACK], stdout=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        payload = bytes(payload_bytes)
        times = []
        with connect(f"ws://{LOOPBACK}:{port}", compression=None, max_size=None) as ws:
            for _ in range(warmup + requests):
                t0 = time.perf_counter()
                ws.send(payload)
                ws.recv()
                times.append((time.perf_counter() - t0) * 1e3)
        return percentiles(times[warmup:])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def overhead(requests: int, warmup: int = 20) -> None:
    from openpi_client import image_tools
    from openpi_client.websocket_client_policy import WebsocketClientPolicy

    from libero_workcell.contract import CAMERA_NAMES
    from policy_node.clients import kind_for, local_url
    from policy_node.clients.openpi_ws.adapter import openpi_observation
    from policy_node.clients.openpi_ws.client import TimedPolicyClient
    from policy_node.observation import LatestInputs

    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 255, (256, 256, 3), dtype=np.uint8) for _ in range(8)]
    state = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
    ours, theirs, arrival, wire = [], [], [], []
    with server_process() as (host, port):
        url = local_url(port, host)
        client = TimedPolicyClient(url, timeout=2.0)
        openpi = WebsocketClientPolicy(host, port)
        # policy_node's path: its LatestInputs, fed as its image callbacks feed it (each frame preprocessed on
        # arrival, the protocol's frame_input), then at the tick the snapshot, the adapter, the client
        inputs = LatestInputs(CAMERA_NAMES, kind_for(url).frame_input, "libero")
        for k in range(warmup + requests):
            img, wrist = frames[k % 8], frames[(k + 3) % 8]
            now = time.time()
            t0 = time.perf_counter()  # the frames arrive (image callbacks): off the tick
            inputs.put_state(now, state)
            inputs.put_frame("external", inputs.frame(now, img))
            inputs.put_frame("wrist", inputs.frame(now, wrist))
            arrival.append((time.perf_counter() - t0) * 1e3)
            t0 = time.perf_counter()  # the control tick
            obs = openpi_observation(inputs.snapshot(), "libero", "contract", "pick")
            reply = client.infer_reply(obs)
            ours.append((time.perf_counter() - t0) * 1e3 - (reply.server_infer_ms or 0.0))
            wire.append(reply.round_trip_ms - (reply.server_infer_ms or 0.0))
            t0 = time.perf_counter()
            element = {  # openpi's examples/libero/main.py
                "observation/image": image_tools.convert_to_uint8(
                    image_tools.resize_with_pad(np.ascontiguousarray(img[::-1, ::-1]), 224, 224)
                ),
                "observation/wrist_image": image_tools.convert_to_uint8(
                    image_tools.resize_with_pad(np.ascontiguousarray(wrist[::-1, ::-1]), 224, 224)
                ),
                "observation/state": state.astype(np.float32),
                "prompt": "pick",
            }
            out = openpi.infer(element)
            _ = np.asarray(out["actions"])
            theirs.append((time.perf_counter() - t0) * 1e3 - float(out["server_timing"]["infer_ms"]))
        client.close()
    ours, theirs, arrival, wire = ours[warmup:], theirs[warmup:], arrival[warmup:], wire[warmup:]  # warming up
    a, b, c, w = percentiles(ours), percentiles(theirs), percentiles(arrival), percentiles(wire)
    ratio = a["p99"] / b["p99"]
    print(f"1. observation-to-action overhead, inference excluded ({requests} requests, 2 x 256x256 -> 224)")
    print(f"   policy_node (frames preprocessed on arrival, the tick assembles and sends): p50 {fmt(a['p50'])} ms, "
          f"p99 {fmt(a['p99'])} ms, max {fmt(a['max'])} ms")  # fmt: skip
    print(f"   openpi's own client loop (preprocessing at the tick):                    p50 {fmt(b['p50'])} ms, "
          f"p99 {fmt(b['p99'])} ms, max {fmt(b['max'])} ms")  # fmt: skip
    print(f"   of policy_node's, the websocket round trip (send to reply, the server's unpacking and packing, "
          f"inference excluded): p50 {fmt(w['p50'])} ms, p99 {fmt(w['p99'])} ms")
    print(f"   off the tick, in the image callbacks: p50 {fmt(c['p50'])} ms, p99 {fmt(c['p99'])} ms per pair of frames")
    f = transport_floor(requests, 2 * 224 * 224 * 3)
    print(f"   the transport's floor (a plain websocket round trip of the two images' bytes to a server process, no "
          f"msgpack, no policy server): p50 {fmt(f['p50'])} ms, p99 {fmt(f['p99'])} ms")
    print(f"   ratio of the p99s {ratio:.2f} (target <= {OVERHEAD_TARGET_RATIO:g}: "
          f"{'PASS' if ratio <= OVERHEAD_TARGET_RATIO else 'MISS'}); p99 {fmt(a['p99'])} ms (target <= "
          f"{OVERHEAD_TARGET_MS:g} ms: {'PASS' if a['p99'] <= OVERHEAD_TARGET_MS else 'MISS'})")


def stream(seconds: float) -> None:
    from policy_node.builtin_policies import ReachPolicy
    from policy_node.config import PolicyConfig
    from policy_node.observation import Snapshot
    from policy_node.runner import PolicyRunner
    from policy_node.serve import LocalPolicyServer

    img = np.zeros((256, 256, 3), np.uint8)
    state = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
    print(f"\n2. the action stream at 20 Hz, 100 ms inference ({seconds:g} s per mode)")
    with LocalPolicyServer(ReachPolicy([0.45, 0.0, 0.35], delay_ms=100)) as srv:
        for mode in ("async", "sync"):
            runner = PolicyRunner(PolicyConfig(url=srv.url, mode=mode, start_wait_steps=0))
            deadline = time.monotonic() + 5
            while not runner.connected and time.monotonic() < deadline:
                time.sleep(0.02)
            times, t0, n = [], time.perf_counter(), int(seconds * 20)
            for k in range(n):
                now = time.time()
                rec = runner.step(Snapshot(state, now, img, now, img, now), "pick")
                if rec.action is not None:
                    times.append(time.perf_counter())
                time.sleep(max(0.0, t0 + (k + 1) / 20 - time.perf_counter()))
            runner.close()
            gaps = np.diff(times) * 1e3
            err = percentiles(np.abs(gaps - 50.0))
            print(
                f"   {mode:<5}: {len(times)}/{n} steps with an action; period error p50 {fmt(err['p50'])} ms, "
                f"p99 {fmt(err['p99'])} ms; longest gap {fmt(gaps.max() if gaps.size else float('nan'), 0)} ms "
                f"({'target <= 75 ms' if mode == 'async' else 'openpi stands still while it infers'})"
            )


def e2e_summary(rows: list[dict]) -> None:
    """End-to-end latency of the steps that carried a policy action (policy_node's timing record): camera
    exposure to the action on the wire to its first servo target."""
    joined = [r for r in rows if r.get("kind") == "chunk" and r.get("servo_t") is not None
              and r.get("exposure_t") is not None]  # fmt: skip
    chunked = sum(r.get("kind") == "chunk" for r in rows)
    parts = {
        "exposure -> first servo target (e2e_ms)": [r["e2e_ms"] for r in joined],
        "exposure -> action on the wire": [(r["sent_t"] - r["exposure_t"]) * 1e3 for r in joined],
        "on the wire -> first servo target": [(r["servo_t"] - r["sent_t"]) * 1e3 for r in joined],
    }
    print(f"   {len(joined)} of {chunked} policy actions joined to their action result")
    for name, values in parts.items():
        p = percentiles(values)
        print(f"   {name:<42} p50 {fmt(p['p50'], 1)} ms, p99 {fmt(p['p99'], 1)} ms, max {fmt(p['max'], 1)} ms")


def end_to_end(seconds: float, delay_ms: float = 30.0) -> list[dict]:
    """policy_node itself (rclpy, its real client, frames preprocessed on arrival) against a server process
    with ``delay_ms`` of inference, fed 256x256 frames at 20 Hz stamped when they are published (a camera whose
    exposure is its publication), the action results answered as aubo_bridge's servo loop at 500 Hz in this
    process would (``servo_time``: the next 2 ms deadline after the action came). Its timing record's rows."""
    import tempfile
    from pathlib import Path

    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from sensor_msgs.msg import Image, JointState
    from std_msgs.msg import String

    from libero_workcell import ros_msgs
    from libero_workcell.contract import CAMERA_NAMES, Qos, Topics
    from libero_workcell.ros_qos import qos
    from policy_node.clients import local_url
    from policy_node.node import PolicyNode

    servo_ns = 2_000_000
    with server_process(delay_ms) as (host, port), tempfile.TemporaryDirectory() as tmp:
        timing = Path(tmp) / "timing.jsonl"
        rclpy.init(args=["--ros-args", "-p", f"policy.url:={local_url(port, host)}", "-p", "policy.task:=pick",
                         "-p", "policy.start_wait_steps:=0", "-p", f"timing_path:={timing}"])  # fmt: skip
        node, feeder = PolicyNode(), rclpy.create_node("e2e_feeder")
        try:
            pub_state = feeder.create_publisher(JointState, Topics.ROBOT_STATE, qos(Qos.STATE))
            pub_img = {c: feeder.create_publisher(Image, Topics.image(c), qos(Qos.SENSOR)) for c in CAMERA_NAMES}
            pub_result = feeder.create_publisher(String, Topics.ACTION_RESULT, qos(Qos.COMMAND))

            def on_action(msg: JointState) -> None:
                now = time.time_ns()
                servo = ros_msgs.stamp_from_ns((now // servo_ns + 1) * servo_ns)
                values, source, _turn = ros_msgs.action_from_msg(msg)
                pub_result.publish(ros_msgs.action_result_msg(msg.header.stamp, source, True, "ok", 0, values, servo))

            feeder.create_subscription(JointState, Topics.ACTION, on_action, qos(Qos.COMMAND))
            ex = SingleThreadedExecutor()
            ex.add_node(node)
            ex.add_node(feeder)
            state = np.array([0.40, 0.05, 0.30, np.pi, 0.0, 0.0, 0.0])
            frames = [np.random.default_rng(k).integers(0, 255, (256, 256, 3), dtype=np.uint8) for k in range(4)]
            end, next_feed, k = time.monotonic() + seconds, 0.0, 0
            while time.monotonic() < end:
                if time.monotonic() >= next_feed:
                    t = time.time()
                    pub_state.publish(ros_msgs.state_msg(state, t))
                    for c in CAMERA_NAMES:
                        pub_img[c].publish(ros_msgs.image_msg(frames[k % 4], t, c))
                    next_feed, k = time.monotonic() + 0.05, k + 1
                ex.spin_once(timeout_sec=0.002)
            ex.shutdown()
        finally:
            node.shutdown()
            node.destroy_node()
            feeder.destroy_node()
            rclpy.try_shutdown()
        return [json.loads(line) for line in timing.read_text().splitlines()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.policy_server")
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--timing", type=Path, default=None,
                    help="summarise a deploy run's policy_node timing record (JSON lines) for 3. instead of running it")
    ap.add_argument("--only", choices=("overhead", "stream", "e2e"), default=None)
    a = ap.parse_args(argv)
    if a.only in (None, "overhead"):
        overhead(a.requests)
    if a.only in (None, "stream"):
        stream(a.seconds)
    if a.only in (None, "e2e"):
        if a.timing is not None:
            print(f"\n3. end-to-end latency in {a.timing}")
            e2e_summary([json.loads(line) for line in a.timing.read_text().splitlines() if line.strip()])
        else:
            print(f"\n3. end-to-end latency, policy_node at 20 Hz, 30 ms inference ({a.seconds:g} s; camera stamps = "
                  "publication, servo results from a 500 Hz stand-in of aubo_bridge's loop)")
            e2e_summary(end_to_end(a.seconds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
