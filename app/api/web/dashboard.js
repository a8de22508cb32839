// The Kairos dashboard: reads /v1/status, /v1/stats/*, /v1/jobs and the history routes with the key
// the person pasted (kept in sessionStorage, sent as a Bearer token). Every value from the API is
// written with textContent, never as HTML. Charts are plotly.js's basic bundle, served by the API
// from its package data (plotly-basic.min.js).
"use strict";

const TOKEN_KEY = "kairos.token";
const TENANT_KEY = "kairos.tenant";
const REFRESH_MS = 10000;
const COLORS = {
  p50: "#2563eb", p99: "#dc2626", dispatch: "#94a3b8",
  succeeded: "#16a34a", retried: "#f59e0b", dead: "#dc2626", rate: "#0f172a",
  readyDue: "#2563eb", readyLater: "#93c5fd", leased: "#7c3aed",
  due: "#0ea5e9", ahead: "#22c55e", retrying: "#f59e0b",
};
const PLOT_CONFIG = { displaylogo: false, displayModeBar: false, responsive: true };
const CHARTS = ["chart-lag", "chart-outcomes", "chart-queues", "chart-due"];

const state = {
  token: sessionStorage.getItem(TOKEN_KEY),
  tenant: sessionStorage.getItem(TENANT_KEY) || "",
  viewer: null,
  timer: null,
  jobsCursor: null,
  selectedJob: null,
};

const $ = (id) => document.getElementById(id);

