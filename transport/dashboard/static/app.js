// tether's dashboard: a client of the public /v1 API, nothing more. Routes live in the URL's
// hash (#/, #/jobs?…, #/jobs/<id>, #/dead, #/flows, #/flows/<id>, #/schedules), so the server
// serves one page.
"use strict";

const KEY = "tether.apiKey";
const REFRESH_MS = 2000;
const PAGE = 50;

// ---- DOM helpers: every client-controlled string goes in as text, never as markup. ----

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function svg(tag, attrs) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

const main = () => document.getElementById("main");

function toast(msg, bad) {
  const t = document.getElementById("toast");
  t.textContent = msg;
  t.className = bad ? "toast bad" : "toast";
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 4000);
}

function badge(status) {
  return h("span", { class: `badge s-${status}`, "data-status": status }, status);
}

function ago(iso) {
  if (!iso) return "—";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)}s ago`;
  if (s < 3600) return `${Math.floor(s / 60)}m ago`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ago`;
  return `${Math.floor(s / 86400)}d ago`;
}

function age(seconds) {
  if (!seconds) return "—";
  if (seconds < 60) return `${seconds.toFixed(1)}s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m`;
  return `${(seconds / 3600).toFixed(1)}h`;
}

function clock(iso) {
  return new Date(iso).toLocaleTimeString([], { hour12: false });
}

function cell(label, content, cls) {
  return h("td", { "data-label": label, class: cls }, content);
}

function table(cls, headers, rows, empty) {
  if (rows.length === 0) return h("div", { class: "empty" }, empty);
  return h("table", { class: `stack ${cls}` },
    h("thead", {}, h("tr", {}, headers.map(([name, c]) => h("th", { class: c }, name)))),
    h("tbody", {}, rows));
}

// ---- The API: Bearer key from session storage; a 401 asks for one and retries. ----

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let askingForKey = null;

function askForKey(message) {
  if (askingForKey) return askingForKey;
  const dlg = document.getElementById("auth");
  const err = document.getElementById("auth-error");
  err.hidden = !message;
  err.textContent = message || "";
  askingForKey = new Promise((resolve) => {
    const form = document.getElementById("auth-form");
    form.onsubmit = (e) => {
      e.preventDefault();
      const key = document.getElementById("auth-key").value.trim();
      if (!key) return;
      sessionStorage.setItem(KEY, key);
      document.getElementById("auth-key").value = "";
      dlg.close();
      askingForKey = null;
      showSignOut();
      resolve();
    };
  });
  if (!dlg.open) dlg.showModal();
  return askingForKey;
}

function showSignOut() {
  document.getElementById("signout").hidden = !sessionStorage.getItem(KEY);
}

async function api(path, opts = {}) {
  for (;;) {
    const headers = Object.assign({ Accept: "application/json" }, opts.headers || {});
    const key = sessionStorage.getItem(KEY);
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch(path, { method: opts.method || "GET", headers, signal: opts.signal, body: opts.body });
    if (res.status === 401) {
      const body = await res.json().catch(() => ({}));
      sessionStorage.removeItem(KEY);
      await askForKey(key ? (body.error && body.error.message) || "That key was not accepted." : "");
      continue;
    }
    if (opts.stream && res.ok) return res;
    const body = res.status === 204 ? {} : await res.json().catch(() => ({}));
    if (!res.ok) {
      const e = body.error || {};
      throw new APIError(res.status, e.code || "HTTP_" + res.status, e.message || res.statusText);
    }
    return body;
  }
}

function post(path, body) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}) });
}

// ---- Routing and refresh: each view returns a refresh function, called every 2 s. ----

let view = { stop() {} };

function route() {
  view.stop();
  const hash = location.hash.replace(/^#/, "") || "/";
  const [path, query] = hash.split("?");
  const params = new URLSearchParams(query || "");
  let name = "overview", render;
  if (path === "/" || path === "") render = () => overview();
  else if (path === "/jobs") { name = "jobs"; render = () => jobs(params); }
  else if (path === "/dead") { name = "dead"; render = () => deadLetters(); }
  else if (path.startsWith("/jobs/")) { name = "jobs"; render = () => jobPage(decodeURIComponent(path.slice(6))); }
  else if (path === "/flows") { name = "flows"; render = () => flowsPage(); }
  else if (path.startsWith("/flows/")) { name = "flows"; render = () => flowPage(decodeURIComponent(path.slice(7))); }
  else if (path === "/schedules") { name = "schedules"; render = () => schedulesPage(); }
  else render = () => { main().replaceChildren(h("h1", {}, "Not found")); return null; };
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.nav === name);
  view = startView(render);
}

