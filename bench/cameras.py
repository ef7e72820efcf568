"""Camera backend figures on the test sources: achieved fps, capture-to-slot and capture-to-reader latency.

``.venv/bin/python -m bench.cameras [--seconds 3]``. Sources are made on the
fly (a pyrealsense2 software_device recording played through rs.pipeline, an
MJPG file through cv2.VideoCapture), 640x480 at 30 fps like the cameras'
defaults. Capture time is the mapped device stamp (RealSense) or arrival
(file), so latencies are what this process adds: decode, crop/resize, slot.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import percentiles
from camera_driver.capture import ThreadedBackend, to_square_rgb
from camera_driver.realsense.backend import RealSenseBackend
from camera_driver.realsense.config import RealSenseConfig
from camera_driver.uvc.backend import UvcBackend
from camera_driver.uvc.config import UvcConfig

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures"))
from camera_fixtures import make_realsense_recording, make_video


def resize_cost_ms(w: int, h: int, n: int = 200) -> dict[str, float]:
    img = np.random.default_rng(0).integers(0, 255, (h, w, 3), dtype=np.uint8)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        to_square_rgb(img, bgr=True)
        out.append((time.perf_counter() - t0) * 1e3)
    return percentiles(out)


def run_backend(backend: ThreadedBackend, seconds: float) -> dict[str, object]:
    """Poll at 1 kHz like a fast reader; per new frame: reader-side age and the thread's capture-to-slot."""
    ages, slot, stamps = [], [], []
    last = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if backend.latest_index() != last:
            f = backend.latest()
            if f is not None and f.index != last:
                ages.append((time.time() - f.wall_time) * 1e3)
                slot.append(backend.capture.latency * 1e3)
                stamps.append(f.wall_time)
                last = f.index
        time.sleep(0.001)
    backend.close()
    fps = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
    return {"frames": len(stamps), "fps": fps, "slot_ms": percentiles(slot), "reader_ms": percentiles(ages)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=3.0)
    args = ap.parse_args()
    n = int(30 * args.seconds)
    rows: list[tuple[str, str]] = []
    for w, h in ((640, 480), (1280, 720)):
        r = resize_cost_ms(w, h)
        rows.append((f"to_square_rgb {w}x{h} BGR->256 RGB", f"p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms"))
    with tempfile.TemporaryDirectory() as tmp:
        rec = make_realsense_recording(Path(tmp) / "rs.db3", n_frames=n, width=640, height=480, fps=30)
        vid = make_video(Path(tmp) / "uvc.avi", n_frames=n, width=640, height=480, fps=30.0)
        backends: list[tuple[str, ThreadedBackend]] = [
            ("realsense playback", RealSenseBackend("wrist", RealSenseConfig(playback_file=str(rec)))),
            ("uvc MJPG file", UvcBackend("external", UvcConfig(device=str(vid)))),
        ]
        for label, backend in backends:
            r = run_backend(backend, args.seconds * 0.95)
            s, a = r["slot_ms"], r["reader_ms"]
            rows.append(
                (
                    f"{label} 640x480@30",
                    f"{r['frames']} frames, {r['fps']:.1f} fps; capture->slot p50 {s['p50']:.2f} p99 {s['p99']:.2f} ms;"
                    f" capture->reader p50 {a['p50']:.2f} p99 {a['p99']:.2f} ms",
                )
            )
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


if __name__ == "__main__":
    main()
