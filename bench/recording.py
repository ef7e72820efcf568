"""Recording figures: sustained two-camera recording at 20 and 30 Hz, save latency, CPU share, file size.

``.venv/bin/python -m bench.recording [--seconds 30] [--long]`` records, per rate, one episode of real
simulated-workcell renders (both cameras, 256 x 256 RGB, cycling through frames rendered once) plus the
state, paced by an absolute-deadline loop like the nodes' (recorder.episode_writer, the code the recorder
node runs), and prints: steps recorded against the loop's ticks (a dropped step is a tick whose add() came
too late for the next), the longest add() (the control path's cost), the save latency at episode end
(target <= 0.5 s), the process's CPU share while recording, the file size per minute, and the LeRobot
export's speed on the 20 Hz file (recorder.export_lerobot; skipped without LeRobot). ``--long`` records
10 minutes per rate. Not a test: a missed target never fails the run.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import percentiles

SAVE_TARGET_S = 0.5


def sim_frames(n: int = 40) -> dict[str, list[np.ndarray]]:
    """Real renders of the simulated workcell, both cameras, the arm moving (what a demo's images look like)."""
    from libero_workcell.task import TaskSpec
    from sim_cell.episode import make_sim_rig

    rig = make_sim_rig(TaskSpec.from_seed(0), render=True, camera_hz=0.0)
    frames: dict[str, list[np.ndarray]] = {"agentview_rgb": [], "eye_in_hand_rgb": []}
    try:
        for i in range(n):
            rig.act(np.array([0.3 * np.sin(i / 6), 0.3 * np.cos(i / 6), 0, 0, 0, 0, -1.0]), "expert", "bench")
            frames["agentview_rgb"].append(rig.world.render_camera("external"))
            frames["eye_in_hand_rgb"].append(rig.world.render_camera("wrist"))
    finally:
        rig.world.close()
    return frames


def record(hz: float, seconds: float, frames: dict[str, list[np.ndarray]], folder: Path) -> dict[str, float]:
    from recorder.episode_writer import EpisodeWriter
    from recorder.session_file import SessionFile
    from recorder.step import RecordedStep

    env_args = {"env_name": "bench", "images": "robosuite raw: upright view flipped vertically", "control_freq": hz}
    session = SessionFile(folder / f"bench_{hz:g}hz" / "demos.hdf5", {"language_instruction": "bench"}, env_args)
    writer = EpisodeWriter(session, {}, tuple(frames), control_hz=hz)
    period, ticks, late, add_ms = 1.0 / hz, round(seconds * hz), 0, []
    cpu0, wall0 = time.process_time(), time.monotonic()
    start = time.monotonic() + period
    for i in range(ticks):
        deadline = start + i * period
        delay = deadline - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        now = time.time()
        t0 = time.perf_counter()
        writer.add(RecordedStep(
            stamp=now, ee_pos=np.array([0.3, 0.0, 0.3]), ee_ori=np.array([np.pi, 0, 0]), gripper=0.0,
            joints=np.zeros(6), action=np.zeros(7), action_time=now + 0.001,
            images={k: v[i % len(v)] for k, v in frames.items()}, image_stamps=dict.fromkeys(frames, now - 0.01),
        ))  # fmt: skip
        add_ms.append((time.perf_counter() - t0) * 1e3)
        if time.monotonic() > deadline + period:
            late += 1  # this step's add() ran into the next tick: the node would have lost that tick
    cpu = (time.process_time() - cpu0) / (time.monotonic() - wall0)
    saved = writer.save()
    size = sum(p.stat().st_size for p in session.episodes_dir.iterdir()) + session.path.stat().st_size
    return {
        "hz": hz, "ticks": ticks, "recorded": saved.num_samples, "dropped": saved.dropped_steps, "late": late,
        "add_p99_ms": percentiles(add_ms)["p99"], "add_max_ms": max(add_ms), "save_s": saved.save_latency,
        "cpu_share": cpu, "mb_per_min": size / 1e6 / (seconds / 60.0),
    }  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=30.0, help="recorded per rate")
    ap.add_argument("--long", action="store_true", help="10 minutes per rate")
    args = ap.parse_args()
    seconds = 600.0 if args.long else args.seconds
    os.environ.setdefault("MUJOCO_GL", "egl")
    frames = sim_frames()
    print(f"recording: 2 x 256x256 RGB + state, {seconds:g} s per rate, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="bench_recording_") as tmp:
        results: dict[float, dict] = {}
        for hz in (20.0, 30.0):
            r = record(hz, seconds, frames, Path(tmp))
            verdict = "PASS" if r["dropped"] == 0 and r["late"] == 0 else "MISS"
            save = "PASS" if r["save_s"] <= SAVE_TARGET_S else "MISS"
            results[hz] = r
            print(f"  {hz:4.0f} Hz: {r['recorded']}/{r['ticks']} steps, {r['dropped']} dropped, {r['late']} late "
                  f"(target 0: {verdict}); add() p99 {r['add_p99_ms']:.2f} ms, max {r['add_max_ms']:.2f} ms; "
                  f"save {r['save_s']:.3f} s (target <= {SAVE_TARGET_S}: {save}); CPU {100 * r['cpu_share']:.0f} % "
                  f"of a core; {r['mb_per_min']:.0f} MB per minute")  # fmt: skip
        try:
            from recorder.export_lerobot import ExportError, export

            s = export([Path(tmp) / "bench_20hz"], Path(tmp) / "lerobot")
            frames_s = s.frames / 20.0
            print(f"  LeRobot export: {s.frames} frames ({frames_s:.0f} s of recording) in {s.seconds:.1f} s: "
                  f"{s.frames_per_second:.0f} frames/s, {frames_s / s.seconds:.1f}x real time")  # fmt: skip
        except ExportError as exc:
            print(f"  LeRobot export: skipped ({exc})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