function startView(render) {
  let stopped = false, timer = null, stream = null;
  const live = document.getElementById("live");
  const state = { stop() { stopped = true; clearTimeout(timer); if (stream) stream.abort(); } };
  let refresh;
  const tick = async () => {
    if (stopped) return;
    if (!document.hidden) {
      try {
        await refresh();
        live.className = "live on";
        live.title = "Refreshes every 2 seconds";
      } catch (e) {
        live.className = "live off";
        if (!(e instanceof APIError) || e.status >= 500) live.title = `Refresh failed: ${e.message}`;
      }
    }
    if (!stopped) timer = setTimeout(tick, REFRESH_MS);
  };
  const r = render();
  if (r && r.refresh) {
    refresh = r.refresh;
    stream = r.stream || null;
    tick();
  }
  return state;
}

// ---- Overview: the archive's health, queues and workers. ----

const sum = (xs) => xs.reduce((a, b) => a + b, 0);

function sparkline(ok, bad) {
  const n = ok.length, max = Math.max(1, ...ok, ...bad);
  const points = (vals) => vals.map((v, i) => `${(i / (n - 1)) * 118 + 1},${27 - (v / max) * 25}`).join(" ");
  const s = svg("svg", { class: "spark", viewBox: "0 0 120 28", role: "img" });
  const total = sum(ok), failed = sum(bad);
  const title = svg("title", {});
  title.textContent = `last 60 minutes: ${total} succeeded, ${failed} failed; now ${ok[n - 1]}/min`;
  s.append(title, svg("polyline", { class: "ok", points: points(ok) }));
  if (failed > 0) s.append(svg("polyline", { class: "bad", points: points(bad) }));
  return s;
}

// archiveStatus says what the scrubs found of the archive segments (GET /v1/archive): each
// damaged segment, loudly, or one quiet line when all is well.
function archiveStatus(a) {
  const scrubbed = a.scrub.last_end ? `last scrubbed ${ago(a.scrub.last_end)}` : a.scrub.every_seconds ? "scrub under way" : "scrubs off";
  const summary = `${a.segments} archive segment${a.segments === 1 ? "" : "s"}, ${scrubbed}`;
  if (a.damaged.length === 0) return h("div", { class: "empty", "data-archive": "whole" }, summary);
  return [
    h("p", { class: "alert", "data-archive": "damaged" },
      `${a.damaged.length} damaged archive segment${a.damaged.length === 1 ? "" : "s"}: their records do not read until a good copy is put back under the same name (tether replay verify --archive checks a copy). ${summary}.`),
    table("archive", [["Segment"], ["Records", "num"], ["What is wrong"], ["Found"]],
      a.damaged.map((d) => h("tr", { "data-segment": d.segment },
        cell("Segment", d.segment, "wrap"),
        cell("Records", `${d.first_seq}..${d.last_seq}`, "num"),
        cell("What is wrong", d.reason, "wrap"),
        cell("Found", ago(d.found_at)))), ""),
  ];
}

