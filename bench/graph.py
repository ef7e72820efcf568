"""Measurements through the running graph (config/workcell.yaml, started by the project's launcher).

Two graphs are started, one after the other, on this run's loopback DDS domain
and their own shared-memory link (never the default ``workcell`` link):

* ``expert``: the full sim graph with the scripted expert, the world first
  free-running (``real_time_factor:=0``), then switched to 1.0 at run time
  through the world's own parameter; gives the real-time factors, camera
  rates, the expert's action period, the servo period and the in-process
  RateLoop under load;
* ``policy``: the sim graph without the expert, ``aubo_bridge.active_source:=policy``;
  the bench publishes the actions itself: action-to-TCP latency and the
  watchdog after a stream stops.

Import only after :func:`libero_workcell.dds.apply_loopback_env` (imports rclpy).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from bench.common import percentiles, period_errors_ms
from bench.inproc import RateLoopProbe, stop_time
from bench.probe import LinkMonitor, Probe
from libero_workcell.contract import (
    ACTION_DIM,
    ACTION_POS_SCALE,
    CAMERA_NAMES,
    GRIPPER_OPEN,
    SOURCE_POLICY,
    Params,
    Services,
)
from libero_workcell.rate import RateLoop
from workcell.bringup import Graph, GraphError, NodeSpec
from workcell.launcher import NodeDiedError, RunningGraph, launch

WORLD_MODULE = "sim_cell.world_node"
ARM_MODULE = "aubo_bridge.node"
EXPERT_MODULE = "sim_cell.expert_node"
CAMERA_MODULE = "camera_driver.node"
RTF_PARAM = "real_time_factor"  # sim_world's own parameter (0 = as fast as possible)
EXPERT_ARG = "expert"  # graph argument that adds the scripted expert
ARM_DIAG_NAME = "aubo_bridge"  # DiagnosticStatus.name of the arm bridge
WARN_RE = re.compile(r"\b(WARN|WARNING|ERROR|FATAL)\b|Traceback")

_ACTIVE: list[RunningGraph] = []  # every graph started and not yet stopped (stopped at exit by run.py)


def stop_all() -> None:
    """Stop every graph still running (safety net for errors and signals)."""
    while _ACTIVE:
        running = _ACTIVE.pop()
        with contextlib.suppress(Exception):
            running.stop(timeout=3.0, term_timeout=2.0)


def node_by_module(specs: list[NodeSpec] | Graph, module: str) -> str:
    """The ROS name of the (first) node running ``module``."""
    nodes = specs.nodes if isinstance(specs, Graph) else [{"name": s.name, "module": s.module} for s in specs]
    for node in nodes:
        if node["module"] == module:
            return str(node["name"])
    raise GraphError(f"no node runs {module} in the graph")


class GraphSession:
    """Launch the graph with overrides, wait until it is up, stop it on exit (always)."""

    def __init__(self, tag: str, probe: Probe, overrides: Mapping[str, Any], env: Mapping[str, str],
                 log_dir: Path) -> None:
        self.tag = tag
        self.probe = probe
        self.graph = Graph.load()
        self.link_name = f"bench{os.getpid()}{tag}"
        # The wall-clock machinery (rate loops, the servo stream, watchdogs in wall time: what the physical cell
        # runs on) is what these figures are about: the world runs free, not in lockstep (bench.sim_time is sim time)
        self.overrides = {Params.SIM_LINK: self.link_name, Params.LOCKSTEP: False, **overrides}
        self.specs = self.graph.resolve(self.overrides)
        self.names = {s.module: s.name for s in self.specs}
        self.env = dict(env)
        self.log_dir = log_dir
        self.running: RunningGraph | None = None
        self.t_launch = math.nan
        self.startup_s = math.nan
        self.info: dict[str, Any] = {"overrides": {k: v for k, v in self.overrides.items()},
                                     "nodes": [s.name for s in self.specs]}

    def __enter__(self) -> GraphSession:
        self.probe.clear()
        self.t_launch = time.time()
        self.running = launch(self.specs, env=self.env, log_dir=self.log_dir)
        _ACTIVE.append(self.running)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.running is None:
            return
        codes = self.running.stop(timeout=5.0, term_timeout=2.0)
        with contextlib.suppress(ValueError):
            _ACTIVE.remove(self.running)
        self.info["exit_codes"] = codes
        self.info["log_warnings"] = self.scan_logs()

    def check(self) -> None:
        assert self.running is not None
        self.running.check()

    def cpu_times(self) -> dict[str, float]:
        """CPU seconds (user + system, all threads) used so far by each node and by this bench process."""
        assert self.running is not None
        out = {name: proc_cpu_seconds(pid) for name, pid in self.running.pids.items()}
        t = os.times()
        out["bench (this process)"] = t.user + t.system
        out["_wall"] = time.time()
        return out

    def sleep(self, seconds: float) -> None:
        """Sleep while watching for dead nodes."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            self.check()
            time.sleep(min(0.1, left))

    def wait_ready(self, timeout: float = 90.0) -> float:
        """Until ground truth, TCP pose, both camera streams (and expert actions) arrive and services answer."""
        p = self.probe
        t0 = self.t_launch
        need_cameras = CAMERA_MODULE in self.names
        need_actions = EXPERT_MODULE in self.names
        deadline = time.monotonic() + timeout
        missing: list[str] = []
        while time.monotonic() < deadline:
            self.check()
            missing = []
            if not p.since(p.ground_truth, t0):
                missing.append("ground truth")
            if not p.since(p.tcp, t0):
                missing.append("tcp pose")
            if need_cameras:
                missing += [f"{c} images" for c in CAMERA_NAMES if not p.since(p.images[c], t0)]
            if need_actions and not p.since(p.actions, t0):
                missing.append("expert actions")
            if not missing:
                break
            time.sleep(0.1)
        else:
            raise TimeoutError(f"graph {self.tag} not up after {timeout:.0f} s: no {', '.join(missing)}")
        from std_srvs.srv import Trigger

        for srv in (Services.SIM_RESET, Services.ARM_ENABLE, Services.ARM_STOP):
            if not p.wait_for_service(Trigger, srv, timeout=max(1.0, deadline - time.monotonic())):
                raise TimeoutError(f"graph {self.tag}: service {srv} not available")
        self.startup_s = time.time() - t0
        self.info["startup_s"] = self.startup_s
        return self.startup_s

    def fresh_episode(self) -> dict[str, Any]:
        """Stop the arm, enable it again, reset the world (new episode from t=0). The stop ends the expert's turn;
        the new episode starts its next one, on the enabled arm (docs/operator.md, "The arm and its sources")."""
        p = self.probe
        t0 = time.time()
        out: dict[str, Any] = {"stop": p.trigger(Services.ARM_STOP)}
        p.turn = 0  # the probe's own actions, too, take a new turn after it
        t1 = time.time()
        out["enable"] = p.trigger(Services.ARM_ENABLE)
        t2 = time.time()
        if not out["enable"][0]:
            raise RuntimeError(f"graph {self.tag}: arm did not enable: {out['enable'][1]}")
        out["reset"] = p.trigger(Services.SIM_RESET, timeout=30.0)
        out["call_s"] = {"stop": t1 - t0, "enable": t2 - t1, "reset": time.time() - t2}
        return out

    def scan_logs(self) -> dict[str, dict[str, Any]]:
        """Per node: number of WARN/ERROR lines and the first distinct ones."""
        out: dict[str, dict[str, Any]] = {}
        if self.running is None:
            return out
        for name in self.running.names:
            try:
                text = self.running.log_text(name)
            except Exception as exc:
                out[name] = {"error": repr(exc)}
                continue
            lines = [ln for ln in text.splitlines() if WARN_RE.search(ln)]
            distinct: list[str] = []
            seen: set[str] = set()
            for ln in lines:
                key = re.sub(r"[\d.]+", "#", ln.split("]: ", 1)[-1])[:100]
                if key not in seen:
                    seen.add(key)
                    distinct.append(ln[:300])
            out[name] = {"count": len(lines), "first": distinct[:6]}
        return out


