// The workcell console page: live state and cameras over websockets, buttons over plain requests.
// Everything shown is set with textContent (never parsed as HTML): a status text from the graph is data.
"use strict";

const TOKEN = new URLSearchParams(location.hash.slice(1)).get("token") || "";
const WS_BASE = (location.protocol === "https:" ? "wss://" : "ws://") + location.host;
const RESET_TEXT =
  "The arm bridge reads the arm afresh and clears the fault only if its cause is gone " +
  "(a protective stop released, the bus answering again). The arm stays disabled: press Enable after, " +
  "and it then follows its active source from where it stands.";
const $ = (id) => document.getElementById(id);
let lastState = null;

function setText(id, text) {
  const el = $(id);
  if (el && el.textContent !== String(text)) el.textContent = String(text);
}
const fmt = (v, digits = 1) => (typeof v === "number" && isFinite(v) ? v.toFixed(digits) : "-");
const clock = (t) => (t ? new Date(t * 1000).toLocaleTimeString() : "-");

// ------------------------------------------------------------------ state
function connectState() {
  const ws = new WebSocket(`${WS_BASE}/ws/state?token=${encodeURIComponent(TOKEN)}`);
  ws.onmessage = (ev) => {
    lastState = JSON.parse(ev.data);
    setLink(true);
    render(lastState);
  };
  ws.onclose = () => {
    setLink(false);
    setTimeout(connectState, 1000);
  };
}

function setLink(up) {
  const el = $("link");
  el.textContent = up ? "live" : "no link to the console: retrying";
  el.className = "pill " + (up ? "good" : "bad");
}

function render(s) {
  document.title = `${s.title} console`;
  setText("title", `${s.title} console`);
  setText("jobs", s.jobs.length ? s.jobs.join(", ") : "");
  renderArm(s.arm);
  renderConveyor(s.conveyor);
  renderFaults(s.faults, s.fault_history);
  renderCollection(s.recorder, s.teleop);
  renderDeployment(s.policy, s.deployment);
  renderReplay(s.replay);
  renderEvaluation(s.evaluation);
  renderWorld(s.episode);
  renderCameras(s.cameras, s.policy_view && !!s.policy);
  renderNotices(s.notices);
  for (const el of document.querySelectorAll(".graph-only")) el.hidden = !s.graph;
  for (const b of document.querySelectorAll("button[data-command], #source-switch, #reset-fault")) {
    b.disabled = !s.controls;
  }
}

function renderArm(arm) {
  setText("arm-mode", arm.mode || "?");
  setText("arm-fault", arm.fault || "none");
  $("arm-fault").className = arm.fault ? "bad-text" : "";
  setText("arm-source", arm.active_source || "?");
  const select = $("source-select");
  if (arm.active_source && document.activeElement !== select && !select.dataset.touched) select.value = arm.active_source;
  const tcp = arm.tcp;
  setText("arm-tcp", tcp ? tcp.position.map((v) => fmt(v * 1000, 1)).join(", ") : "?");
  setText("arm-rpy", tcp ? tcp.rpy_deg.map((v) => fmt(v, 1)).join(", ") : "?");
  setText("arm-gripper", arm.gripper === null ? "?" : `${fmt(arm.gripper * 100, 0)} % closed`);
}

function renderConveyor(c) {
  setText("belt-speed", c.speed === null ? "?" : `${fmt(c.speed * 1000, 1)} mm/s`);
  setText("belt-travel", c.position === null ? "?" : `${fmt(c.position, 3)} m`);
  setText("belt-diag", c.diagnostic ? c.diagnostic.message : "?");
}

