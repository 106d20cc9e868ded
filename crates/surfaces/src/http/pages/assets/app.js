// hermes-agent dashboard: the few things a page cannot do without a script. Every page
// works without it; this adds the live timeline, the schedule preview and the checks.
// No inline script anywhere (the Content-Security-Policy forbids it): this file finds its
// work through data- attributes.
"use strict";

// ---- the live timeline (src/web/timeline.rs renders the same markup) ----------------------

const FOLD_CHARS = 240;
const FOLD_LINES = 4;

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

function oneLine(text, max) {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length <= max ? flat : flat.slice(0, max - 1) + "…";
}

// Text as written; long text folded into <details>, its first line as the summary.
function longText(text, cls) {
  const chars = Array.from(text).length;
  if (chars > FOLD_CHARS || text.split("\n").length > FOLD_LINES) {
    const d = el("details", cls);
    const s = el("summary", null, oneLine(text, 80) + " ");
    s.appendChild(el("span", "muted", "(" + chars + " characters)"));
    d.appendChild(s);
    d.appendChild(el("pre", null, text));
    return d;
  }
  return el("pre", cls, text);
}

function labelled(li, label, text, cls) {
  li.appendChild(el("div", "label", label));
  li.appendChild(longText(text, cls));
}

function renderStep(s) {
  const li = el("li", "step " + s.kind + " new");
  li.dataset.seq = s.seq;
  const head = el("div", "head");
  head.append(el("span", "n", String(s.step)), " ", el("span", "kind", s.kind), " ",
    el("b", "name", s.name), " ");
  let meta = "";
  if (s.kind === "model") {
    meta = s.duration_ms + " ms · " + s.request_tokens + " → " + s.result_tokens + " tokens";
  } else if (s.kind === "tool") {
    meta = s.duration_ms + " ms";
  }
  head.appendChild(el("span", "meta", meta));
  li.appendChild(head);
  if (s.kind === "model") {
    if (s.arguments && s.arguments !== "[]") labelled(li, "tool calls", s.arguments, "args");
    if (s.output) labelled(li, "answer", s.output, "out");
  } else if (s.kind === "tool") {
    if (s.arguments !== null) labelled(li, "arguments", s.arguments, "args");
    if (s.output !== null) labelled(li, "result", s.output, "out");
  } else if (s.output !== null) {
    li.appendChild(el("p", "note", s.output));
  }
  if (s.error) li.appendChild(el("p", "error", s.error));
  return li;
}

function followTask(list) {
  const url = list.dataset.events;
  const source = new EventSource(url);
  source.addEventListener("step", (ev) => {
    const s = JSON.parse(ev.data);
    if (list.querySelector('[data-seq="' + s.seq + '"]')) return; // a replay after a reconnect
    const empty = document.getElementById("no-steps");
    if (empty) empty.remove();
    list.appendChild(renderStep(s));
  });
  source.addEventListener("state", (ev) => {
    // The task ended: stop the stream (or EventSource would reconnect) and show the final
    // page, answer and deliveries rendered by the server.
    source.close();
    const st = JSON.parse(ev.data);
    const badge = document.querySelector("#task-state .badge");
    if (badge) { badge.textContent = st.state; badge.dataset.state = st.state; }
    window.location.reload();
  });
  source.addEventListener("error", () => {
    // EventSource retries by itself, sending Last-Event-ID; nothing to do.
  });
}

// ---- the schedule preview -----------------------------------------------------------------

const WEEKDAYS = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

// "2026-12-01T08:00:00+01:00" → "Tue 2026-12-01 08:00", as the job's page writes firings.
function firing(t) {
  const date = t.slice(0, 10);
  const day = new Date(date + "T12:00:00Z").getUTCDay();
  return (isNaN(day) ? "" : WEEKDAYS[day] + " ") + date + " " + t.slice(11, 16);
}

function schedulePreview(form) {
  const expr = form.querySelector("#job-schedule");
  const zone = form.querySelector("#job-timezone");
  const out = form.querySelector("#schedule-preview");
  let timer = null;
  let asked = 0;
  async function check() {
    const mine = ++asked;
    if (!expr.value.trim()) {
      out.replaceChildren();
      expr.setCustomValidity("");
      return;
    }
    const q = "expr=" + encodeURIComponent(expr.value) + "&timezone=" + encodeURIComponent(zone.value);
    let p;
    try {
      const r = await fetch("/v1/schedule?" + q, { credentials: "same-origin", headers: { accept: "application/json" } });
      if (!r.ok) return;
      p = await r.json();
    } catch (e) {
      return;
    }
    if (mine !== asked) return; // an older answer arriving late
    out.replaceChildren();
    if (p.valid) {
      expr.setCustomValidity("");
      out.appendChild(el("p", "ok-line", "✓ " + p.description + " (" + p.timezone + ")"));
      out.appendChild(el("p", "hint", "Next firings:"));
      const ol = el("ol", "next");
      for (const t of p.next) ol.appendChild(el("li", null, firing(t)));
      out.appendChild(ol);
    } else {
      expr.setCustomValidity(p.error);
      out.appendChild(el("p", "error", p.error));
    }
  }
  const later = () => { clearTimeout(timer); timer = setTimeout(check, 250); };
  expr.addEventListener("input", later);
  zone.addEventListener("input", later);
  check();
}

// ---- doctor's checks on /settings ---------------------------------------------------------

async function loadChecks(box) {
  try {
    const r = await fetch(box.dataset.src, { credentials: "same-origin" });
    const html = await r.text();
    // Server-rendered, escaped markup of our own origin.
    box.innerHTML = r.ok ? html : '<p class="error">The checks could not run (' + r.status + ").</p>";
  } catch (e) {
    box.textContent = "The checks could not run: " + e;
  }
  box.setAttribute("aria-busy", "false");
}

document.addEventListener("DOMContentLoaded", () => {
  const list = document.querySelector("#timeline[data-events]");
  if (list) followTask(list);
  const form = document.getElementById("job-form");
  if (form) schedulePreview(form);
  const checks = document.querySelector("#checks[data-src]");
  if (checks) loadChecks(checks);
});