class ApiError extends Error {
  constructor(status, body) {
    super((body && (body.detail || body.title)) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

async function api(path, params = {}) {
  const url = new URL(path, window.location.origin);
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") url.searchParams.set(k, v);
  }
  const resp = await fetch(url, { headers: { Authorization: `Bearer ${state.token}`, Accept: "application/json" } });
  const body = await resp.json().catch(() => null);
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

// The operator's chosen tenant, on the figures routes only (a tenant key sees its own).
function scoped(params = {}) {
  return state.viewer === "admin" && state.tenant ? { ...params, tenant: state.tenant } : params;
}

// -- formatting ------------------------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === "class") node.className = v;
    else if (k === "title") node.title = v;
    else node.setAttribute(k, v);
  }
  for (const child of children) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pill(text) {
  return el("span", { class: `pill ${text}` }, text);
}

function pad(n) { return String(n).padStart(2, "0"); }

function clock(iso, withSeconds = true) {
  if (!iso) return "–";
  const d = new Date(iso);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}${withSeconds ? `:${pad(d.getSeconds())}` : ""}`;
  const today = new Date();
  if (d.toDateString() === today.toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

// Plotly ignores offsets in date strings: hand it local wall time, which is what the axis shows.
function plotTime(iso) {
  const d = new Date(iso);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  const sign = ms < 0 ? "−" : "";
  const a = Math.abs(ms);
  if (a < 1000) return `${sign}${Math.round(a)} ms`;
  if (a < 60000) return `${sign}${(a / 1000).toFixed(a < 10000 ? 2 : 1)} s`;
  const min = Math.floor(a / 60000);
  const s = Math.round((a % 60000) / 1000);
  return `${sign}${min} min ${s} s`;
}

function count(n) { return Number(n).toLocaleString("en-US"); }

function between(fromIso, toIso) {
  return fromIso && toIso ? duration(new Date(toIso) - new Date(fromIso)) : null;
}

// -- sign in / out ---------------------------------------------------------------------------------

function showLogin(message = "") {
  stopRefresh();
  $("board").hidden = true;
  $("controls").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message;
  $("token").focus();
}

async function signIn(token) {
  state.token = token;
  let status;
  try {
    status = await api("/v1/status");
  } catch (err) {
    state.token = null;
    sessionStorage.removeItem(TOKEN_KEY);
    const why = err instanceof ApiError && err.status === 401 ? "That key is unknown or revoked."
      : err instanceof ApiError && err.status === 403 ? "This key cannot read the API (a pool worker key?)."
        : `Kairos did not answer: ${err.message}`;
    showLogin(why);
    return;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  state.viewer = status.scope.viewer;
  $("login").hidden = true;
  $("board").hidden = false;
  $("controls").hidden = false;
  const badge = $("scope-badge");
  badge.className = state.viewer === "admin" ? "badge admin" : "badge";
  const admin = state.viewer === "admin";
  $("tenant-picker-label").hidden = !admin;
  $("jobs-admin-note").hidden = !admin;
  $("job-filters").hidden = admin;
  $("jobs-table").hidden = admin;
  $("history-card").hidden = admin;
  $("jobs-card").parentElement.classList.toggle("single", admin);
  if (state.viewer === "admin") {
    await loadTenants();
  } else {
    state.tenant = "";
  }
  updateBadge(status);
  renderStatus(status);
  refresh();
  if (state.viewer !== "admin") loadJobs(true);
}

function updateBadge(status) {
  const badge = $("scope-badge");
  if (state.viewer === "admin") badge.textContent = state.tenant ? `operator · ${state.tenant}` : "operator · every tenant";
  else badge.textContent = `tenant · ${status.scope.tenant}`;
}

async function loadTenants() {
  const picker = $("tenant-picker");
  const { tenants } = await api("/v1/stats/tenants");
  picker.replaceChildren(el("option", { value: "" }, "every tenant"), ...tenants.map((t) => el("option", { value: t }, t)));
  if (!tenants.includes(state.tenant)) state.tenant = "";
  picker.value = state.tenant;
}

// Forget everything the last viewer saw, so the next one never glimpses it.
function clearBoard() {
  for (const id of CHARTS) Plotly.purge($(id));
  $("jobs-table").tBodies[0].replaceChildren();
  $("executions-table").tBodies[0].replaceChildren();
  $("executions-table").hidden = true;
  $("attempts").hidden = true;
  $("jobs-more").hidden = true;
  $("jobs-empty").hidden = true;
  $("filter-state").value = "";
  $("filter-name").value = "";
  $("filter-label").value = "";
  $("history-title").textContent = "History";
  $("history-hint").textContent = "pick a job to see its executions";
  $("job-facts").replaceChildren();
  $("job-facts").hidden = true;
  for (const id of ["tile-p50", "tile-p99", "tile-queued", "tile-dead", "tile-shards"]) $(id).textContent = "–";
  state.jobsCursor = null;
  state.selectedJob = null;
}

function signOut() {
  sessionStorage.removeItem(TOKEN_KEY);
  sessionStorage.removeItem(TENANT_KEY);
  state.token = null;
  state.viewer = null;
  state.tenant = "";
  $("token").value = "";
  clearBoard();
  showLogin();
}

// -- figures ---------------------------------------------------------------------------------------

function stopRefresh() {
  if (state.timer) clearTimeout(state.timer);
  state.timer = null;
}

async function refresh() {
  stopRefresh();
  const minutes = $("window-picker").value;
  const hours = $("horizon-picker").value;
  try {
    // /v1/status holds the queue depths and the dead letters too: no /v1/stats/queues of its own.
    const [status, lag, outcomes, due] = await Promise.all([
      api("/v1/status", scoped()),
      api("/v1/stats/lag", scoped({ minutes })),
      api("/v1/stats/outcomes", scoped({ minutes })),
      api("/v1/stats/due", scoped({ hours })),
    ]);
    renderStatus(status);
    updateBadge(status);
    renderLag(lag);
    renderOutcomes(outcomes);
    renderQueues(status);
    renderDue(due);
    $("updated").textContent = `updated ${clock(new Date().toISOString())}`;
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) {
      signOut();
      showLogin("The key stopped working (revoked?). Sign in again.");
      return;
    }
    $("updated").textContent = `refresh failed: ${err.message}`;
  }
  state.timer = setTimeout(refresh, REFRESH_MS);
}

function renderStatus(status) {
  const lag = status.startLag;
  const p50 = $("tile-p50");
  const p99 = $("tile-p99");
  p50.textContent = duration(lag.p50Ms);
  p99.textContent = duration(lag.p99Ms);
  p99.className = "tile-value" + (lag.p99Ms > 2000 ? " bad" : lag.p99Ms > 1000 ? " warn" : "");
  $("tile-waiting").textContent = lag.oldestWaitingMs
    ? `oldest waiting ${duration(lag.oldestWaitingMs)}` : `${count(lag.started)} of ${count(lag.occurrences)} started`;
  let ready = 0; let leased = 0; let later = 0;
  for (const q of status.queues) { ready += q.readyDue; leased += q.leased; later += q.readyLater; }
  $("tile-queued").textContent = `${count(ready)} / ${count(leased)}`;
  $("tile-later").textContent = later ? `${count(later)} ready later` : "";
  const dead = $("tile-dead");
  dead.textContent = count(status.deadLetters.count) + (status.deadLetters.capped ? "+" : "");
  dead.className = "tile-value" + (status.deadLetters.count > 0 ? " bad" : "");
  const shards = status.shards;
  const tile = $("tile-shards");
  tile.textContent = `${shards.owned} / ${shards.total}`;
  tile.className = "tile-value" + (shards.owned < shards.total ? " warn" : "");
  $("tile-schedulers").textContent = shards.owners
    ? shards.owners.map((o) => `${o.owner}: ${o.shards}`).join(" · ") || "no live scheduler"
    : `${shards.schedulers} scheduler${shards.schedulers === 1 ? "" : "s"}`;
}

function baseLayout(extra = {}) {
  return {
    margin: { l: 52, r: 16, t: 8, b: 36 },
    paper_bgcolor: "rgba(0,0,0,0)",
    plot_bgcolor: "rgba(0,0,0,0)",
    font: { family: "system-ui, -apple-system, 'Segoe UI', Roboto, 'DejaVu Sans', sans-serif", size: 12, color: "#334155" },
    legend: { orientation: "h", x: 0, y: 1.12, font: { size: 11 } },
    xaxis: { type: "date", gridcolor: "#eef2f7", linecolor: "#cbd5e1" },
    yaxis: { gridcolor: "#eef2f7", zerolinecolor: "#cbd5e1", rangemode: "tozero" },
    hovermode: "x unified",
    ...extra,
  };
}

function chart(id, emptyId, traces, layout, hasData) {
  $(emptyId).hidden = hasData;
  Plotly.react($(id), traces, layout, PLOT_CONFIG);
}

function renderLag(lag) {
  const x = lag.minutes.map((m) => plotTime(m.minute));
  const line = (name, values, color, dash) => ({
    name, x, y: values, type: "scatter", mode: "lines+markers", connectgaps: false,
    line: { color, width: 2, dash: dash || "solid", shape: "linear" }, marker: { size: 7 },
    hovertemplate: "%{y:.0f} ms",
  });
  const traces = [
    line("start p50", lag.minutes.map((m) => m.startP50Ms), COLORS.p50),
    line("start p99", lag.minutes.map((m) => m.startP99Ms), COLORS.p99),
    line("dispatch p50", lag.minutes.map((m) => m.dispatchP50Ms), COLORS.dispatch, "dot"),
  ];
  const layout = baseLayout({
    xaxis: { ...baseLayout().xaxis, range: [plotTime(lag.windowStart), plotTime(lag.windowEnd)] },
    yaxis: { ...baseLayout().yaxis, title: { text: "ms", standoff: 4 }, rangemode: "normal" },
  });
  chart("chart-lag", "empty-lag", traces, layout, lag.minutes.length > 0);
}

function renderOutcomes(outcomes) {
  const x = outcomes.minutes.map((m) => plotTime(m.minute));
  const bar = (name, key, color) => ({
    name, x, y: outcomes.minutes.map((m) => m[key]), type: "bar", marker: { color }, hovertemplate: "%{y}",
  });
  const traces = [
    bar("succeeded", "succeeded", COLORS.succeeded),
    bar("retried", "retried", COLORS.retried),
    bar("dead", "dead", COLORS.dead),
    {
      name: "failure rate", x, y: outcomes.minutes.map((m) => (m.failureRate === null ? null : m.failureRate * 100)),
      type: "scatter", mode: "lines+markers", yaxis: "y2", line: { color: COLORS.rate, width: 1.5 },
      marker: { size: 4 }, hovertemplate: "%{y:.1f}%",
    },
  ];
  const layout = baseLayout({
    barmode: "stack",
    margin: { l: 44, r: 44, t: 8, b: 36 },
    xaxis: { ...baseLayout().xaxis, range: [plotTime(outcomes.windowStart), plotTime(outcomes.windowEnd)] },
    yaxis: { ...baseLayout().yaxis, title: { text: "occurrences", standoff: 4 } },
    yaxis2: { overlaying: "y", side: "right", range: [0, 100], tickvals: [0, 25, 50, 75, 100],
      ticktext: ["0%", "25%", "50%", "75%", "100%"], showgrid: false, zeroline: false },
  });
  chart("chart-outcomes", "empty-outcomes", traces, layout, outcomes.minutes.length > 0);
}

function poolLabel(q) {
  const pool = q.kind === "http" ? "HTTP deliveries" : q.pool;  // a shared pool's reads shared/NAME
  return state.viewer === "admin" && !state.tenant ? `${q.tenant} · ${pool}` : pool;
}

function renderQueues(queues) {
  const rows = [...queues.queues].reverse(); // deepest at the top of a horizontal bar chart
  const y = rows.map(poolLabel);
  const pad = Math.max(0, 4 - rows.length) / 2;
  const bar = (name, key, color) => ({
    name, y, x: rows.map((q) => q[key]), type: "bar", orientation: "h", marker: { color }, hovertemplate: "%{x}",
  });
  const traces = [
    bar("ready (due)", "readyDue", COLORS.readyDue),
    bar("leased", "leased", COLORS.leased),
    bar("ready later", "readyLater", COLORS.readyLater),
  ];
  const layout = baseLayout({
    barmode: "stack",
    bargap: 0.25,
    hovermode: "y unified",
    margin: { l: 140, r: 16, t: 8, b: 30 },
    xaxis: { gridcolor: "#eef2f7", rangemode: "tozero", title: { text: "executions", standoff: 2 } },
    // At least four rows' worth of height, centred, so one pool is a bar rather than a wall.
    yaxis: { automargin: true, gridcolor: "rgba(0,0,0,0)", range: [-0.5 - pad, rows.length - 0.5 + pad] },
  });
  if (!rows.length) {  // no pool to show: the sentence alone, without the axes of a chart of nothing
    layout.xaxis.visible = false;
    layout.yaxis.visible = false;
    layout.showlegend = false;
  }
  chart("chart-queues", "empty-queues", traces, layout, rows.length > 0);
}

function renderDue(due) {
  const x = due.minutes.map((m) => plotTime(m.minute));
  const bar = (name, key, color) => ({
    name, x, y: due.minutes.map((m) => m[key]), type: "bar", marker: { color }, hovertemplate: "%{y}",
  });
  const traces = [
    bar("due (due_index)", "due", COLORS.due),
    bar("dispatched ahead", "dispatchedAhead", COLORS.ahead),
    bar("retry waiting", "retrying", COLORS.retrying),
  ];
  let peak = null;
  for (const m of due.minutes) {
    const total = m.due + m.dispatchedAhead + m.retrying;
    if (!peak || total > peak.total) peak = { total, minute: m.minute };
  }
  $("due-hint").textContent = peak
    ? `per minute; busiest ${clock(peak.minute, false)} with ${count(peak.total)}`
    : "occurrences per minute";
  const layout = baseLayout({
    barmode: "stack",
    bargap: 0.05,
    xaxis: { ...baseLayout().xaxis, range: [plotTime(due.start), plotTime(due.end)] },
    yaxis: { ...baseLayout().yaxis, title: { text: "occurrences", standoff: 4 } },
  });
  chart("chart-due", "empty-due", traces, layout, due.minutes.length > 0);
}

// -- jobs and their history ------------------------------------------------------------------------

function scheduleText(job) {
  const s = job.schedule;
  const jitter = s.jitterSeconds ? ` ±${s.jitterSeconds}s` : "";
  // allow is the default: only a policy that changes what happens on overlap is said.
  const overlap = job.concurrency && job.concurrency !== "allow" ? ` · overlap ${job.concurrency}` : "";
  if (s.cron) return `${s.cron} (${s.tz})${jitter}${overlap}`;
  if (s.every) return `every ${s.every}${s.tz ? ` (${s.tz})` : ""}${jitter}${overlap}`;
  return s.runAt ? `once at ${clock(s.runAt)}` : "–";
}

// A URL says it is an HTTP target; a pool's name needs the word.
function targetText(target) {
  return target.type === "http" ? target.ref : `pool ${target.ref}`;
}

async function loadJobs(reset) {
  if (reset) {
    state.jobsCursor = null;
    $("jobs-table").tBodies[0].replaceChildren();
  }
  // label: a Kubernetes-style selector, passed as typed (the API says what it cannot read).
  const params = {
    state: $("filter-state").value, name: $("filter-name").value.trim(), label: $("filter-label").value.trim(), limit: 50,
  };
  if (state.jobsCursor) params.cursor = state.jobsCursor;
  let page;
  try {
    page = await api("/v1/jobs", params);
  } catch (err) {
    $("jobs-empty").hidden = false;
    $("jobs-empty").textContent = `Could not list jobs: ${err.message}`;
    $("jobs-more").hidden = true;
    return;
  }
  const body = $("jobs-table").tBodies[0];
  for (const job of page.jobs) {
    const labels = labelPairs(job).join(", ");
    const row = el("tr", { "data-job-id": job.jobId },
      el("td", { title: labels ? `${job.name} · ${labels}` : job.name }, job.name), el("td", {}, pill(job.state)),
      el("td", {}, scheduleText(job)), el("td", { title: job.target.ref }, targetText(job.target)),
      el("td", {}, clock(job.nextRunAt)));
    row.addEventListener("click", () => selectJob(job, row));
    body.append(row);
  }
  state.jobsCursor = page.nextCursor;
  $("jobs-more").hidden = !page.nextCursor;
  $("jobs-empty").textContent = "No job matches.";
  $("jobs-empty").hidden = body.rows.length > 0;
}

// Whole seconds as the API spells intervals: 5400 -> "1h30m", 0 -> "0s".
function interval(seconds) {
  let rest = seconds, out = "";
  for (const [unit, size] of [["d", 86400], ["h", 3600], ["m", 60], ["s", 1]]) {
    if (rest >= size) { out += `${Math.floor(rest / size)}${unit}`; rest %= size; }
  }
  return out || "0s";
}

// How the job ends (pauseOnFailure, maxRuns, deleteAfterCompletionSeconds) and why Kairos paused it.
function lifecycleFacts(job) {
  const facts = [];
  if (job.pausedReason) facts.push(`Paused by Kairos: ${job.pausedReason}`);
  if (job.pauseOnFailure) facts.push("pauses itself when an occurrence is dead-lettered");
  if (job.maxRuns != null) facts.push(`${job.remainingRuns} of ${job.maxRuns} runs left`);
  if (job.deleteAfterCompletionSeconds != null) {
    facts.push(`removed to the archive ${interval(job.deleteAfterCompletionSeconds)} after it finishes`);
  }
  return facts.join(" · ");
}

function labelPairs(job) {
  return Object.entries(job.labels || {}).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => `${k}=${v}`);
}

// The job's details beyond its row, a line each: how it ends, a buffer_one occurrence waiting, the
// identity token an HTTP target is sent, its labels.
function jobFacts(job) {
  const lines = [];
  const lifecycle = lifecycleFacts(job);
  if (lifecycle) lines.push(lifecycle);
  if (job.bufferedAt) {
    lines.push(`The occurrence due ${clock(job.bufferedAt)} waits (buffer_one): it starts when the running one settles`);
  }
  const auth = job.target.auth;
  if (auth) {
    const audience = auth.audience || `${job.target.ref} (the URL)`;
    lines.push(`Each delivery carries an ${auth.type.toUpperCase()} identity token, audience ${audience}`);
  }
  const labels = labelPairs(job);
  if (labels.length) lines.push(el("span", {}, "Labels", ...labels.flatMap((l) => [" ", el("code", {}, l)])));
  return lines.map((line) => el("div", {}, line));
}

async function selectJob(job, row) {
  for (const r of $("jobs-table").tBodies[0].rows) r.classList.toggle("selected", r === row);
  state.selectedJob = job;
  $("history-title").textContent = `History of ${job.name}`;
  $("history-hint").textContent = "newest first; pick one to see its attempts";
  $("attempts").hidden = true;
  // The job is read again: the listed row may be minutes old, and a buffered occurrence comes and goes.
  const [current, executions] = await Promise.all([
    api(`/v1/jobs/${job.jobId}`).catch(() => job),
    api(`/v1/jobs/${job.jobId}/executions`, { limit: 50 }),
  ]);
  if (state.selectedJob !== job) return;  // another job was picked while these were read
  const facts = jobFacts(current);
  $("job-facts").replaceChildren(...facts);
  $("job-facts").hidden = !facts.length;
  const table = $("executions-table");
  table.hidden = false;
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const ex of executions) {
    const tr = el("tr", { "data-execution-id": ex.executionId },
      el("td", {}, clock(ex.scheduledFor)),
      el("td", { title: ex.pausedJob ? "this dead letter paused the job" : "" },
        pill(ex.state), ex.pausedJob ? " paused the job" : ""),
      el("td", {}, ex.attempt),
      el("td", {}, clock(ex.startedAt)), el("td", {}, clock(ex.finishedAt)),
      el("td", { title: ex.error || "" }, ex.error || ""));
    tr.addEventListener("click", () => selectExecution(job, ex, tr));
    body.append(tr);
  }
  if (!executions.length) {
    $("history-hint").textContent = "no execution yet: its first occurrence is not due";
  }
}

function attemptSentence(a) {
  const on = a.workerId ? ` on ${a.workerId}` : "";
  const took = between(a.leasedAt, a.finishedAt);
  switch (a.outcome) {
    case "succeeded":
      return `Attempt ${a.attempt} ran${on} from ${clock(a.leasedAt)} and succeeded at ${clock(a.finishedAt)} (${took}).`;
    case "failed":
      return `Attempt ${a.attempt} ran${on} from ${clock(a.leasedAt)} and failed at ${clock(a.finishedAt)}`
        + (a.error ? `: ${a.error}` : ".");
    case "expired":
      return `Attempt ${a.attempt}${on} started at ${clock(a.leasedAt)} and lost its lease at ${clock(a.finishedAt)}: `
        + `no heartbeat or result arrived before the lease ran out at ${clock(a.leaseUntil)}, so the work was handed out again.`;
    case "discarded":
      return `Attempt ${a.attempt}${on} started at ${clock(a.leasedAt)}, lost its lease, and still reported a result `
        + `at ${clock(a.finishedAt)}; that late result was discarded. Its worker did run the job.`;
    case "cancelled":
      return `Attempt ${a.attempt}${on} started at ${clock(a.leasedAt)} and was cancelled at ${clock(a.finishedAt)}`
        + (a.error ? ` (${a.error}).` : ".");
    default:
      return `Attempt ${a.attempt} is running${on} since ${clock(a.leasedAt)}; its lease runs until ${clock(a.leaseUntil)}.`;
  }
}

function shortStep(a) {
  const on = a.workerId ? ` on ${a.workerId}` : "";
  switch (a.outcome) {
    case "expired": return `attempt ${a.attempt} lost its lease at ${clock(a.finishedAt)}`;
    case "discarded": return `attempt ${a.attempt} lost its lease but finished anyway at ${clock(a.finishedAt)}`;
    case "succeeded": return `attempt ${a.attempt} ran${on} at ${clock(a.leasedAt)} and succeeded`;
    case "failed": return `attempt ${a.attempt} ran${on} at ${clock(a.leasedAt)} and failed`;
    case "cancelled": return `attempt ${a.attempt} was cancelled at ${clock(a.finishedAt)}`;
    default: return `attempt ${a.attempt} is running${on} since ${clock(a.leasedAt)}`;
  }
}

function times(n) { return n === 2 ? "twice" : `${n} times`; }

// One plain paragraph: what happened to this occurrence, and why it ran more than once if it did.
function story(job, ex, attempts) {
  if (!attempts.length) {
    if (ex.state === "skipped") return { text: `This occurrence was skipped: ${ex.error || "it was not run"}.`, twice: false };
    if (ex.state === "cancelled") return { text: `This occurrence was cancelled before any worker took it${ex.error ? ` (${ex.error})` : ""}.`, twice: false };
    return { text: "No worker has leased this execution yet.", twice: false };
  }
  const steps = attempts.map(shortStep).join("; ");
  const lost = attempts.filter((a) => a.outcome === "expired" || a.outcome === "discarded");
  if (attempts.length > 1 && lost.length) {
    const key = `${job.jobId}:${ex.scheduledFor.replace("+00:00", "Z")}`;
    return {
      twice: true,
      text: `${steps.charAt(0).toUpperCase()}${steps.slice(1)}: this job ran ${times(attempts.length)}. Why: a worker that `
        + "loses its lease (it stopped heartbeating, was paused, or was cut off) may still be running, so Kairos hands the "
        + "work to another worker rather than risk never running it. Every attempt carries the same Idempotency-Key "
        + `(${key}), so the receiver can tell the repeats apart.`,
    };
  }
  if (attempts.length > 1) {
    return { text: `${steps.charAt(0).toUpperCase()}${steps.slice(1)}: ${attempts.length} attempts, retried with backoff after each failure.`, twice: false };
  }
  return { text: attemptSentence(attempts[0]), twice: false };
}

async function selectExecution(job, ex, row) {
  for (const r of $("executions-table").tBodies[0].rows) r.classList.toggle("selected", r === row);
  const attempts = await api(`/v1/executions/${ex.executionId}/attempts`);
  $("attempts").hidden = false;
  $("attempts-title").textContent = `Attempts of the run due ${clock(ex.scheduledFor)}`;
  const told = story(job, ex, attempts);
  const p = $("attempts-story");
  p.textContent = told.text;
  p.className = told.twice ? "story twice" : "story";
  $("attempt-list").replaceChildren(...attempts.map((a) => el("li", {}, pill(a.outcome), " ", attemptSentence(a))));
}

// -- wiring ----------------------------------------------------------------------------------------

function start() {
  $("login-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const token = $("token").value.trim();
    if (token) signIn(token);
  });
  $("sign-out").addEventListener("click", signOut);
  $("tenant-picker").addEventListener("change", (event) => {
    state.tenant = event.target.value;
    sessionStorage.setItem(TENANT_KEY, state.tenant);
    refresh();
  });
  $("window-picker").addEventListener("change", refresh);
  $("horizon-picker").addEventListener("change", refresh);
  $("job-filters").addEventListener("submit", (event) => {
    event.preventDefault();
    loadJobs(true);
  });
  $("jobs-more").addEventListener("click", () => loadJobs(false));
  if (state.token) signIn(state.token);
  else showLogin();
}

document.addEventListener("DOMContentLoaded", start);