function overview() {
  const archive = h("section", { class: "card", "data-test": "archive" });
  const queues = h("section", { class: "card", "data-test": "queues" });
  const workers = h("section", { class: "card", "data-test": "workers" });
  main().replaceChildren(h("h1", {}, "Overview"), archive, h("h2", {}, "Queues"), queues, h("h2", {}, "Workers"), workers);
  const view = {
    async refresh() {
      const [a, q, w] = await Promise.all([api("/v1/archive"), api("/v1/queues"), api("/v1/workers")]);
      archive.replaceChildren(...[archiveStatus(a)].flat());
      queues.replaceChildren(table("queues", [["Queue"], ["State"], ["Depth", "num"], ["Running", "num"], ["Scheduled", "num"], ["Dead", "num"], ["Oldest", "num"], ["Last hour"], [""]],
        q.queues.map((x) => h("tr", { "data-queue": x.name, "data-paused": x.paused ? "true" : "false" },
          cell("Queue", h("a", { href: `#/jobs?queue=${encodeURIComponent(x.name)}` }, x.name)),
          cell("State", x.paused ? h("span", { class: "badge s-paused", title: `paused ${ago(x.paused_since)}: takes submits, assigns nothing` }, "paused") : "active"),
          cell("Depth", x.depth, "num"),
          cell("Running", x.leased, "num"),
          cell("Scheduled", x.scheduled, "num"),
          cell("Dead", x.dead ? h("a", { href: `#/jobs?status=failed&queue=${encodeURIComponent(x.name)}` }, x.dead) : 0, "num"),
          cell("Oldest", age(x.oldest_age_seconds), "num"),
          cell("Last hour", h("span", { class: "spark-cell" }, sparkline(x.succeeded_per_minute, x.failed_per_minute),
            h("span", { class: "spark-n", "data-test": "done-last-hour" }, sum(x.succeeded_per_minute)))),
          cell("", h("button", { type: "button", class: x.paused ? "primary" : "", "data-action": x.paused ? "resume" : "pause",
            onclick: (e) => pauseQueue(e, x.name, !x.paused, view.refresh) }, x.paused ? "Resume" : "Pause")))),
        "No queues yet: submit a job and its queue appears here."));
      workers.replaceChildren(table("workers", [["Worker"], ["Status"], ["Transport"], ["Running", "num"], ["Capacity", "num"], ["Queues"], ["Last seen"]],
        w.workers.map((x) => h("tr", { "data-worker": x.id },
          cell("Worker", h("span", { title: x.id }, x.name || x.id)),
          cell("Status", badge(x.status)),
          cell("Transport", x.transport || "—"),
          cell("Running", x.in_flight.length ? h("span", { title: x.in_flight.join("\n") }, x.in_flight.length) : 0, "num"),
          cell("Capacity", x.capacity, "num"),
          cell("Queues", x.queues.join(", "), "wrap"),
          cell("Last seen", x.status === "online" ? `online since ${ago(x.last_seen)}` : ago(x.last_seen)))),
        "No workers registered."));
    },
  };
  return view;
}

// pauseQueue pauses a queue (it keeps taking submits and assigns nothing) or resumes it.
async function pauseQueue(e, name, pause, after) {
  e.preventDefault();
  e.currentTarget.disabled = true;
  try {
    await post(`/v1/queues/${encodeURIComponent(name)}/${pause ? "pause" : "resume"}`);
    toast(pause ? `Paused ${name}: it takes submits and assigns nothing` : `Resumed ${name}`);
  } catch (err) {
    toast(`${err.code}: ${err.message}`, true);
  }
  if (after) await after();
}

// ---- Jobs: filters, newest first, paged by cursor. ----

const STATUSES = ["", "queued", "scheduled", "leased", "succeeded", "failed", "cancelled"];

// jobActions are the buttons for job j; after runs once one has acted, and afterDelete (if
// given) instead of it once the job is deleted.
function jobActions(j, after, afterDelete) {
  const out = [];
  if (j.status === "failed") {
    out.push(h("button", { type: "button", class: "primary", "data-action": "retry", onclick: (e) => act(e, j, "retry", after) }, "Re-drive"));
  }
  if (["queued", "scheduled", "leased"].includes(j.status) && !j.cancel_requested) {
    out.push(h("button", { type: "button", class: "danger", "data-action": "cancel", onclick: (e) => act(e, j, "cancel", after) }, "Cancel"));
  }
  if (["succeeded", "failed", "cancelled"].includes(j.status)) {
    out.push(h("button", { type: "button", class: "danger", "data-action": "delete", onclick: (e) => remove(e, j, afterDelete || after) }, "Delete"));
  }
  return out;
}

// remove deletes a finished job on a second click: the first arms the button, so a stray click
// deletes nothing.
async function remove(e, j, after) {
  e.preventDefault();
  const b = e.currentTarget;
  if (!b.dataset.armed) {
    b.dataset.armed = "1";
    b.textContent = "Delete for good?";
    return;
  }
  b.disabled = true;
  try {
    await api(`/v1/jobs/${encodeURIComponent(j.id)}`, { method: "DELETE" });
    toast(`Deleted ${j.id}`);
  } catch (err) {
    toast(`${err.code}: ${err.message}`, true);
  }
  if (after) await after();
}

