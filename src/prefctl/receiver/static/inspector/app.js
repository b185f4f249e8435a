// The inspector page of `prefctl receive --ui`. Plain JavaScript, no dependencies.
// Data: Server-Sent Events from api/events (batches of the `prefctl receive -o json` lines),
// request details from api/requests/N (…/curl, …/resend), body search from api/search, the
// fault plan from api/faults.
// Everything a request sent is shown with textContent, never parsed as HTML.
"use strict";

const KEEP = 2000; // records kept in the page (the newest)
const ROWS = 300; // rows drawn (the newest that pass the filter)

const state = {
  records: [], // {seq, line} oldest first
  total: 0,
  skipped: 0,
  paused: false,
  selected: null, // the request shown in the detail pane
  cursor: null, // the row j/k stand on
  types: new Set(),
  dirty: false,
  query: "", // the search, lower case
  bodyQuery: "", // the search api/search answered for
  bodyMatches: new Set(), // seqs whose body holds bodyQuery
};

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// -- the live feed ------------------------------------------------------------------------------
function connect() {
  const source = new EventSource("api/events");
  source.onopen = () => setConnection();
  source.onerror = () => setConnection("off");
  source.onmessage = (message) => receive(message.data);
  source.addEventListener("faults", (message) => showFaults(JSON.parse(message.data)));
}

function receive(data) {
  const lines = data.split("\n");
  const meta = JSON.parse(lines[0]);
  state.total = meta.total;
  state.skipped += meta.skipped;
  let seq = meta.first;
  for (let i = 1; i < lines.length; i++) {
    const line = JSON.parse(lines[i]);
    state.records.push({ seq: seq++, line });
    if (line.event_type && !state.types.has(line.event_type)) addType(line.event_type);
  }
  if (state.records.length > KEEP) {
    state.skipped += state.records.length - KEEP;
    state.records.splice(0, state.records.length - KEEP);
  }
  schedule();
}

function addType(type) {
  state.types.add(type);
  const select = $("filter-type");
  const option = el("option", null, type);
  option.value = type;
  const after = [...select.options].slice(1).find((o) => o.value > type);
  select.insertBefore(option, after || null);
}

function schedule() {
  if (state.dirty) return;
  state.dirty = true;
  requestAnimationFrame(() => {
    state.dirty = false;
    render();
  });
}

function setConnection(how) {
  const pill = $("connection");
  const mode = how || (state.paused ? "paused" : "live");
  pill.className = "pill " + mode;
  pill.textContent = mode === "off" ? "disconnected" : mode;
}

// -- filters ------------------------------------------------------------------------------------
function passes(record) {
  const line = record.line;
  const type = $("filter-type").value;
  const verdict = $("filter-verdict").value;
  const status = $("filter-status").value;
  if (type && line.event_type !== type) return false;
  if (verdict === "not-valid") {
    if (line.signature === "valid") return false;
  } else if (verdict && line.signature !== verdict) return false;
  if (status === "reset") return line.status === null;
  if (status && (line.status === null || String(line.status)[0] !== status)) return false;
  return matches(record);
}

// The search: a substring of the EventId, ProfileId, EventType, path or signature reason, or of
// the body (the receiver searches the bodies it keeps: api/search).
function matches(record) {
  const q = state.query;
  if (!q) return true;
  const line = record.line;
  for (const field of [line.event_id, line.profile_id, line.event_type, line.path, line.reason, line.fault]) {
    if (field !== null && field !== undefined && String(field).toLowerCase().includes(q)) return true;
  }
  return state.bodyQuery === q && state.bodyMatches.has(record.seq);
}

let searchTimer = null;
function search() {
  state.query = $("search").value.trim().toLowerCase();
  render();
  clearTimeout(searchTimer);
  const q = state.query;
  if (!q) {
    $("search-note").textContent = "";
    return;
  }
  $("search-note").textContent = "searching bodies…";
  searchTimer = setTimeout(async () => {
    const response = await fetch(`api/search?q=${encodeURIComponent(q)}`, { cache: "no-store" });
    const answer = await response.json();
    if (q !== state.query) return;
    if (!response.ok) {
      $("search-note").textContent = answer.error;
      return;
    }
    state.bodyQuery = q;
    state.bodyMatches = new Set(answer.seqs);
    $("search-note").textContent = `${answer.seqs.length} kept ${answer.seqs.length === 1 ? "body holds" : "bodies hold"} it`;
    render();
  }, 200);
}

