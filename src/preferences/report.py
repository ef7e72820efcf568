"""The preference evaluation as one page a person can read: SR/SA tables, satisfaction curves, TCP paths.

``write_report`` puts ``summary.json`` (for programs), two figures and ``report.html`` in a folder. The page is
self-contained (images as data URIs, inline CSS, no scripts), so it can be mailed, archived with a run or
opened offline; ``screenshot`` renders it with headless Chromium for a test or a CI artifact.
"""

from __future__ import annotations

import base64
import json
import math
import shutil
import subprocess
import tempfile
from collections.abc import Collection, Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from libero_workcell.contract import CONTROL_HZ_DEFAULT
from preferences.metrics import METRICS
from preferences.scoring import EpisodeScore, summarize
from preferences.trajectory import Trajectory

OK, FAIL = "#2a9d4a", "#d1495b"  # success / failure, in the figures and the page
STYLES = ("-", "--", "-.", ":")
NO_PREFERENCE = "(no preference)"  # summarize()'s name for the empty condition

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:24px 32px;color:#222}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:3px}
.overall{font-size:16px;margin:6px 0 4px}.overall b{font-size:18px}.note{color:#666;font-size:12.5px}
table{border-collapse:collapse;margin:4px 0 8px}th,td{border:1px solid #d6d6d6;padding:4px 9px;vertical-align:top}
th{background:#f1f3f5;text-align:left;font-weight:600}tr:nth-child(even) td{background:#fafbfc}
td.num{text-align:right;font-variant-numeric:tabular-nums}code{font-size:12.5px}
.ok{color:#2a9d4a;font-weight:600}.fail{color:#d1495b;font-weight:600}
img{max-width:100%;border:1px solid #e3e3e3;margin:4px 0}
"""


# ---- formatting ----------------------------------------------------------------------------------------
def _finite(x: Any) -> bool:
    return isinstance(x, (int, float, np.floating, np.integer)) and math.isfinite(float(x))


def pct(x: Any) -> str:
    """A rate as a percentage with one decimal; an em dash when undefined."""
    return f"{100.0 * float(x):.1f}%" if _finite(x) else "—"


def num(x: Any, unit: str = "") -> str:
    """A metric value with 3 significant digits and its unit."""
    return (f"{float(x):.3g}" + (f" {unit}" if unit else "")) if _finite(x) else "—"


def label(d: Any) -> str:
    """A satisfaction label d (0, 1/4, 3/4 or 1)."""
    return f"{float(d):g}" if _finite(d) else "—"


def _e(x: Any) -> str:
    return escape(str(x))


def _json_safe(obj: Any) -> Any:
    """NaN and inf as null (JSON has neither), numpy scalars as Python numbers."""
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(float(obj)) else None
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    return obj


# ---- figures -------------------------------------------------------------------------------------------
def _condition(e: EpisodeScore) -> str:
    return e.condition or NO_PREFERENCE


def _figure(w: float, h: float) -> Figure:
    """A figure drawn by Agg into files, outside pyplot: no global backend switch, nothing left open."""
    fig = Figure(figsize=(w, h))
    FigureCanvasAgg(fig)
    return fig


def _grid(n: int, ncols: int, w: float, h: float) -> tuple[Figure, list[Axes]]:
    ncols = max(1, min(ncols, n))
    nrows = max(1, math.ceil(n / ncols))
    fig = _figure(w * ncols, h * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    flat = list(axes.ravel())
    for ax in flat[n:]:
        ax.set_visible(False)
    return fig, flat


def plot_curves(path: Path, episodes: Sequence[EpisodeScore], trajectories: Mapping[str, Trajectory]) -> Path:
    """One panel per (condition, preference): every episode's satisfaction over time, green if it succeeded."""
    panels: dict[tuple[str, str], list[tuple[EpisodeScore, int]]] = {}
    for e in episodes:
        for i, s in enumerate(e.scores):
            panels.setdefault((_condition(e), s.id), []).append((e, i))
    fig, axes = _grid(max(1, len(panels)), 3, 4.4, 3.0)
    if not panels:
        axes[0].text(0.5, 0.5, "no preference conditions", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
    for ax, ((cond, pid), members) in zip(axes, sorted(panels.items()), strict=False):
        first = members[0][0].scores[members[0][1]]
        unit = _unit(first.metric)
        for k, (e, i) in enumerate(members):
            s = e.scores[i]
            traj = trajectories.get(e.name)
            hz = traj.control_hz if traj is not None else CONTROL_HZ_DEFAULT
            t = np.arange(len(s.curve)) / hz
            colour = OK if e.success else FAIL
            mark = "✓" if e.success else "✗"
            ax.plot(t, s.curve, color=colour, ls=STYLES[k % len(STYLES)], lw=1.6,
                    label=f"{e.name} {mark} d={label(s.label)}")  # fmt: skip
            ok = np.flatnonzero(np.isfinite(s.curve))
            if len(ok):  # the episode's value, where the curve ends
                ax.plot(t[ok[-1]], s.curve[ok[-1]], "o", color=colour, ms=5)
        ax.set_title(f"{pid}  ·  {cond}" if cond != pid else pid, fontsize=9.5)
        ax.set_xlabel("time [s]", fontsize=8.5)
        ax.set_ylabel(f"{first.metric}" + (f" [{unit}]" if unit else ""), fontsize=8.5)
        ax.tick_params(labelsize=8)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7.5, loc="best", framealpha=0.85)
    fig.suptitle("Satisfaction curves (green: task succeeded, red: failed; d: the preference's label)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def grip_events(grip_command: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Steps where the gripper command turns closing (grasp) and opening again (release): > 0 closes."""
    closed = np.asarray(grip_command) > 0
    change = np.flatnonzero(closed[1:] != closed[:-1]) + 1
    return change[closed[change]], change[~closed[change]]


def plot_trajectories(path: Path, episodes: Sequence[EpisodeScore], trajectories: Mapping[str, Trajectory]) -> Path:
    """Per condition: the TCP's path seen from above, and its height over time, with grasps and releases."""
    cond_of = {e.name: _condition(e) for e in episodes}
    groups: dict[str, list[Trajectory]] = {}
    for name, traj in trajectories.items():
        groups.setdefault(cond_of.get(name, "(not scored)"), []).append(traj)
    rows = sorted(groups.items())
    per_row = 2  # conditions side by side: each a (from above, height) pair
    nrows = math.ceil(len(rows) / per_row)
    fig = _figure(13.2, 2.9 * nrows)
    axes = fig.subplots(nrows, 2 * per_row, squeeze=False, gridspec_kw={"width_ratios": [1, 1.5] * per_row})
    pairs = [(axes[i // per_row, 2 * (i % per_row)], axes[i // per_row, 2 * (i % per_row) + 1])
             for i in range(nrows * per_row)]  # fmt: skip
    for xy, z in pairs[len(rows) :]:
        xy.set_visible(False)
        z.set_visible(False)
    for (xy, z), (cond, trajs) in zip(pairs, rows, strict=False):
        for k, traj in enumerate(trajs):
            colour, ls = (OK if traj.success else FAIL), STYLES[k % len(STYLES)]
            p, t = np.asarray(traj.tcp_pos), np.arange(traj.steps) / traj.control_hz
            grasp, release = grip_events(traj.grip_command)
            xy.plot(p[:, 0], p[:, 1], color=colour, ls=ls, lw=1.4)
            z.plot(t, p[:, 2], color=colour, ls=ls, lw=1.4, label=f"{traj.name or k} {'✓' if traj.success else '✗'}")
            for ax, xs, ys in ((xy, p[:, 0], p[:, 1]), (z, t, p[:, 2])):
                ax.plot(xs[grasp], ys[grasp], "v", color=colour, mec="k", mew=0.6, ms=6)
                ax.plot(xs[release], ys[release], "^", color=colour, mec="k", mew=0.6, ms=6)
        xy.set_aspect("equal", adjustable="datalim")
        xy.set_title(f"{cond}: from above")
        xy.set_xlabel("x [m]")
        xy.set_ylabel("y [m]")
        z.set_title(f"{cond}: height")
        z.set_xlabel("time [s]")
        z.set_ylabel("z [m]")
        markers = [Line2D([], [], marker="v", ls="", color="0.5", mec="k", label="grasp"),
                   Line2D([], [], marker="^", ls="", color="0.5", mec="k", label="release")]  # fmt: skip
        z.legend(handles=z.get_legend_handles_labels()[0] + markers, fontsize=7, loc="best", framealpha=0.85)
        for ax in (xy, z):
            ax.grid(alpha=0.3)
            ax.title.set_fontsize(9.5)
            ax.xaxis.label.set_fontsize(8.5)
            ax.yaxis.label.set_fontsize(8.5)
            ax.tick_params(labelsize=7.5)
    fig.suptitle("TCP paths (green: task succeeded, red: failed; ▼ grasp, ▲ release)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


# ---- the page ------------------------------------------------------------------------------------------
def _table(head: Sequence[str], rows: Sequence[Sequence[str]], numeric: Collection[int] = ()) -> str:
    """Cells are already escaped HTML; ``numeric`` columns are right-aligned."""
    th = "".join(f"<th>{h}</th>" for h in head)
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)  # fmt: skip
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def _success(ok: bool) -> str:
    return '<span class="ok">✓ yes</span>' if ok else '<span class="fail">✗ no</span>'


def _unit(metric: str) -> str:
    return METRICS[metric].unit if metric in METRICS else ""


def _condition_rows(summary: dict[str, Any]) -> list[list[str]]:
    rows = []
    for r in summary["conditions"]:
        sides = "<br>".join(f"{_e(k)}: {pct(v)}" for k, v in (r.get("sides") or {}).items())
        followed = "<br>".join(f"{_e(k)}: {v}" for k, v in (r.get("followed") or {}).items())
        dom = pct(r["pref_dom"]) if "pref_dom" in r else ""
        rows.append([f"<code>{_e(r['condition'])}</code>", _e(r["kind"]), _e(r.get("type", "")), str(r["N"]),
                     pct(r["SR"]), pct(r["SA"]), sides, followed, dom])  # fmt: skip
    return rows


def _episode_rows(episodes: Sequence[EpisodeScore]) -> list[list[str]]:
    rows = []
    for e in episodes:
        prefs = "<br>".join(f"<code>{_e(s.id)}</code> {_e(num(s.value, _unit(s.metric)))} · d={label(s.label)}"
                            for s in e.scores)  # fmt: skip
        rows.append([_e(e.name), f"<code>{_e(_condition(e))}</code>", _success(e.success), prefs or "—",
                     label(e.label), _e(e.followed or "")])  # fmt: skip
    return rows


def render_html(title: str, summary: dict[str, Any], episodes: Sequence[EpisodeScore], images: Sequence[Path]) -> str:
    """The page's HTML: overall line, tables by type, condition and episode, then the figures."""
    o = summary["overall"]
    dot = " &nbsp;·&nbsp; "
    parts = [f"<h1>{_e(title)}</h1>",
             f'<p class="overall">N = <b>{o["N"]}</b> episodes{dot}SR = <b>{pct(o["SR"])}</b>{dot}'
             f'SA (all preference episodes) = <b>{pct(o["SA_all_preferences"])}</b></p>',
             '<p class="note">SR: task success rate. SA = (1/N) Σ 1[success]·d: a failed episode adds nothing, '
             "however well it honoured the preference.</p>"]  # fmt: skip
    if summary["by_type"]:
        rows = [[_e(t), str(v["N"]), pct(v["SR"]), pct(v["SA"])] for t, v in summary["by_type"].items()]
        parts += ["<h2>By preference type (single preferences)</h2>",
                  _table(["Type", "N", "SR", "SA"], rows, {1, 2, 3})]  # fmt: skip
    head = ["Condition", "Kind", "Type", "N", "SR", "SA", "SA per side", "Followed", "Pref-Dom"]
    parts += ["<h2>By condition</h2>", _table(head, _condition_rows(summary), {3, 4, 5, 8}),
              '<p class="note">SA per side: SA counting one preference\'s label only. Followed: which side a '
              "conflict episode honoured more. Pref-Dom = |n₁ − n₂| / N.</p>"]  # fmt: skip
    head = ["Episode", "Condition", "Success", "Preferences: value · d", "d", "Followed"]
    parts += ["<h2>Episodes</h2>", _table(head, _episode_rows(episodes), {4})]
    used = sorted({s.metric for e in episodes for s in e.scores if s.metric in METRICS})
    if used:
        items = "".join(f"<li><code>{_e(m)}</code>: {_e(METRICS[m].what)}"
                        + (f" [{_e(_unit(m))}]" if _unit(m) else "") + "</li>" for m in used)  # fmt: skip
        parts.append(f'<p class="note">Metrics:</p><ul class="note">{items}</ul>')
    names = {"curves.png": "Satisfaction curves", "trajectories.png": "TCP trajectories"}
    for img in images:
        name = names.get(img.name, img.stem)
        parts += [f"<h2>{_e(name)}</h2>", _img(img, name)]
    body = "\n".join(parts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")  # fmt: skip


def write_report(out: Path, episodes: Sequence[EpisodeScore], trajectories: Mapping[str, Trajectory] | None = None,
                 title: str = "Preference evaluation") -> Path:  # fmt: skip
    """summary.json, curves.png, trajectories.png (with ``trajectories``) and report.html in ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    trajectories = dict(trajectories or {})
    summary = summarize(episodes)
    doc = {"title": title, "summary": summary, "episodes": [e.to_dict() for e in episodes]}
    (out / "summary.json").write_text(json.dumps(_json_safe(doc), indent=2) + "\n")
    images = [plot_curves(out / "curves.png", episodes, trajectories)]
    if trajectories:
        images.append(plot_trajectories(out / "trajectories.png", episodes, trajectories))
    page = out / "report.html"
    page.write_text(render_html(title, summary, episodes, images), encoding="utf-8")
    return page


# ---- rendering -----------------------------------------------------------------------------------------
def chromium_path() -> str | None:
    """Debian's headless-capable Chromium, if installed (scripts/bootstrap.sh --dev installs it)."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def screenshot(html: Path, png: Path, width: int = 1280, height: int = 2000) -> Path:
    """The page as Chromium draws it, offline and without touching any profile (a fresh one each time)."""
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("no chromium on PATH: install Debian's 'chromium' (scripts/bootstrap.sh --dev)")
    png = Path(png).resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    png.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png}", Path(html).resolve().as_uri()]  # fmt: skip
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except subprocess.TimeoutExpired as exc:
            err = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else exc.stderr or ""
            raise RuntimeError(f"chromium did not finish within 60 s: {err.strip()[-4000:]}") from exc
    if proc.returncode != 0 or not png.is_file():
        raise RuntimeError(f"chromium screenshot failed (exit {proc.returncode}): {proc.stderr.strip()[-4000:]}")
    return png