async function act(e, j, what, after) {
  e.preventDefault();
  e.currentTarget.disabled = true;
  try {
    const got = await post(`/v1/jobs/${encodeURIComponent(j.id)}/${what}`);
    toast(what === "retry" ? `Re-driven: ${j.id} is ${got.status}` : got.cancel_requested ? `Cancel requested: the worker is told` : `Cancelled ${j.id}`);
  } catch (err) {
    toast(`${err.code}: ${err.message}`, true);
  }
  if (after) await after();
}

function jobRows(list, withReason, after) {
  return list.map((j) => h("tr", { "data-job": j.id },
    cell("Job", h("a", { href: `#/jobs/${encodeURIComponent(j.id)}`, class: "mono" }, j.id)),
    cell("Queue", j.queue),
    cell("Type", j.type, "wrap"),
    cell("Status", [badge(j.status), j.cancel_requested ? " cancel requested" : ""]),
    cell("Attempt", `${j.attempt}/${j.max_attempts}`, "num"),
    withReason ? cell("Reason", [j.dead_reason, j.error ? ` · ${j.error.code}${j.error.message ? ": " + j.error.message : ""}` : ""], "wrap") : null,
    cell("Updated", h("span", { title: j.updated_at }, ago(j.updated_at))),
    cell("", jobActions(j, after))));
}

function jobs(params) {
  const status = params.get("status") || "", queue = params.get("queue") || "", type = params.get("type") || "";
  const cursor = params.get("cursor") || "";
  const form = h("form", { class: "filters", "data-test": "filters" },
    h("label", {}, "Status", h("select", { name: "status" }, STATUSES.map((s) => h("option", { value: s, selected: s === status }, s || "any")))),
    h("label", {}, "Queue", h("input", { name: "queue", value: queue, placeholder: "any", maxlength: 128 })),
    h("label", {}, "Type", h("input", { name: "type", value: type, placeholder: "any", maxlength: 128 })),
    h("button", { type: "submit" }, "Filter"));
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) p.set(k, v);
    location.hash = `#/jobs${p.toString() ? "?" + p : ""}`;
  });
  form.querySelector("select").addEventListener("change", () => form.requestSubmit());
  const list = h("section", { class: "card", "data-test": "jobs" });
  const pager = h("div", { class: "pager" });
  main().replaceChildren(h("h1", {}, "Jobs"), form, list, pager);
  const page = (c) => {
    const p = new URLSearchParams(params);
    if (c) p.set("cursor", c); else p.delete("cursor");
    return `#/jobs?${p}`;
  };
  const load = async () => {
    const q = new URLSearchParams({ order: "newest", limit: PAGE });
    if (status) q.set("status", status);
    if (queue) q.set("queue", queue);
    if (type) q.set("type", type);
    if (cursor) q.set("cursor", cursor);
    const got = await api(`/v1/jobs?${q}`);
    list.replaceChildren(table("jobs", [["Job"], ["Queue"], ["Type"], ["Status"], ["Attempt", "num"], ["Updated"], [""]],
      jobRows(got.jobs, false, load), "No jobs match."));
    pager.replaceChildren(
      cursor ? h("a", { href: page("") }, "← Newest") : "",
      got.next_cursor ? h("a", { href: page(got.next_cursor), "data-test": "older" }, "Older →") : "");
  };
  return { refresh: load };
}

function deadLetters() {
  const list = h("section", { class: "card", "data-test": "dead" });
  const purge = h("form", { class: "filters", "data-test": "purge" },
    h("label", {}, "Queue", h("input", { name: "queue", placeholder: "every queue", maxlength: 64 })),
    h("label", {}, "Older than", h("select", { name: "older" },
      [["3600", "1 hour"], ["86400", "1 day"], ["604800", "7 days"], ["0", "any age"]].map(([v, t]) => h("option", { value: v }, t)))),
    h("button", { type: "submit", class: "danger" }, "Purge"));
  purge.addEventListener("submit", async (e) => {
    e.preventDefault();
    const f = new FormData(purge);
    const body = { queue: f.get("queue") || undefined, older_than_seconds: Number(f.get("older")) };
    let total = 0;
    try {
      for (;;) { // the server takes at most 1,000 a call
        const got = await post("/v1/dead-letters/purge", body);
        total += got.purged;
        if (!got.more || got.purged === 0) break;
      }
      toast(`Purged ${total} dead letter${total === 1 ? "" : "s"}`);
    } catch (err) {
      toast(`${err.code}: ${err.message}`, true);
    }
    await load();
  });
  main().replaceChildren(h("h1", {}, "Dead letters"),
    h("p", {}, "Jobs that failed for good. Re-driving one puts it back in its queue with a fresh attempt budget; purging takes old ones out of every view."),
    purge, list);
  const load = async () => {
    const got = await api(`/v1/jobs?status=failed&order=newest&limit=${PAGE}`);
    list.replaceChildren(table("dead", [["Job"], ["Queue"], ["Type"], ["Status"], ["Attempt", "num"], ["Reason"], ["Updated"], [""]],
      jobRows(got.jobs, true, load), "The dead-letter queue is empty."));
  };
  return { refresh: load };
}