// -- the table ----------------------------------------------------------------------------------
function render() {
  $("count-total").textContent = state.total;
  $("count-skipped").textContent = state.skipped;
  if (state.paused) return;
  const shown = [];
  let hidden = 0;
  for (let i = state.records.length - 1; i >= 0; i--) {
    const record = state.records[i];
    if (!passes(record)) hidden++;
    else if (shown.length < ROWS) shown.push(record);
  }
  const body = $("rows");
  const rows = document.createDocumentFragment();
  for (const record of shown) rows.appendChild(row(record));
  body.replaceChildren(rows);
  $("count-shown").textContent = shown.length;
  $("count-hidden").textContent = hidden;
  $("empty").hidden = state.records.length > 0;
}

function time(text) {
  const at = new Date(text);
  if (isNaN(at)) return text || "";
  const pad = (n, w) => String(n).padStart(w || 2, "0");
  return `${pad(at.getHours())}:${pad(at.getMinutes())}:${pad(at.getSeconds())}.${pad(at.getMilliseconds(), 3)}`;
}

function row(record) {
  const line = record.line;
  const tr = el("tr");
  tr.dataset.seq = record.seq;
  if (line.kind === "handshake") tr.classList.add("handshake");
  if (record.seq === state.selected) tr.classList.add("selected");
  if (record.seq === state.cursor) tr.classList.add("cursor");
  const status = line.status === null ? "RST" : line.status;
  const statusClass = line.status === null ? "sR" : "s" + String(line.status)[0];
  const sig = line.signature === "valid" ? "valid" : line.reason ? `${line.signature}: ${line.reason}` : line.signature;
  const cells = [
    [time(line.time)],
    [status, statusClass],
    [line.kind === "other" ? `${line.method} ${line.path}` : line.event_type || "-"],
    [line.event_id || "-"],
    [line.profile_id === null || line.profile_id === undefined ? "-" : line.profile_id],
    [sig, line.signature === "valid" ? "sig-valid" : ["invalid", "missing"].includes(line.signature) ? "sig-bad" : ""],
    [line.latency_ms === null || line.latency_ms === undefined ? "-" : `${Math.round(line.latency_ms)} ms`],
    null,
    [line.fault ? faultWords(line.fault) : "", "", line.fault],
  ];
  cells.forEach((cell, index) => {
    const td = el("td");
    if (index === 0) td.className = "c-time";
    if (index === 6) td.className = "c-lat";
    if (cell === null) {
      if (line.kind === "handshake") td.appendChild(el("span", "flag hs", "handshake"));
      if (line.duplicate) td.appendChild(el("span", "flag dup", "duplicate"));
      if (line.out_of_order) td.appendChild(el("span", "flag ooo", "out of order"));
      if (line.attempt > 1) td.appendChild(el("span", "flag att", `attempt ${line.attempt}`));
    } else {
      td.textContent = String(cell[0]);
      td.title = cell[2] ? `${cell[0]} (${cell[2]})` : String(cell[0]);
      if (cell[1]) td.classList.add(cell[1]);
    }
    tr.appendChild(td);
  });
  return tr;
}

// -- words for the fault plan and each request's fault ------------------------------------------
const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;

// "fail-first 1/2" → "failing the first 2 requests (1 done)"
function faultWords(label) {
  let m = /^fail-first (\d+)\/(\d+)$/.exec(label);
  if (m) return `failing the first ${plural(Number(m[2]), "request", "requests")} (${m[1]} done)`;
  m = /^step (\d+) (\d+)\/(\d+)$/.exec(label);
  if (m) return `fault plan step ${m[1]}: request ${m[2]} of ${m[3]}`;
  const words = {
    "fail-rate": "failed at random (the fail rate)",
    delay: "answered late (the delay)",
    respond: "answered with the --respond status",
    after: "the plan's answer after its steps",
  };
  return words[label] || label;
}