def proc_cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return math.nan


def cpu_use(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Cores used by each process between two :meth:`GraphSession.cpu_times` snapshots, plus the total."""
    wall = b["_wall"] - a["_wall"]
    out = {k: round((b[k] - a[k]) / wall, 3) for k in a if k != "_wall" and k in b and wall > 0}
    out["total"] = round(sum(v for v in out.values() if math.isfinite(v)), 3)
    out["loadavg_1min"] = os.getloadavg()[0]
    return out


# --------------------------------------------------------------------------
# analysis helpers
# --------------------------------------------------------------------------
def rtf_window(probe: Probe, t0: float, t1: float) -> dict[str, Any]:
    """Sim seconds per wall second from /sim/ground_truth received in [t0, t1] (one episode, before done)."""
    gt = probe.since(probe.ground_truth, t0, t1)
    if not gt:
        return {"error": "no ground truth received", "n": 0}
    episode = gt[-1][3]
    gt = [g for g in gt if g[3] == episode]
    running = [g for g in gt if not g[2]]
    done_reached = len(running) < len(gt)
    if len(running) < 2:
        return {"error": "fewer than 2 ground-truth samples before done", "n": len(running)}
    recv = np.array([g[0] for g in running])
    sim = np.array([g[1] for g in running])
    windows = []
    edges = np.arange(recv[0], recv[-1], 1.0)
    for a in edges:
        sel = (recv >= a) & (recv <= a + 1.0)
        if sel.sum() >= 2:
            r, s = recv[sel], sim[sel]
            if r[-1] - r[0] > 0.5:
                windows.append((s[-1] - s[0]) / (r[-1] - r[0]))
    wall = recv[-1] - recv[0]
    return {
        "rtf": float((sim[-1] - sim[0]) / wall),
        "rtf_1s_windows": percentiles(windows, (10, 50, 90)),
        "wall_s": float(wall),
        "sim_s": float(sim[-1] - sim[0]),
        "sim_range": [float(sim[0]), float(sim[-1])],
        "t_range": [float(recv[0]), float(recv[-1])],
        "gt_samples": len(running),
        "gt_rate_hz": len(running) / wall if wall > 0 else math.nan,
        "done_reached": done_reached,
    }


def camera_rates(probe: Probe, rtf: dict[str, Any]) -> dict[str, Any]:
    """Frames received per sim second and per wall second, per camera, over the RTF window."""
    if "t_range" not in rtf:
        return {}
    t0, t1 = rtf["t_range"]
    out = {}
    for cam in CAMERA_NAMES:
        frames = probe.since(probe.images[cam], t0, t1)
        recv = np.array([f[0] for f in frames])
        stamp = np.array([f[1] for f in frames])
        out[cam] = {
            "frames": len(frames),
            "per_sim_s": len(frames) / rtf["sim_s"] if rtf["sim_s"] > 0 else math.nan,
            "per_wall_s": len(frames) / (t1 - t0) if t1 > t0 else math.nan,
            "age_at_receipt_ms": percentiles((recv - stamp) * 1e3) if len(frames) else None,
        }
    return out


def camera_published(probe: Probe, t0: float, t1: float) -> dict[str, Any]:
    """Camera nodes' own ``published`` / ``stale_reads`` counters (1 Hz diagnostics) over [t0, t1]."""
    out = {}
    for cam in CAMERA_NAMES:
        d = probe.diags(f"camera/{cam}", t0, t1)
        if len(d) >= 2:
            pub = int(d[-1].values.get("published", 0)) - int(d[0].values.get("published", 0))
            stale = int(d[-1].values.get("stale_reads", 0)) - int(d[0].values.get("stale_reads", 0))
            out[cam] = {"published": pub, "per_wall_s": pub / (d[-1].recv - d[0].recv),
                        "stale_reads": stale, "status": sorted({x.message for x in d})}
    return out


def arm_diag_summary(probe: Probe, t0: float, t1: float) -> dict[str, Any]:
    d = probe.diags(ARM_DIAG_NAME, t0, t1)
    if not d:
        return {"n": 0}
    last = d[-1].values
    first = d[0].values
    deltas = {}
    for k, v in last.items():
        if k.startswith("count_"):
            with contextlib.suppress(ValueError):
                deltas[k] = int(v) - int(first.get(k, 0))
    return {
        "n": len(d),
        "counter_deltas": deltas,
        "modes": sorted({x.values.get("mode", "") for x in d}),
        "faults": sorted({x.values.get("fault", "") for x in d} - {""}),
        "last_errors": sorted({x.values.get("last_error", "") for x in d} - {""})[:5],
        "last": last,
    }


def stale_signals(probe: Probe, t0: float, t1: float, expected_actions_hz: float | None) -> dict[str, Any]:
    """Did a stale-state check fire? Arm faults, camera 'old frame' statuses, the expert going quiet."""
    arm = arm_diag_summary(probe, t0, t1)
    cams = camera_published(probe, t0, t1)
    out: dict[str, Any] = {
        "arm_faults": arm.get("faults", []),
        "arm_modes": arm.get("modes", []),
        "camera_status": {c: v["status"] for c, v in cams.items()},
        "camera_stale_reads": {c: v["stale_reads"] for c, v in cams.items()},
    }
    if expected_actions_hz:
        acts = probe.since(probe.actions, t0, t1)
        out["expert_actions_hz"] = len(acts) / (t1 - t0) if t1 > t0 else math.nan
        stamps = np.sort([a[1] for a in acts])
        gaps = np.diff(stamps) if len(stamps) > 1 else np.zeros(0)
        out["expert_gaps_over_2_periods"] = int(np.count_nonzero(gaps > 2.0 / expected_actions_hz))
        out["expert_longest_gap_ms"] = float(gaps.max() * 1e3) if gaps.size else math.nan
    fired = bool(out["arm_faults"]) or any(v for v in out["camera_stale_reads"].values()) or any(
        s != "ok" for v in out["camera_status"].values() for s in v
    )
    if expected_actions_hz and out["expert_actions_hz"] < 0.9 * expected_actions_hz:
        fired = True
    out["fired"] = fired
    return out


def action_periods(probe: Probe, t0: float, t1: float, period: float, source: str | None = None) -> dict[str, Any]:
    acts = [a for a in probe.since(probe.actions, t0, t1) if source is None or a[2] == source]
    recv = np.array([a[0] for a in acts])
    stamp = np.array([a[1] for a in acts])
    return {
        "recv_period_error_ms": percentiles(period_errors_ms(recv, period)),
        "stamp_period_error_ms": percentiles(period_errors_ms(stamp, period)),
        "delivery_ms": percentiles((recv - stamp) * 1e3),
        "rate_hz": len(acts) / (t1 - t0) if t1 > t0 else math.nan,
    }


def rtf_switch(probe: Probe, g: GraphSession, world: str, free_for: float, observe: float) -> dict[str, Any]:
    """Switch a free-running world to real_time_factor 1.0 at run time and watch for a stall.

    A fresh episode re-anchors the world's pacing; after ``free_for`` s of free
    running the parameter is set; the longest gap between ground-truth
    messages (published ~20 Hz wall by the world thread) and the arm's
    stale-state check are then observed for ``observe`` s.
    """
    t_call = time.time()
    probe.trigger(Services.SIM_RESET, timeout=30.0)
    t_anchor = time.time()
    g.sleep(free_for)
    t_sw = time.time()
    ok, reason = probe.set_parameter(world, RTF_PARAM, 1.0)
    g.sleep(observe)
    t_end = time.time()
    gt = probe.since(probe.ground_truth, t_call, t_end)
    if gt:
        gt = [x for x in gt if x[3] == gt[-1][3]]  # the episode started by this reset
    recv = np.array([x[0] for x in gt])
    sim = np.array([x[1] for x in gt])
    before = recv <= t_sw
    out: dict[str, Any] = {"set_ok": ok, "reason": reason, "free_for_s": free_for,
                           "reset_call_s": t_anchor - t_call}
    if before.sum() >= 2:
        rtf = float((sim[before][-1] - sim[before][0]) / (recv[before][-1] - recv[before][0]))
        out["rtf_before"] = rtf
        # the world re-anchored its pacing at the reset (sim time 0): estimate that wall time from the stream
        anchor_wall = recv[0] - sim[0] / rtf
        after = recv >= t_sw - 0.1
        if after.sum() >= 2:
            gaps = np.diff(recv[after])
            i = int(np.argmax(gaps))
            out["max_gt_gap_s"] = float(gaps[i])
            out["gap_starts_after_switch_s"] = float(recv[after][i] - t_sw)
            # pacing with the new factor against the old anchor: the world sleeps off its whole lead
            out["predicted_stall_s"] = float(sim[after][i] - (recv[after][i] - anchor_wall))
    out["ground_truth_around_switch"] = [(round(float(r - t_sw), 4), round(float(x), 4))
                                         for r, x in zip(recv, sim, strict=True) if r - t_sw >= -0.3]
    arm = arm_diag_summary(probe, t_sw, t_end)
    out["arm_fault"] = arm.get("faults", [])
    out["camera_status"] = {c: v["status"] for c, v in camera_published(probe, t_sw, t_end).items()}
    return out


# --------------------------------------------------------------------------
# graph 1: full sim graph with the expert; free-running, then real time
# --------------------------------------------------------------------------
def expert_graph(probe: Probe, env: Mapping[str, str], log_dir: Path, t_free: float, t_rt: float,
                 t_servo: float, t_switchinterval: float = 0.0) -> dict[str, Any]:
    graph = Graph.load()
    world = node_by_module(graph, WORLD_MODULE)
    arm = node_by_module(graph, ARM_MODULE)
    expert = node_by_module(graph, EXPERT_MODULE)
    overrides = {EXPERT_ARG: True, f"{world}.{RTF_PARAM}": 0.0}
    res: dict[str, Any] = {}
    session = GraphSession("e", probe, overrides, env, log_dir / "expert_graph")
    res["session"] = session.info
    specs = {s.name: s for s in session.specs}
    control_hz = float(specs[expert].parameters[Params.CONTROL_HZ])
    servo_hz = float(specs[arm].parameters[Params.SERVO_HZ])
    res["control_hz"], res["servo_hz"] = control_hz, servo_hz
    with session as g:
        g.wait_ready()
        # -- free running ------------------------------------------------
        res["free_episode"] = g.fresh_episode()
        t0 = time.time()
        cpu0 = g.cpu_times()
        g.sleep(t_free)
        t1 = time.time()
        cpu1 = g.cpu_times()
        free = rtf_window(probe, t0, t1)
        free["cameras"] = camera_rates(probe, free)
        free["camera_nodes"] = camera_published(probe, t0, t1)
        free["stale"] = stale_signals(probe, t0 + 1.0, t1, control_hz)
        free["expert_actions"] = action_periods(probe, t0, t1, 1.0 / control_hz)
        free["arm_diag"] = arm_diag_summary(probe, t0, t1)
        free["cpu_cores"] = cpu_use(cpu0, cpu1)
        if "rtf" in free and free["cpu_cores"].get(world):
            free["sim_s_per_world_cpu_s"] = free["rtf"] / free["cpu_cores"][world]
        res["free"] = free
        # -- run-time switch 0 -> 1 (the world's own parameter) -------------
        res["switch"] = rtf_switch(probe, g, world, free_for=1.0, observe=3.0)
        # -- real time -----------------------------------------------------
        res["reset_fault"] = probe.trigger(Services.ARM_RESET_FAULT)  # a latched stale-state fault, if any
        res["rt_episode"] = g.fresh_episode()
        g.sleep(1.0)
        t2 = time.time()
        cpu2 = g.cpu_times()
        rate = RateLoopProbe(control_hz).start()
        sub = subprocess.Popen(
            [sys.executable, "-c", f"import json; from bench.inproc import rate_loop; "
             f"print(json.dumps(rate_loop({control_hz!r}, {t_rt!r})))"],
            cwd=str(Path(__file__).resolve().parents[1]), stdout=subprocess.PIPE, text=True,
        )
        try:
            g.sleep(t_rt)
        finally:
            loaded = rate.stop()
            try:
                out, _ = sub.communicate(timeout=10.0)
                res["rate_loop_loaded_subprocess"] = json.loads(out.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError) as exc:
                res["rate_loop_loaded_subprocess"] = {"error": repr(exc)}
            finally:
                if sub.poll() is None:
                    sub.kill()
                    sub.wait()
        t3 = time.time()
        cpu3 = g.cpu_times()
        rt = rtf_window(probe, t2, t3)
        rt["cameras"] = camera_rates(probe, rt)
        rt["camera_nodes"] = camera_published(probe, t2, t3)
        rt["stale"] = stale_signals(probe, t2, t3, control_hz)
        rt["arm_diag"] = arm_diag_summary(probe, t2, t3)
        rt["cpu_cores"] = cpu_use(cpu2, cpu3)
        if "rtf" in rt and rt["cpu_cores"].get(world):
            rt["sim_s_per_world_cpu_s"] = rt["rtf"] / rt["cpu_cores"][world]
        res["rt"] = rt
        res["rate_loop_loaded"] = loaded
        res["expert_actions"] = action_periods(probe, t2, t3, 1.0 / control_hz)
        # -- the same in-process RateLoop with a 1 ms GIL switch interval (default 5 ms) --
        if t_switchinterval > 0:
            default_si = sys.getswitchinterval()
            sys.setswitchinterval(0.001)
            rate = RateLoopProbe(control_hz).start()
            try:
                g.sleep(t_switchinterval)
            finally:
                res["rate_loop_loaded_switchinterval_1ms"] = rate.stop()
                sys.setswitchinterval(default_si)
            res["default_switchinterval_s"] = default_si
        # -- servo loop, from the servo targets on the link ----------------
        mon = LinkMonitor(g.link_name).start()
        t4 = time.time()
        try:
            g.sleep(t_servo)
        finally:
            mon.stop()
        t5 = time.time()
        periods = mon.servo_periods(t4, t5)
        res["servo_link"] = {
            "period_error_ms": percentiles(np.abs(periods - 1.0 / servo_hz) * 1e3),
            "rate_hz": len(mon.commands) / (t5 - t4),
            "monitor_error": mon.error,
        }
        time.sleep(1.1)  # one more diagnostics message
        res["servo_diag"] = arm_diag_summary(probe, t4, time.time())
    res["session"] = session.info
    return res


# --------------------------------------------------------------------------
# graph 2: no expert, the bench is the policy: latency and watchdog
# --------------------------------------------------------------------------
def _action(axis: int, value: float) -> np.ndarray:
    a = np.zeros(ACTION_DIM)
    a[axis] = value
    a[-1] = GRIPPER_OPEN  # keep the gripper as it is (open)
    return a


def _first_move(samples: list[tuple[float, ...]], t_pub: float, p0: np.ndarray, direction: np.ndarray,
                threshold: float, time_index: int, pos: slice) -> tuple[float, ...] | None:
    for s in samples:
        if s[time_index] >= t_pub and float(np.dot(np.asarray(s[pos]) - p0, direction)) > threshold:
            return s
    return None


WATCHDOG_RE = re.compile(r"no action for ([\d.]+) s")


def watchdog_from_diagnostics(probe: Probe, t0: float, t1: float) -> list[float]:
    """The driver's own "no action for X s: holding" (ms), from diagnostics where exactly one hold was added."""
    d = probe.diags(ARM_DIAG_NAME, t0, t1)
    out = []
    for a, b in itertools.pairwise(d):
        try:
            added = int(b.values.get("count_watchdog_holds", 0)) - int(a.values.get("count_watchdog_holds", 0))
        except ValueError:
            continue
        m = WATCHDOG_RE.search(b.values.get("last_error", ""))
        if added == 1 and m:
            out.append(float(m.group(1)) * 1e3)
    return out


def _wait_for_count(probe: Probe, name: str, key: str, after: float, timeout: float = 3.0) -> int | None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        d = probe.diags(name, after)
        if d and key in d[-1].values:
            return int(d[-1].values[key])
        if d:
            return 0
        time.sleep(0.05)
    return None


def policy_graph(probe: Probe, env: Mapping[str, str], log_dir: Path, n_latency: int, n_watchdog: int,
                 move_threshold: float = 0.001, step_action: float = 0.3, stream_action: float = 0.2,
                 stream_len: int = 10) -> dict[str, Any]:
    graph = Graph.load()
    arm = node_by_module(graph, ARM_MODULE)
    overrides = {f"{arm}.{Params.ACTIVE_SOURCE}": SOURCE_POLICY}
    res: dict[str, Any] = {}
    session = GraphSession("p", probe, overrides, env, log_dir / "policy_graph")
    res["session"] = session.info
    arm_params = next(s for s in session.specs if s.name == arm).parameters
    control_hz = float(arm_params[Params.CONTROL_HZ])
    res["arm_parameters"] = dict(arm_params)
    with session as g:
        g.wait_ready()
        res["episode"] = g.fresh_episode()
        mon = LinkMonitor(g.link_name).start()
        try:
            g.sleep(0.5)
            # -- 3: action -> TCP motion latency -----------------------------
            holds0 = _wait_for_count(probe, ARM_DIAG_NAME, "count_watchdog_holds", time.time() - 1.5)
            reps = []
            axis = 0
            direction = np.eye(3)[axis]
            for i in range(n_latency):
                sign = 1.0 if i % 2 == 0 else -1.0
                g.sleep(0.35)  # hold: the watchdog has fired, the arm is still
                p0 = probe.latest_tcp()
                w0 = np.array(mon.states[-1][2:5]) if mon.states else None
                t_pub = probe.publish_action(_action(axis, sign * step_action), SOURCE_POLICY)
                hit = None
                end = time.monotonic() + 1.0
                while hit is None and time.monotonic() < end and p0 is not None:
                    time.sleep(0.002)
                    hit = _first_move(probe.since(probe.tcp, t_pub), t_pub, p0, sign * direction,
                                      move_threshold, 0, slice(2, 5))
                rep: dict[str, Any] = {"sign": sign, "t_pub": t_pub}
                if hit is not None:
                    rep["recv_ms"] = (hit[0] - t_pub) * 1e3
                    rep["stamp_ms"] = (hit[1] - t_pub) * 1e3
                time.sleep(0.05)
                if w0 is not None:
                    whit = _first_move(list(mon.states), t_pub, w0, sign * direction, move_threshold, 0, slice(2, 5))
                    if whit is not None:
                        rep["world_ms"] = (whit[0] - t_pub) * 1e3
                reps.append(rep)
            res["latency_reps"] = reps
            res["latency_recv_ms"] = percentiles([r.get("recv_ms", math.nan) for r in reps])
            res["latency_stamp_ms"] = percentiles([r.get("stamp_ms", math.nan) for r in reps])
            res["latency_world_ms"] = percentiles([r.get("world_ms", math.nan) for r in reps])
            res["latency_missed"] = sum("recv_ms" not in r for r in reps)
            g.sleep(1.2)
            holds1 = _wait_for_count(probe, ARM_DIAG_NAME, "count_watchdog_holds", time.time() - 1.1)
            # -- 4: watchdog after a stream stops ------------------------------
            t_streams = time.time()
            wreps = []
            for j in range(n_watchdog):
                sign = 1.0 if j % 2 == 0 else -1.0
                g.sleep(0.3)
                loop = RateLoop(control_hz)
                t_last = math.nan
                for _ in range(stream_len):
                    loop.sleep()
                    t_last = probe.publish_action(_action(axis, sign * stream_action), SOURCE_POLICY)
                g.sleep(0.8)
                wreps.append({"sign": sign, "t_last": t_last})
            g.sleep(1.2)
            holds2 = _wait_for_count(probe, ARM_DIAG_NAME, "count_watchdog_holds", time.time() - 1.1)
            res["watchdog_diag_ms"] = percentiles(watchdog_from_diagnostics(probe, t_streams, time.time()))
        finally:
            mon.stop()
        res["arm_diag"] = arm_diag_summary(probe, g.t_launch, time.time())
    res["session"] = session.info
    # -- analysis of the streams ---------------------------------------------
    stream_speed = stream_action * ACTION_POS_SCALE * control_hz  # m/s commanded
    thr = 0.05 * stream_speed
    states = np.array(mon.states) if mon.states else np.zeros((0, 6))
    tcp = np.array(probe.tcp) if probe.tcp else np.zeros((0, 5))
    for rep in wreps:
        t_last = rep["t_last"]
        sel = (states[:, 0] >= t_last - 0.3) & (states[:, 0] <= t_last + 0.8) if len(states) else []
        if len(states) and np.count_nonzero(sel) > 10:
            t, p = states[sel, 0], states[sel, 2:5]
            t_stop, _ = stop_time(t, p, t_last, thr, window=0.01, hold_for=0.05)
            rep["world_stop_ms"] = (t_stop - t_last) * 1e3
            final = p[t >= t_last + 0.6].mean(axis=0) if np.any(t >= t_last + 0.6) else p[-1]
            far = np.linalg.norm(p - final, axis=1) > 0.001
            after = np.flatnonzero(far & (t >= t_last - 0.3))
            rep["world_settle_1mm_ms"] = (t[after[-1] + 1] - t_last) * 1e3 if len(after) and after[-1] + 1 < len(t) \
                else math.nan
            before = (t > t_last - 0.2) & (t <= t_last)
            if np.count_nonzero(before) > 2:
                rep["speed_before_mps"] = float(np.linalg.norm(p[before][-1] - p[before][0]) /
                                                max(1e-9, t[before][-1] - t[before][0]))
        sel = (tcp[:, 1] >= t_last - 0.3) & (tcp[:, 1] <= t_last + 0.8) if len(tcp) else []
        if len(tcp) and np.count_nonzero(sel) > 5:
            order = np.argsort(tcp[sel, 1])
            t, p = tcp[sel, 1][order], tcp[sel, 2:5][order]
            t_stop, _ = stop_time(t, p, t_last, thr, window=0.015, hold_for=0.06)
            rep["ros_stop_ms"] = (t_stop - t_last) * 1e3
    res["watchdog_reps"] = wreps
    res["speed_threshold_mps"] = thr
    res["stream_speed_mps"] = stream_speed
    res["world_stop_ms"] = percentiles([r.get("world_stop_ms", math.nan) for r in wreps])
    res["world_settle_1mm_ms"] = percentiles([r.get("world_settle_1mm_ms", math.nan) for r in wreps])
    res["ros_stop_ms"] = percentiles([r.get("ros_stop_ms", math.nan) for r in wreps])
    res["holds"] = {"before_latency": holds0, "after_latency": holds1, "after_streams": holds2,
                    "latency_steps": n_latency, "streams": n_watchdog}
    res["monitor_error"] = mon.error
    return res


def describe_error(exc: BaseException) -> str:
    if isinstance(exc, NodeDiedError):
        return "a node died: " + "; ".join(f"{e.name} rc={e.returncode}: {' | '.join(e.tail[-3:])}" for e in exc.exits)
    return f"{type(exc).__name__}: {exc}"