// ---- A job: its facts, its actions, and its event timeline as it happens. ----

function pretty(raw) {
  if (raw === undefined || raw === null) return "—";
  return JSON.stringify(raw, null, 2);
}

function jobPage(id) {
  const facts = h("section", { class: "card", "data-test": "job" });
  // Why it is not running (or whom it runs on): GET /v1/jobs/{id}/explain, the dispatcher's own reason.
  const why = h("p", { class: "why", "data-test": "explain" });
  const actions = h("div", { class: "actions" });
  const streamState = h("span", { class: "stream-state", "data-test": "stream-state" }, "connecting…");
  const timeline = h("ol", { class: "timeline", "data-test": "timeline" });
  const payload = h("pre", { "data-test": "payload" });
  const output = h("pre", { "data-test": "output" });
  main().replaceChildren(
    h("h1", {}, "Job ", h("span", { class: "mono" }, id)),
    facts, why, actions,
    h("h2", {}, "Timeline", streamState), h("section", { class: "card" }, timeline),
    h("h2", {}, "Payload"), h("section", { class: "card" }, payload),
    h("h2", {}, "Output"), h("section", { class: "card" }, output));

  const show = (j) => {
    const lease = j.lease ? [h("span", { class: "mono" }, j.lease.worker_id), ` until ${clock(j.lease.expires_at)}`] : "—";
    facts.replaceChildren(h("dl", { class: "facts" },
      h("dt", {}, "Status"), h("dd", {}, badge(j.status), j.cancel_requested ? " cancel requested" : "", j.dead_reason ? ` (${j.dead_reason})` : ""),
      h("dt", {}, "Queue"), h("dd", {}, j.queue),
      h("dt", {}, "Type"), h("dd", {}, j.type),
      h("dt", {}, "Attempt"), h("dd", {}, `${j.attempt} of ${j.max_attempts}`),
      h("dt", {}, "Priority"), h("dd", {}, j.priority),
      h("dt", {}, "Lease"), h("dd", {}, lease),
      h("dt", {}, "Error"), h("dd", {}, j.error ? `${j.error.code}${j.error.message ? ": " + j.error.message : ""}` : "—"),
      h("dt", {}, "Created"), h("dd", {}, new Date(j.created_at).toLocaleString()),
      h("dt", {}, "Updated"), h("dd", {}, new Date(j.updated_at).toLocaleString()),
      j.expires_at ? [h("dt", {}, "Expires"), h("dd", {}, new Date(j.expires_at).toLocaleString())] : null,
      j.events_truncated ? [h("dt", {}, "Events"), h("dd", {}, "older progress is in the log only")] : null));
    actions.replaceChildren(...jobActions(j, refresh, () => { location.hash = "#/jobs"; }));
    payload.textContent = pretty(j.payload);
    output.textContent = pretty(j.output);
  };
  // The reason asks the dispatcher, so it is asked when the status changed or 2 s have passed,
  // not at every event of a job that logs fast; a failed ask clears it rather than leave an
  // old one.
  let explained = { status: "", at: 0 };
  const explainJob = async (j) => {
    if (["succeeded", "failed", "cancelled"].includes(j.status)) { why.replaceChildren(); return; }
    const now = Date.now();
    if (j.status === explained.status && now - explained.at < 2000) return;
    explained = { status: j.status, at: now };
    try {
      const x = await api(`/v1/jobs/${encodeURIComponent(id)}/explain`);
      why.replaceChildren(h("span", { class: "mono", "data-code": x.code }, x.code), " ", x.message);
    } catch (e) {
      why.replaceChildren();
    }
  };
  const refresh = async () => {
    try {
      const j = await api(`/v1/jobs/${encodeURIComponent(id)}`);
      show(j);
      explainJob(j);
    } catch (e) {
      if (e.status === 404 || e.status === 410) {
        facts.replaceChildren(h("div", { class: "empty" }, e.status === 410
          ? `Job ${id} has expired: its retention ended, or it was deleted.` : `No job ${id} for this key.`));
        controller.abort();
        return;
      }
      throw e;
    }
  };

  // The timeline: SSE over fetch (EventSource cannot send the Authorization header), resumed
  // with Last-Event-ID after a drop, so no event is missed or shown twice.
  const controller = new AbortController();
  let last = 0;
  const add = (ev) => {
    last = ev.number;
    // A worker's own event (job.progress) shows as the type it named, with its data.
    let label = ev.type, shown = ev.data;
    if (ev.type === "job.progress" && ev.data) [label, shown] = [ev.data.event_type, ev.data.data];
    else if (shown && typeof shown === "object") {
      const { job_id: _, ...rest } = shown; // the page is this job's already
      shown = rest;
    }
    let data = shown === undefined || shown === null ? "" : JSON.stringify(shown);
    if (data === "{}") data = "";
    timeline.append(h("li", { class: "fresh", "data-event": ev.type, "data-number": ev.number },
      h("span", { class: "n" }, ev.number),
      h("span", { class: "t", title: ev.time }, clock(ev.time)),
      h("span", { class: "mono" }, label),
      h("span", { class: "d" }, data.length > 400 ? data.slice(0, 400) + "…" : data)));
  };
  (async () => {
    let backoff = 500;
    while (!controller.signal.aborted) {
      try {
        const res = await api(`/v1/jobs/${encodeURIComponent(id)}/events`, {
          stream: true, signal: controller.signal,
          headers: Object.assign({ Accept: "text/event-stream" }, last ? { "Last-Event-ID": String(last) } : {}),
        });
        streamState.textContent = "live";
        backoff = 500;
        const done = await readEvents(res.body, (type, data) => {
          if (type === "done") return;
          add(JSON.parse(data));
          refresh().catch(() => {});
        });
        if (done) {
          streamState.textContent = "finished";
          refresh().catch(() => {});
          return;
        }
      } catch (e) {
        if (controller.signal.aborted) return;
        if (e instanceof APIError && e.status < 500) {
          streamState.textContent = `${e.code}: ${e.message}`;
          return;
        }
      }
      streamState.textContent = "reconnecting…";
      await new Promise((r) => setTimeout(r, backoff));
      backoff = Math.min(backoff * 2, 10000);
    }
  })();
  return { refresh, stream: controller };
}