// "3×503, delay 1s" → "the next 3 answered 503, every answer 1 s late"
function planWords(plan) {
  if (!plan || plan === "none") return "none: every request answered normally";
  return plan.split(", ").map((part) => {
    let m = /^(\d+)×(\d{3})(?: after ([\d.]+)s)?$/.exec(part);
    if (m) return `the next ${m[1] === "1" ? "request" : `${m[1]} requests`} answered ${m[2]}${m[3] ? ` after ${m[3]} s` : ""}`;
    m = /^(\d+)×reset$/.exec(part);
    if (m) return `the next ${plural(Number(m[1]), "connection", "connections")} reset`;
    m = /^(\d+)×normal$/.exec(part);
    if (m) return `the next ${plural(Number(m[1]), "request", "requests")} answered normally`;
    m = /^delay ([\d.]+)s$/.exec(part);
    if (m) return `every answer ${m[1]} s late`;
    m = /^fail-rate ([\d.]+) → (\d+)$/.exec(part);
    if (m) return `a share of ${m[1]} answered ${m[2]} at random`;
    m = /^then (.+)$/.exec(part);
    if (m) return `then ${m[1] === "reset" ? "connections reset" : `answered ${m[1]}`}`;
    if (part === "repeat") return "and again from the start";
    return part;
  }).join(", ");
}

// -- the detail view ----------------------------------------------------------------------------
async function open(seq) {
  state.selected = seq;
  state.cursor = seq;
  for (const tr of $("rows").children) {
    tr.classList.toggle("selected", Number(tr.dataset.seq) === seq);
    tr.classList.toggle("cursor", Number(tr.dataset.seq) === seq);
  }
  $("action-status").textContent = "";
  $("copy-text").hidden = true;
  state.detail = null;
  const record = state.records.find((r) => r.seq === seq);
  const pane = $("detail");
  pane.hidden = false;
  $("detail-title").textContent = record ? record.line.event_type || `${record.line.method} ${record.line.path}` : `request ${seq}`;
  const response = await fetch(`api/requests/${seq}`, { cache: "no-store" });
  const detail = await response.json();
  if (state.selected !== seq) return; // another row was opened meanwhile
  if (!response.ok) {
    $("detail-summary").textContent = detail.error;
    $("detail-headers").replaceChildren();
    $("detail-body").replaceChildren();
    $("diff").hidden = true;
    return;
  }
  state.detail = detail;
  const v = detail.record.verdict;
  $("detail-summary").textContent =
    `${v.method} ${v.path} → ${v.status === null ? "connection reset" : v.status}` +
    ` · signature ${v.signature}${v.reason ? ` (${v.reason}: ${v.detail})` : ""}` +
    (v.event_id ? ` · EventId ${v.event_id}` : "") +
    (v.fault ? ` · fault: ${faultWords(v.fault)}` : "");
  showHeaders(detail.record.headers, detail.signature_header);
  const body = detail.record.body;
  const pre = $("detail-body");
  pre.replaceChildren(body === null ? el("span", "muted", detail.record.body_text || "(no body)") : json(body, new Set(), ""));
  showDiff(body);
}

function showHeaders(headers, signature) {
  const table = $("detail-headers");
  const rows = document.createDocumentFragment();
  for (const [name, value] of Object.entries(headers)) {
    const tr = el("tr");
    tr.append(el("td", null, name), el("td", null, value));
    rows.appendChild(tr);
    if (name === "service-webhook" && signature) {
      const parts = signature.error ? [["error", signature.error]] : [["Timestamp", signature.timestamp], ["Signature", signature.signature]];
      for (const [key, text] of parts) {
        const sub = el("tr", "sub");
        sub.append(el("td", null, key), el("td", null, text));
        rows.appendChild(sub);
      }
    }
  }
  table.replaceChildren(rows);
}

