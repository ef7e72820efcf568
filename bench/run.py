"""Workcell benchmarks: control-loop timing, sim real-time factor, action latency, watchdog.

Run ``.venv/bin/python -m bench.run`` (``--quick`` for a shorter run). Prints
the figures next to their targets with PASS / MISS (``info`` where the issue
sets no target) and writes ``bench-output/bench.json`` with every number and
the raw per-repetition data. A benchmark, not a test: it never fails on a
missed target (exit code 0 unless the harness itself broke).

All DDS traffic stays on loopback (:func:`libero_workcell.dds.loopback_env`)
on a per-run domain (1..100, from the pid: RTPS ports stay below the ephemeral range), and each
graph gets its own shared-memory link; every node started is stopped at the
end, also on errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: import `bench` from the repo root, not bench/'s files bare
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(_here)]
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import inproc
from bench.common import ERROR, INFO, Figure, fmt, p50_p99_text, table, verdict

REPO = Path(__file__).resolve().parents[1]
OUT_DIR = REPO / "bench-output"
PERIOD_ERR_TARGET_MS = 2.0
RTF_TARGET = 2.0
WATCHDOG_TARGET_MS = 100.0


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _git_head() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _arm_params() -> dict[str, Any]:
    from workcell.bringup import Graph

    specs = Graph.load().resolve({})
    return dict(next(s for s in specs if s.module == "aubo_bridge.node").parameters)


def _run(name: str, results: dict[str, Any], fn: Any, *args: Any, **kwargs: Any) -> None:
    """Run one measurement; an exception becomes ``results[name]["error"]`` and the run goes on."""
    t0 = time.time()
    print(f"bench: {name} ...", flush=True)
    try:
        results[name] = fn(*args, **kwargs)
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        from_graph = sys.modules.get("bench.graph")
        text = from_graph.describe_error(exc) if from_graph else f"{type(exc).__name__}: {exc}"
        results[name] = {"error": text, "traceback": traceback.format_exc()}
        print(f"bench: {name} FAILED: {text}", flush=True)
    results.setdefault("durations_s", {})[name] = round(time.time() - t0, 1)


# --------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------
def _get(d: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return None
        d = d[k]
    return d


def _period_fig(key: str, label: str, stats: dict[str, Any] | None, target: float | None = PERIOD_ERR_TARGET_MS,
                error: str | None = None) -> Figure:
    if not stats or not stats.get("n"):
        return Figure(key, label, error or "no samples", "p99 <= 2 ms" if target else "-", ERROR, {})
    if target is None:
        return Figure(key, label, p50_p99_text(stats), "-", INFO, stats)
    return Figure(key, label, p50_p99_text(stats), f"p99 <= {target:g} ms", verdict(stats["p99"] <= target), stats)


def _delay_fig(key: str, label: str, stats: dict[str, Any] | None, target: float | None,
               error: str | None = None) -> Figure:
    tgt = f"<= {target:g} ms" if target is not None else "-"
    if not stats or not stats.get("n"):
        return Figure(key, label, error or "no samples", tgt, ERROR, {})
    text = f"p50 {fmt(stats['p50'], 1)} / p99 {fmt(stats['p99'], 1)} / max {fmt(stats['max'], 1)} ms (n={stats['n']})"
    if target is None:
        return Figure(key, label, text, tgt, INFO, stats)
    return Figure(key, label, text, f"p99 {tgt}", verdict(stats["p99"] <= target), stats)


def build_figures(r: dict[str, Any]) -> list[Figure]:
    f: list[Figure] = []
    ex = r.get("expert_graph", {})
    po = r.get("policy_graph", {})
    ex_err, po_err = ex.get("error"), po.get("error")

    # 1. control-loop period error
    f.append(_period_fig("1a0", "20 Hz RateLoop period error, in-process, before any graph",
                         _get(r, "rate_loop_idle"), error=_get(r, "rate_loop_idle", "error")))
    f.append(_period_fig("1a", "  same, in-process, while the graph runs (RTF 1 + expert)",
                         _get(ex, "rate_loop_loaded"), error=ex_err))
    f.append(_period_fig("1a'", "  same window, in a separate plain process (no ROS/GIL share)",
                         _get(ex, "rate_loop_loaded_subprocess"), error=ex_err))
    f.append(_period_fig("1a''", "  next window, in-process, sys.setswitchinterval(1 ms)",
                         _get(ex, "rate_loop_loaded_switchinterval_1ms"), error=ex_err))
    f.append(_period_fig("1b", "expert actions: inter-arrival period error at a subscriber",
                         _get(ex, "expert_actions", "recv_period_error_ms"), error=ex_err))
    f.append(_period_fig("1b'", "expert actions: header-stamp period error (publisher)",
                         _get(ex, "expert_actions", "stamp_period_error_ms"), error=ex_err))
    f.append(_period_fig("1c", "aubo_bridge 100 Hz servo period error (target stamps, link)",
                         _get(ex, "servo_link", "period_error_ms"), target=None, error=ex_err))
    diag = _get(ex, "servo_diag", "last") or {}
    if diag:
        text = f"p99 {diag.get('servo_period_error_p99_ms', '?')} ms; overruns {diag.get('servo_overruns', '?')}"
        f.append(Figure("1c'", "aubo_bridge /diagnostics: servo p99; servo_overruns", text, "-",
                        INFO, dict(diag)))
    else:
        f.append(Figure("1c'", "aubo_bridge /diagnostics servo period error", ex_err or "no diagnostics", "-", ERROR))

    # 2. real-time factor
    for key, label, src in (("2a", "SimWorld RTF in-process, 2 cameras rendering @ 20 Hz", "sim_rtf_render"),):
        s = r.get(src, {})
        if "rtf" in s:
            w = s["rtf_windows"]
            f.append(Figure(key, label, f"{s['rtf']:.2f} (0.5 s windows p10 {fmt(w['p10'])} p50 {fmt(w['p50'])}); "
                            f"{s['sim_s_per_cpu_s']:.2f} sim s/CPU s; frames/sim s "
                            f"{', '.join(f'{x:.1f}' for x in s['frames_per_sim_second'])}",
                            f">= {RTF_TARGET:g}", verdict(s["rtf"] >= RTF_TARGET), s))
        else:
            f.append(Figure(key, label, s.get("error", "not run"), f">= {RTF_TARGET:g}", ERROR))
    s = r.get("sim_rtf_norender", {})
    if "rtf" in s:
        f.append(Figure("2a'", "SimWorld RTF in-process, render off (physics only)", f"{s['rtf']:.2f}", "-", INFO, s))

    free = _get(ex, "free") or {}
    if "rtf" in free:
        w = free["rtf_1s_windows"]
        f.append(Figure("2b", "graph RTF, real_time_factor:=0 (free), cameras + expert",
                        f"{free['rtf']:.2f} (1 s windows p10 {fmt(w['p10'])} p50 {fmt(w['p50'])}, "
                        f"{free['sim_s']:.1f} sim s in {free['wall_s']:.1f} s; "
                        f"{free.get('sim_s_per_world_cpu_s', math.nan):.2f} sim s/world CPU s)",
                        f">= {RTF_TARGET:g}", verdict(free["rtf"] >= RTF_TARGET), {"rtf": free["rtf"], **w}))
    else:
        f.append(Figure("2b", "graph RTF, real_time_factor:=0", free.get("error") or ex_err or "not run",
                        f">= {RTF_TARGET:g}", ERROR))
    for key, label, part in (("2b'", "  camera frames received per sim s (ext / wrist), free", free),
                             ("2c'", "  camera frames received per sim s (ext / wrist), RTF 1",
                              _get(ex, "rt") or {})):
        cams = part.get("cameras") or {}
        if cams:
            rates = [cams[c]["per_sim_s"] for c in cams]
            walls = [cams[c]["per_wall_s"] for c in cams]
            f.append(Figure(key, label, " / ".join(f"{x:.1f}" for x in rates) + "  (per wall s: "
                            + " / ".join(f"{x:.1f}" for x in walls) + ")",
                            ">= 19 (20 Hz of sim time)", verdict(all(x >= 19.0 for x in rates)), cams))
        else:
            f.append(Figure(key, label, part.get("error") or ex_err or "no data", ">= 19", ERROR))
    stale = free.get("stale")
    if stale:
        bits = []
        if stale.get("arm_faults"):
            bits.append(f"arm fault {stale['arm_faults']}")
        bad_cam = {c: v for c, v in stale.get("camera_stale_reads", {}).items() if v}
        if bad_cam:
            bits.append(f"camera stale reads {bad_cam}")
        if "expert_actions_hz" in stale:
            bits.append(f"expert {stale['expert_actions_hz']:.1f} actions/s, "
                        f"{stale['expert_gaps_over_2_periods']} gaps > 2 periods "
                        f"(longest {stale['expert_longest_gap_ms']:.0f} ms)")
        f.append(Figure("2b''", "  stale-state checks fired while free-running",
                        ("FIRED: " if stale["fired"] else "none fired; ") + "; ".join(bits), "none",
                        verdict(not stale["fired"]), stale))
    rt = _get(ex, "rt") or {}
    if "rtf" in rt:
        w = rt["rtf_1s_windows"]
        f.append(Figure("2c", "graph RTF at real_time_factor 1.0 (pacing)",
                        f"{rt['rtf']:.3f} (1 s windows p10 {fmt(w['p10'], 3)} p90 {fmt(w['p90'], 3)})",
                        "1.00 +- 0.05", verdict(abs(rt["rtf"] - 1.0) <= 0.05), {"rtf": rt["rtf"], **w}))
    else:
        f.append(Figure("2c", "graph RTF at real_time_factor 1.0", rt.get("error") or ex_err or "not run",
                        "1.00 +- 0.05", ERROR))

    sw = _get(ex, "switch") or {}
    if "max_gt_gap_s" in sw:
        fault = "; arm stale-state FAULT" if sw.get("arm_fault") else ""
        f.append(Figure("2d", "run-time switch real_time_factor 0 -> 1: world stall (ground-truth gap)",
                        f"{sw['max_gt_gap_s']:.2f} s (sim lead at switch {sw.get('predicted_stall_s', math.nan):.2f} s)"
                        f"{fault}", "< 0.1 s",
                        verdict(sw["max_gt_gap_s"] < 0.1), sw))

    # 3. action -> TCP motion latency
    f.append(_delay_fig("3", "action publish -> /aubo/tcp_pose moved > 1 mm (receipt)",
                        _get(po, "latency_recv_ms"), None, error=po_err))
    f.append(_delay_fig("3'", "  same, to that pose's header stamp (measurement)",
                        _get(po, "latency_stamp_ms"), None, error=po_err))
    f.append(_delay_fig("3''", "  same, world TCP moved > 1 mm (sim link, no ROS back)",
                        _get(po, "latency_world_ms"), None, error=po_err))

    # 4. watchdog
    wd = r.get("watchdog_sim", {})
    f.append(_delay_fig("4a", "watchdog hold after last action, in-process, sim time",
                        wd.get("watchdog_delay_ms"), WATCHDOG_TARGET_MS, error=wd.get("error")))
    f.append(_delay_fig("4a'", "graph: watchdog hold after last action (driver /diag.)",
                        _get(po, "watchdog_diag_ms"), WATCHDOG_TARGET_MS, error=po_err))
    f.append(_delay_fig("4b", "TCP stopped (<5% of 0.2 m/s) after last action, in-proc.",
                        wd.get("tcp_stop_delay_ms"), WATCHDOG_TARGET_MS, error=wd.get("error")))
    f.append(_delay_fig("4c", "graph: last action -> world TCP stopped (<5% of 0.2 m/s)",
                        _get(po, "world_stop_ms"), WATCHDOG_TARGET_MS, error=po_err))
    f.append(_delay_fig("4c'", "graph: last action -> /aubo/tcp_pose stopped (stamps)",
                        _get(po, "ros_stop_ms"), WATCHDOG_TARGET_MS, error=po_err))
    f.append(_delay_fig("4c''", "graph: last action -> world TCP within 1 mm of rest",
                        _get(po, "world_settle_1mm_ms"), None, error=po_err))
    holds = _get(po, "holds")
    if holds and None not in (holds["after_latency"], holds["after_streams"], holds["before_latency"]):
        per_stream = holds["after_streams"] - holds["after_latency"]
        per_step = holds["after_latency"] - holds["before_latency"]
        f.append(Figure("4d", "graph: count_watchdog_holds increments",
                        f"{per_stream} for {holds['streams']} streams; {per_step} for {holds['latency_steps']} steps",
                        "1 per stream / step",
                        verdict(per_stream == holds["streams"] and per_step == holds["latency_steps"]), holds))
    else:
        f.append(Figure("4d", "graph: /diagnostics count_watchdog_holds", po_err or "no diagnostics", "1 per stream",
                        ERROR, holds or {}))

    # 5. real device backends against their protocol emulators
    arcs_all = r.get("arcs_servo", {})
    arcs = arcs_all.get("hosted", arcs_all)  # the production path: the SDK in its own process
    if "servo_hz_achieved" in arcs:
        ach, tgt = arcs["servo_hz_achieved"], arcs["servo_hz_target"]
        f.append(Figure("5a", "ARCS servoJoint stream vs emulator (SDK hosted): rate",
                        f"{ach:.1f} Hz sent, {arcs['arrival_hz']:.1f} Hz arrived", f">= {tgt:g} Hz (-1%)",
                        verdict(min(ach, arcs["arrival_hz"]) >= 0.99 * tgt), arcs))
        f.append(_period_fig("5a'", "  period error as the controller receives it",
                             arcs.get("arrival_period_error_ms")))
        f.append(_period_fig("5a''", "  period error of the node's servo ticks", arcs.get("period_error_ms"), None))
        f.append(_delay_fig("5e", "  servo() in the control thread (hand-over)", arcs.get("servo_call_ms"), None))
        for key, variant, label in (("5d", "inprocess_slow_getter", "SDK in the node's process"),
                                    ("5d'", "hosted_slow_getter", "SDK hosted (production)")):
            v = arcs_all.get(variant, {})
            late = 1e3 * v.get("slow_getter_s", math.nan)
            f.append(_period_fig(key, f"  getTcpPose answered 0-{late:.0f} ms late, {label}: arrival period error",
                                 v.get("arrival_period_error_ms"), None, error=v.get("error")))
        state_hz, state_target = arcs.get("state_hz_achieved", math.nan), arcs.get("state_hz_target", math.nan)
        f.append(Figure("5b", "ARCS state polling (RPC, pushed from the SDK process): rate",
                        f"{state_hz:.1f} Hz of {state_target:g}", "-", INFO, arcs))
    else:
        f.append(Figure("5a", "ARCS servoJoint stream vs emulator", arcs.get("error", "not run"), ">= 100 Hz", ERROR))
    grip = r.get("gripper_rtt", {})
    if "round_trip_p50_ms" in grip:
        f.append(Figure("5c", "CTAG gripper write+read round trip over a pty (pymodbus)",
                        f"p50 {grip['round_trip_p50_ms']:.1f} / p99 {grip['round_trip_p99_ms']:.1f} ms "
                        f"(n={grip['round_trip_n']:.0f}); poll {grip['poll_rate_at_50hz']:.1f} Hz of 50",
                        "-", INFO, grip))
    else:
        f.append(Figure("5c", "CTAG gripper round trip", grip.get("error", "not run"), "-", ERROR))
    return [_mark_skipped(fig, r) for fig in f]


_SOURCE = {"5a": "arcs_servo", "5b": "arcs_servo", "5d": "arcs_servo", "5e": "arcs_servo", "5c": "gripper_rtt",
           "1a0": "rate_loop_idle", "2a": "sim_rtf_render", "2a'": "sim_rtf_norender", "4a": "watchdog_sim",
           "4b": "watchdog_sim", "3": "policy_graph", "4a'": "policy_graph", "4c": "policy_graph", "4d": "policy_graph"}


def _mark_skipped(fig: Figure, r: dict[str, Any]) -> Figure:
    """A figure whose measurement was not run (``--only``, or an interrupted run) says so instead of ERROR."""
    source = _SOURCE.get(fig.key) or _SOURCE.get(fig.key.rstrip("'")) or "expert_graph"
    if fig.status == ERROR and source not in r:
        fig.value, fig.status = "not run", "skip"
    return fig


# --------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="shorter windows and fewer repetitions (< 1 min)")
    parser.add_argument("--only", default="inproc,expert,policy,devices",
                        help="comma list of parts to run: inproc, expert, policy, devices (default: all)")
    parser.add_argument("--domain-id", type=int, default=None, help="ROS_DOMAIN_ID (default: 1..100 from the pid)")
    parser.add_argument("--out", default=str(OUT_DIR / "bench.json"), help="JSON output file")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    quick = args.quick

    os.environ["MUJOCO_GL"] = "egl"
    from libero_workcell import dds

    domain = args.domain_id if args.domain_id is not None else dds.per_run_domain_id()
    dds.apply_loopback_env(domain)  # before rclpy is imported anywhere in this process
    env = dds.loopback_env(domain)
    out_path = Path(args.out)
    log_dir = out_path.parent / "logs"
    signal.signal(signal.SIGTERM, _raise_interrupt)

    t_start = time.time()
    results: dict[str, Any] = {
        "mode": "quick" if quick else "full",
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "git_head": _git_head(),
        "machine": {"cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg(), "python": platform.python_version(),
                    "platform": platform.platform()},
        "ros_domain_id": domain,
        "log_dir": str(log_dir),
    }
    probe = None
    graph_mod = None
    try:
        if "inproc" in parts:
            _run("rate_loop_idle", results, inproc.rate_loop, 20.0, 3.0 if quick else 8.0)
            _run("sim_rtf_render", results, inproc.sim_rtf, 2.5 if quick else 6.0, 20.0, True)
            _run("sim_rtf_norender", results, inproc.sim_rtf, 1.5 if quick else 3.0, 20.0, False)
            _run("watchdog_sim", results, inproc.watchdog_sim_time, _arm_params())
        if "devices" in parts:
            from bench import arcs, modbus

            _run("arcs_servo", results, arcs.servo_comparison, 2.0 if quick else 5.0)
            _run("gripper_rtt", results, modbus.gripper_round_trip, 50 if quick else 200)
        if parts & {"expert", "policy"}:
            from bench import graph as graph_mod
            from bench.probe import Probe

            probe = Probe()
            if "expert" in parts:
                _run("expert_graph", results, graph_mod.expert_graph, probe, env, log_dir,
                     t_free=4.0 if quick else 10.0, t_rt=4.0 if quick else 15.0, t_servo=2.0 if quick else 5.0,
                     t_switchinterval=3.0 if quick else 8.0)
            if "policy" in parts:
                _run("policy_graph", results, graph_mod.policy_graph, probe, env, log_dir,
                     n_latency=8 if quick else 20, n_watchdog=4 if quick else 10)
    except KeyboardInterrupt:
        results["interrupted"] = True
        print("bench: interrupted; stopping every node", flush=True)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        if graph_mod is not None:
            graph_mod.stop_all()
        if probe is not None:
            probe.close()
    results["wall_s"] = round(time.time() - t_start, 1)
    results["machine"]["loadavg_at_end"] = os.getloadavg()

    figures = build_figures(results)
    results["figures"] = [fig.as_dict() for fig in figures]
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(_clean(results), indent=1, default=_json_default, allow_nan=False),
                        encoding="utf-8")
    print()
    print(f"Workcell benchmarks ({results['mode']}, {results['wall_s']:.0f} s, {os.cpu_count()} CPUs, "
          f"ROS_DOMAIN_ID {domain}, git {results['git_head']})")
    print(table(figures))
    for label, part in (("free-running", _get(results, "expert_graph", "free")),
                        ("real time", _get(results, "expert_graph", "rt"))):
        cpu = (part or {}).get("cpu_cores")
        if cpu:
            procs = ", ".join(f"{k} {v:.2f}" for k, v in cpu.items() if k not in ("total", "loadavg_1min"))
            print(f"CPU cores used, {label} window: total {cpu['total']:.2f} of {os.cpu_count()} ({procs}); "
                  f"loadavg {cpu['loadavg_1min']:.1f}")
    print(f"\nwritten: {out_path} (node logs: {log_dir})")
    return 130 if results.get("interrupted") else 0


def _clean(obj: Any) -> Any:
    """JSON-safe copy: numpy values to Python, NaN/inf to None."""
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if hasattr(obj, "tolist"):
        return _clean(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _json_default(obj: Any) -> Any:
    return str(obj)


if __name__ == "__main__":
    raise SystemExit(main())