// ---- Flows: a list, and each flow drawn as its graph of steps, live. ----

function flowsPage() {
  const list = h("section", { class: "card", "data-test": "flows" });
  main().replaceChildren(h("h1", {}, "Flows"), list);
  return {
    async refresh() {
      const page = await api(`/v1/flows?limit=${PAGE}`);
      list.replaceChildren(table("flows", [["Flow"], ["Name"], ["Status"], ["Steps", "num"], ["Created"]],
        page.flows.map((f) => {
          const steps = Object.values(f.steps);
          const done = steps.filter((s) => s.status === "succeeded").length;
          return h("tr", { "data-flow": f.id },
            cell("Flow", h("a", { href: `#/flows/${encodeURIComponent(f.id)}`, class: "mono" }, f.id)),
            cell("Name", f.name),
            cell("Status", badge(f.status)),
            cell("Steps", `${done}/${steps.length}`, "num"),
            cell("Created", ago(f.created_at)));
        }),
        "No flows yet: POST a flow file to /v1/flows, or run tether flow submit."));
    },
  };
}

// layers places each step in the column after the deepest step it needs.
function layers(steps) {
  const depth = {};
  const visit = (name, seen) => {
    if (depth[name] !== undefined) return depth[name];
    if (seen.has(name)) return 0; // not a DAG: cannot come from the server
    seen.add(name);
    const needs = (steps[name] || {}).needs || [];
    depth[name] = needs.length ? 1 + Math.max(...needs.map((n) => visit(n, seen))) : 0;
    return depth[name];
  };
  const cols = [];
  for (const name of Object.keys(steps).sort()) {
    const d = visit(name, new Set());
    (cols[d] = cols[d] || []).push(name);
  }
  return cols.map((c) => c || []);
}