// Leaves of a JSON value by path: {"Emails[0].Address": "a@b"}.
function leaves(value, path, out) {
  if (value !== null && typeof value === "object") {
    const entries = Array.isArray(value) ? value.map((v, i) => [`[${i}]`, v]) : Object.entries(value).map(([k, v]) => [(path ? "." : "") + k, v]);
    if (entries.length === 0) out.set(path, JSON.stringify(value));
    for (const [key, item] of entries) leaves(item, path + key, out);
  } else {
    out.set(path, JSON.stringify(value));
  }
  return out;
}

function changedPaths(data, previous) {
  const now = leaves(data, "", new Map());
  const before = leaves(previous, "", new Map());
  const changed = new Set();
  const tops = new Set(Object.keys(previous));
  for (const [path, value] of before) if (now.get(path) !== value) changed.add(path);
  for (const [path, value] of now) {
    const top = path.split(/[.[]/)[0];
    if (tops.has(top) && before.get(path) !== value) changed.add(path);
  }
  return changed;
}

function showDiff(body) {
  const box = $("diff");
  const data = body && typeof body === "object" ? body.Data : undefined;
  const previous = body && typeof body === "object" ? body.PreviousData : undefined;
  if (!data || typeof data !== "object" || !previous || typeof previous !== "object") {
    box.hidden = true;
    return;
  }
  const changed = changedPaths(data, previous);
  $("diff-data").replaceChildren(json(data, changed, ""));
  $("diff-previous").replaceChildren(json(previous, changed, ""));
  box.hidden = false;
}

// Pretty JSON as DOM nodes; the leaves whose path is in `changed` are highlighted.
function json(value, changed, path, indent = "") {
  const frag = document.createDocumentFragment();
  if (value !== null && typeof value === "object") {
    const isArray = Array.isArray(value);
    const entries = isArray ? value.map((v, i) => [i, v]) : Object.entries(value);
    if (entries.length === 0) {
      frag.append(isArray ? "[]" : "{}");
      return frag;
    }
    frag.append(isArray ? "[\n" : "{\n");
    entries.forEach(([key, item], index) => {
      const sub = isArray ? `${path}[${key}]` : path ? `${path}.${key}` : String(key);
      frag.append(indent + "  ");
      if (!isArray) {
        frag.append(el("span", "k", JSON.stringify(key)), ": ");
      }
      frag.append(json(item, changed, sub, indent + "  "));
      frag.append(index < entries.length - 1 ? ",\n" : "\n");
    });
    frag.append(indent + (isArray ? "]" : "}"));
    return frag;
  }
  const kind = typeof value === "string" ? "str" : typeof value === "number" ? "num" : "lit";
  const span = el("span", kind + (changed.has(path) ? " changed" : ""), JSON.stringify(value));
  if (changed.has(path)) span.title = "changed";
  frag.append(span);
  return frag;
}

// -- faults -------------------------------------------------------------------------------------
function showFaults(faults) {
  const plan = $("fault-plan");
  plan.textContent = planWords(faults.plan);
  plan.title = faults.plan;
}

async function changeFaults(change) {
  $("fault-error").textContent = "";
  const response = await fetch("api/faults", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(change),
  });
  const answer = await response.json();
  if (!response.ok) $("fault-error").textContent = answer.error;
  else showFaults(answer);
}