function renderFaults(active, history) {
  const banner = $("fault-banner");
  banner.hidden = active.length === 0;
  const list = $("fault-list");
  list.replaceChildren(...active.map((f) => {
    const div = document.createElement("div");
    div.className = "fault";
    const head = document.createElement("strong");
    head.textContent = `${f.code ? f.code + " " : ""}${f.source === "arm" ? "ARM FAULT" : f.source.replace(/^diag:/, "") + " fault"}: `;
    const text = document.createElement("span");
    text.className = "fault-text";
    text.textContent = f.text;
    div.append(head, text);
    if (f.recovery) {
      const what = document.createElement("div");
      what.className = "recovery";
      what.textContent = `What to do: ${f.recovery}`;
      div.append(what);
    }
    return div;
  }));
  $("reset-fault").hidden = !active.some((f) => f.source === "arm");
  const body = $("fault-history");
  if (!history.length) return;
  body.replaceChildren(...history.slice().reverse().map((e) => {
    const tr = document.createElement("tr");
    tr.className = e.state;
    for (const v of [clock(e.t), e.source, e.code || "-", e.state, e.text]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    return tr;
  }));
}

function renderCollection(r, teleop) {
  $("collection-panel").hidden = !r;
  if (!r) return;
  setText("rec-episode", r.episode || "none open");
  setText("rec-recording", r.recording ? (r.saving ? "recording (saving the last)" : "recording") : (r.saving ? "saving" : "idle"));
  setText("rec-duration", `${fmt(r.duration, 1)} s`);
  setText("rec-steps", r.steps);
  setText("rec-dropped", r.dropped);
  setText("rec-stale", r.stale_frames === undefined ? "-" : Object.values(r.stale_frames || {}).reduce((a, b) => a + b, 0));
  setText("rec-demos", r.num_demos);
  setText("rec-plan", r.plan_next || "-");
  setText("teleop-status", teleop ? `${teleop.status}${teleop.fault ? ": " + teleop.fault : ""}` : "-");
}

function renderDeployment(p, d) {
  $("deployment-panel").hidden = !p;
  if (!p) return;
  const step = p.step || {};
  const ended = !p.running && p.ended_by ? ` (ended: ${p.ended_by}; start it again once the arm is enabled)` : "";
  setText("pol-running", `${p.running ? "running" : "stopped" + ended}, server ${p.connected ? "connected" : "NOT connected"}`);
  setText("pol-task", p.task || "-");
  setText("pol-chunk", step.chunk === undefined ? "-" : `${step.chunk} / ${step.index} (${step.kind})`);
  setText("pol-rtt", step.round_trip_ms == null ? "-" : `${fmt(step.round_trip_ms, 0)} ms (server ${fmt(step.server_infer_ms, 0)} ms)`);
  setText("pol-rtt-pct", d ? `${fmt(d.round_trip_p50_ms, 0)} / ${fmt(d.round_trip_p99_ms, 0)} ms over ${d.chunks} chunks` : "-");
  setText("pol-obs-age", step.obs_age_ms == null ? "-" : `${fmt(step.obs_age_ms, 0)} ms`);
  const holds = d ? Object.entries(d.holds) : [];
  setText("pol-holds", holds.length ? holds.map(([k, n]) => `${k} ${n}`).join(", ") : "none");
  setText("pol-hold-reason", d && d.last_hold_reason ? d.last_hold_reason : "-");
  setText("pol-server-error", d && d.last_server_error
    ? d.last_server_error + (d.server_answered_since ? " (since then the server answered)" : "") : "none");
  setText("pol-report", p.episode_report || "-");
}

function renderReplay(r) {
  $("replay-panel").hidden = !r;
  if (!r) return;
  const outcome = r.outcome ? `, replayed placed ${JSON.stringify(r.outcome.replayed_placed)}` : "";
  setText("rep-step", `${r.demo || ""} ${r.step} of ${r.steps}${r.done ? " (done" + outcome + ")" : ""}${r.error ? " error: " + r.error : ""}`);
  setText("rep-mode", r.mode || "-");
  setText("rep-error", `${fmt(r.pos_err_rms_mm, 1)} mm RMS (max ${fmt(r.pos_err_max_mm, 1)}), ${fmt(r.rot_err_rms_deg, 2)} deg RMS`);
}

function renderEvaluation(e) {
  $("evaluation-panel").hidden = !e;
  if (!e) return;
  setText("eval-progress", `${e.done} of ${e.total} trials done${e.failed ? `, ${e.failed} failed (a rerun retries them)` : ""}`);
  $("eval-bar").max = Math.max(e.total, 1);
  $("eval-bar").value = e.done;
  $("eval-rows").replaceChildren(...(e.rows || []).map((row) => {
    const tr = document.createElement("tr");
    const m = row.metrics || {};
    for (const v of [row.trial, row.task || "-", row.success == null ? "-" : (row.success ? "yes" : "no"),
                     fmt(m.PCR_T, 2), fmt(m.PCR_S, 2), fmt(row.wall_s, 0), row.error || (row.retried ? "retried" : "")]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    return tr;
  }));
}

function renderWorld(ep) {
  $("world-panel").hidden = !ep;
  if (!ep) return;
  const m = ep.metrics || {};
  setText("world-episode", `${ep.episode ?? "-"} at ${fmt(ep.sim_time, 1)} s of ${fmt(ep.horizon, 0)}${ep.done ? " (done)" : ""}`);
  setText("world-metrics", `${fmt(m.SR, 0)} / ${fmt(m.PCR_T, 2)} / ${fmt(m.PCR_S, 2)}`);
}

function renderNotices(notices) {
  $("notices").replaceChildren(...notices.slice().reverse().map((n) => {
    const li = document.createElement("li");
    li.className = n.ok ? "" : "bad-text";
    li.textContent = `${clock(n.t)} ${n.command}: ${n.ok ? "ok" : "REFUSED"}: ${n.message}`;
    return li;
  }));
}

// ------------------------------------------------------------------ cameras
const cameraSockets = {};
function renderCameras(stats, showPolicy) {
  for (const [camera, st] of Object.entries(stats || {})) {
    setText(`fps-${camera}`, `${fmt(st.rate_hz, 1)} fps`);
    openCamera(camera, "raw");
    if (showPolicy) openCamera(camera, "policy");
  }
  for (const fig of document.querySelectorAll(".policy-view")) fig.hidden = !showPolicy;
}

function openCamera(camera, view) {
  const key = `${camera}-${view}`;
  if (cameraSockets[key]) return;
  const img = $(`cam-${key}`);
  if (!img) return;
  const ws = new WebSocket(`${WS_BASE}/ws/camera/${camera}?view=${view}&token=${encodeURIComponent(TOKEN)}`);
  ws.binaryType = "blob";
  cameraSockets[key] = ws;
  img.dataset.frames = img.dataset.frames || "0";
  // One frame decoding at a time, and at most one waiting: a frame that arrives while another waits replaces it.
  // The server sends the next only once this one is acknowledged, so nothing queues anywhere.
  let decoding = false;
  let waiting = null;
  const show = (blob) => {
    decoding = true;
    const url = URL.createObjectURL(blob);
    img.onload = img.onerror = () => {
      URL.revokeObjectURL(url);
      img.dataset.frames = String(Number(img.dataset.frames) + 1);
      decoding = false;
      if (waiting) {
        const next = waiting;
        waiting = null;
        show(next);
      }
    };
    img.src = url;
  };
  ws.onmessage = (ev) => {
    if (ws.readyState === WebSocket.OPEN) ws.send("received");
    if (decoding) waiting = ev.data;
    else show(ev.data);
  };
  ws.onclose = () => {
    delete cameraSockets[key];
  };
}

// ------------------------------------------------------------------ controls
async function control(command, args = []) {
  try {
    const res = await fetch(`/api/control/${command}`, {
      method: "POST",
      headers: {"content-type": "application/json", "x-workcell-console": "1", "x-workcell-token": TOKEN},
      body: JSON.stringify({args}),
    });
    const answer = await res.json().catch(() => ({}));
    if (!res.ok) showLocalNotice(`${command} ${args.join(" ")}: REFUSED: ${answer.detail || res.status}`);
    return answer;
  } catch (err) {
    showLocalNotice(`${command}: the console did not answer (${err})`);
    return null;
  }
}

function showLocalNotice(text) {
  const li = document.createElement("li");
  li.className = "bad-text";
  li.textContent = text;
  $("notices").prepend(li);
}

document.addEventListener("click", (ev) => {
  const b = ev.target.closest("button[data-command]");
  if (!b) return;
  control(b.dataset.command, b.dataset.args ? b.dataset.args.split(" ") : []);
});
$("source-select").addEventListener("change", () => { $("source-select").dataset.touched = "1"; });
$("source-switch").addEventListener("click", () => {
  delete $("source-select").dataset.touched;
  control("source", [$("source-select").value]);
});
$("reset-fault").addEventListener("click", () => {
  const dialog = $("confirm");
  const fault = lastState && lastState.arm.fault;
  $("confirm-text").textContent = `${RESET_TEXT}${fault ? ` The fault now: ${fault}` : ""}`;
  dialog.returnValue = "";
  dialog.showModal();
});
$("confirm").addEventListener("close", () => {
  if ($("confirm").returnValue === "ok") control("reset");
});
document.addEventListener("keydown", (ev) => {
  const typing = ev.target.closest && ev.target.closest("input, select, textarea, dialog");
  if (ev.key === "Escape" || (ev.key === " " && !typing)) {
    if (ev.key === " ") ev.preventDefault();
    control("hold");
  }
});

connectState();