const NODE_W = 150, NODE_H = 44, GAP_X = 60, GAP_Y = 18;

// flowGraph draws a flow's steps as an SVG: a box per step, coloured by its status, and an
// arrow from each step to the steps that need it.
function flowGraph(f) {
  const cols = layers(f.steps);
  const rows = Math.max(1, ...cols.map((c) => c.length));
  const width = cols.length * (NODE_W + GAP_X) - GAP_X + 20, height = rows * (NODE_H + GAP_Y) - GAP_Y + 20;
  const at = {};
  cols.forEach((names, i) => names.forEach((name, j) => {
    at[name] = { x: 10 + i * (NODE_W + GAP_X), y: 10 + j * (NODE_H + GAP_Y) + ((rows - names.length) * (NODE_H + GAP_Y)) / 2 };
  }));
  const g = svg("svg", { class: "flow-graph", viewBox: `0 0 ${width} ${height}`, width, height, role: "img", "data-test": "flow-graph" });
  const defs = svg("defs", {});
  const marker = svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, orient: "auto-start-reverse" });
  marker.append(svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }));
  defs.append(marker);
  g.append(defs);
  for (const [name, s] of Object.entries(f.steps)) {
    for (const need of s.needs) {
      const a = at[need], b = at[name];
      if (!a || !b) continue;
      const x1 = a.x + NODE_W, y1 = a.y + NODE_H / 2, x2 = b.x, y2 = b.y + NODE_H / 2, mx = (x1 + x2) / 2;
      g.append(svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`, class: "edge", "marker-end": "url(#arrow)", "data-edge": `${need}>${name}` }));
    }
  }
  for (const name of Object.keys(f.steps).sort()) {
    const s = f.steps[name], p = at[name];
    const node = svg("g", { class: `node s-${s.status}`, "data-step": name, "data-status": s.status, transform: `translate(${p.x},${p.y})` });
    const title = svg("title", {});
    const waiting = (s.waiting_for || []).join(", ");
    title.textContent = `${name}: ${s.status}${s.job_id ? " (job " + s.job_id + ")" : ""}${s.continue_on_failure ? ", continue_on_failure" : ""}${waiting ? ", waiting for " + waiting : ""}`;
    const label = svg("text", { x: 10, y: 18, class: "name" });
    label.textContent = name.length > 18 ? name.slice(0, 17) + "…" : name;
    const status = svg("text", { x: 10, y: 35, class: "status" });
    const says = waiting ? `waits for ${waiting}` : s.status;
    status.textContent = says.length > 22 ? says.slice(0, 21) + "…" : says;
    if (waiting) node.setAttribute("data-waiting-for", waiting);
    node.append(title, svg("rect", { width: NODE_W, height: NODE_H, rx: 8 }), label, status);
    if (s.job_id) {
      const link = svg("a", { href: `#/jobs/${encodeURIComponent(s.job_id)}` });
      link.append(node);
      g.append(link);
    } else {
      g.append(node);
    }
  }
  return g;
}

function flowPage(id) {
  const facts = h("section", { class: "card", "data-test": "flow" });
  const actions = h("div", { class: "actions" });
  const graph = h("section", { class: "card graph" });
  main().replaceChildren(h("h1", {}, "Flow ", h("span", { class: "mono" }, id)), facts, actions, h("h2", {}, "Steps"), graph);
  const refresh = async () => {
    let f;
    try {
      f = await api(`/v1/flows/${encodeURIComponent(id)}`);
    } catch (e) {
      if (e.status === 404) {
        facts.replaceChildren(h("div", { class: "empty" }, `No flow ${id} for this key.`));
        return;
      }
      throw e;
    }
    facts.replaceChildren(h("dl", { class: "facts" },
      h("dt", {}, "Name"), h("dd", {}, f.name),
      h("dt", {}, "Status"), h("dd", {}, badge(f.status), f.failed_step ? ` at step ${f.failed_step}` : ""),
      h("dt", {}, "File"), h("dd", {}, `${f.yaml_bytes} bytes, sha256 `, h("span", { class: "mono" }, f.yaml_sha256)),
      h("dt", {}, "Created"), h("dd", {}, new Date(f.created_at).toLocaleString()),
      f.ended_at ? [h("dt", {}, "Ended"), h("dd", {}, new Date(f.ended_at).toLocaleString())] : null));
    actions.replaceChildren(f.status === "running"
      ? h("button", { type: "button", class: "danger", "data-action": "cancel-flow", onclick: async (e) => {
        e.preventDefault();
        e.currentTarget.disabled = true;
        try {
          await post(`/v1/flows/${encodeURIComponent(id)}/cancel`);
          toast(`Cancelled flow ${f.name}`);
        } catch (err) {
          toast(`${err.code}: ${err.message}`, true);
        }
        await refresh();
      } }, "Cancel flow")
      : "");
    graph.replaceChildren(flowGraph(f));
  };
  return { refresh };
}