// -- copy, curl, resend -------------------------------------------------------------------------
function say(text, error) {
  const status = $("action-status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(error));
}

// The clipboard when the browser allows it; the text is also put, selected, in the pane's text
// box, so that it can be copied by hand (and read) when it does not.
async function copy(text, what) {
  const box = $("copy-text");
  box.value = text;
  box.hidden = false;
  box.select();
  try {
    await navigator.clipboard.writeText(text);
    say(`Copied ${what} to the clipboard.`);
  } catch {
    let done = false;
    try {
      done = document.execCommand("copy");
    } catch {
      done = false;
    }
    say(done ? `Copied ${what} to the clipboard.` : `The browser refused the clipboard: ${what} is selected below, copy it from there.`);
  }
}

function copyBody() {
  const detail = state.detail;
  if (!detail) return;
  const record = detail.record;
  const text = record.body === null ? record.body_text || "" : JSON.stringify(record.body, null, 2);
  copy(text, "the body");
}

async function copyCurl() {
  const seq = state.selected;
  if (seq === null) return;
  const signature = $("curl-signature").checked ? "1" : "0";
  const response = await fetch(`api/requests/${seq}/curl?signature=${signature}`, { cache: "no-store" });
  const answer = await response.json();
  if (!response.ok) say(answer.error, true);
  else copy(answer.curl, signature === "1" ? "the curl command (with the signature)" : "the curl command");
}

async function resend() {
  const seq = state.selected;
  if (seq === null) return;
  const button = $("resend");
  button.disabled = true;
  say("Resending…");
  try {
    const response = await fetch(`api/requests/${seq}/resend`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    const answer = await response.json();
    if (!response.ok) say(answer.error, true);
    else if (answer.status === null) say(`Resent to ${answer.target}: ${answer.error}`, true);
    else {
      const body = answer.body ? `: ${answer.body}` : "";
      say(`Resent to ${answer.target}: it answered ${answer.status} in ${Math.round(answer.latency_ms)} ms${body}`);
    }
  } finally {
    button.disabled = false;
  }
}

// -- keyboard -----------------------------------------------------------------------------------
function close() {
  $("detail").hidden = true;
  state.selected = null;
  for (const tr of $("rows").querySelectorAll("tr.selected")) tr.classList.remove("selected");
}

function moveCursor(step) {
  const rows = [...$("rows").children];
  if (rows.length === 0) return;
  let index = rows.findIndex((tr) => Number(tr.dataset.seq) === state.cursor);
  index = index < 0 ? 0 : Math.min(Math.max(index + step, 0), rows.length - 1);
  state.cursor = Number(rows[index].dataset.seq);
  for (const tr of rows) tr.classList.toggle("cursor", tr === rows[index]);
  rows[index].scrollIntoView({ block: "nearest" });
  if (!$("detail").hidden) open(state.cursor);
}

function keys(event) {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "Enter" && event.target.closest("button, a, label")) return;
  const typing = event.target.closest("input, select, textarea");
  if (typing) {
    if (event.key === "Escape") event.target.blur();
    return;
  }
  if (event.key === "j") moveCursor(1);
  else if (event.key === "k") moveCursor(-1);
  else if (event.key === "Enter" && state.cursor !== null) open(state.cursor);
  else if (event.key === "Escape") close();
  else if (event.key === "/") $("search").focus();
  else return;
  event.preventDefault();
}

// -- wiring -------------------------------------------------------------------------------------
function start() {
  $("rows").addEventListener("click", (event) => {
    const tr = event.target.closest("tr");
    if (tr) open(Number(tr.dataset.seq));
  });
  for (const id of ["filter-type", "filter-verdict", "filter-status"]) $(id).addEventListener("change", render);
  $("search").addEventListener("input", search);
  $("copy-body").addEventListener("click", copyBody);
  $("copy-curl").addEventListener("click", copyCurl);
  $("resend").addEventListener("click", resend);
  document.addEventListener("keydown", keys);
  $("pause").addEventListener("click", () => {
    state.paused = !state.paused;
    $("pause").textContent = state.paused ? "Resume" : "Pause";
    setConnection();
    render();
  });
  $("clear").addEventListener("click", () => {
    state.records = [];
    state.skipped = 0;
    render();
  });
  $("detail-close").addEventListener("click", close);
  $("fault-apply").addEventListener("click", () =>
    changeFaults({ action: "fail", count: Number($("fault-count").value), status: Number($("fault-status").value) }));
  $("fault-delay-apply").addEventListener("click", () =>
    changeFaults({ action: "delay", seconds: Number($("fault-delay").value) }));
  $("fault-normal").addEventListener("click", () => changeFaults({ action: "normal" }));
  connect();
}

start();