// ---- Schedules: each with its next tick and last firing, paused, resumed or deleted here. ----

function schedulesPage() {
  const list = h("section", { class: "card", "data-test": "schedules" });
  main().replaceChildren(h("h1", {}, "Schedules"), list);
  // change pauses, resumes or deletes a schedule; a delete acts on a second click, as a job's.
  const change = async (e, sc, what) => {
    e.preventDefault();
    const b = e.currentTarget;
    if (what === "delete" && !b.dataset.armed) {
      b.dataset.armed = "1";
      b.textContent = "Delete for good?";
      return;
    }
    b.disabled = true;
    try {
      const path = `/v1/schedules/${encodeURIComponent(sc.id)}`;
      if (what === "delete") await api(path, { method: "DELETE" });
      else await post(`${path}/${what}`);
      toast(`${what === "pause" ? "Paused" : what === "resume" ? "Resumed" : "Deleted"} schedule ${sc.name}`);
    } catch (err) {
      toast(`${err.code}: ${err.message}`, true);
    }
    await refresh();
  };
  const refresh = async () => {
    const page = await api("/v1/schedules");
    list.replaceChildren(table("schedules", [["Name"], ["Cron"], ["Status"], ["Next"], ["Last fire"], ["Fired", "num"], ["Skipped", "num"], [""]],
      page.schedules.map((sc) => {
        const paused = sc.status === "paused";
        const skipped = Object.entries(sc.skipped).map(([why, n]) => `${n} ${why}`).join(", ");
        return h("tr", { "data-schedule": sc.id, "data-status": sc.status },
          cell("Name", h("span", { title: sc.id }, sc.name)),
          cell("Cron", h("span", { class: "mono" }, sc.cron), ` ${sc.timezone}`),
          cell("Status", badge(sc.status)),
          cell("Next", sc.next_fire_at ? new Date(sc.next_fire_at).toLocaleString() : "—"),
          cell("Last fire", sc.last_fire
            ? h("a", { href: `#/jobs/${encodeURIComponent(sc.last_fire.job_id)}`, class: "mono" }, ago(sc.last_fire.fired_at))
            : "—"),
          cell("Fired", String(sc.fired), "num"),
          cell("Skipped", skipped || "0", "num"),
          cell("", h("div", { class: "actions" },
            h("button", { type: "button", "data-action": paused ? "resume-schedule" : "pause-schedule",
              onclick: (e) => change(e, sc, paused ? "resume" : "pause") }, paused ? "Resume" : "Pause"),
            h("button", { type: "button", class: "danger", "data-action": "delete-schedule", title: "The jobs it fired stay",
              onclick: (e) => change(e, sc, "delete") }, "Delete"))));
      }),
      "No schedules yet: POST one to /v1/schedules, or run tether schedule create."));
  };
  return { refresh };
}

// readEvents parses a text/event-stream body, calling fn(type, data) per event. It resolves
// true once the server said the stream is done, false if the connection ended first.
async function readEvents(body, fn) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return false;
    buf += value.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      let type = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const val = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") type = val;
        else if (field === "data") data.push(val);
      }
      if (data.length === 0) continue;
      fn(type, data.join("\n"));
      if (type === "done") return true;
    }
  }
}

// ---- Start. ----

document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(KEY);
  showSignOut();
  route();
});
document.addEventListener("visibilitychange", () => { if (!document.hidden) route(); });
window.addEventListener("hashchange", route);
showSignOut();
// Ask for a key before the first call when the server wants one, rather than after a 401.
fetch("/readyz").then((r) => r.json()).catch(() => ({})).then(async (ready) => {
  if (ready.auth === "token" && !sessionStorage.getItem(KEY)) await askForKey("");
  route();
});
