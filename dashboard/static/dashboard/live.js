// The dashboard's live updates: one websocket (staff only, same origin), and rows cloned from
// the page's <template> elements, so the markup stays in the server's templates. Everything is
// set with textContent or attributes, never parsed as HTML.
(() => {
  "use strict";

  const live = document.getElementById("live");
  if (!live) return;
  const runsBase = live.dataset.runs;
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  const PLACEHOLDER = "00000000-0000-0000-0000-000000000000";
  const TIME_FIELDS = new Set(["started_at", "timestamp", "expires_at", "finished_at", "created_at"]);
  const CYCLE = "director.cycle.";

  // --- small helpers -------------------------------------------------------------------------

  const pad = (n) => String(n).padStart(2, "0");
  function formatTime(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return "";
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  function timeElement(iso) {
    const t = document.createElement("time");
    t.dateTime = iso;
    t.textContent = formatTime(iso);
    return t;
  }
  // The server writes times in its own zone; the page shows them in the reader's.
  function localTimes(root) {
    for (const t of root.querySelectorAll("time[datetime]")) {
      const text = formatTime(t.dateTime);
      if (text) t.textContent = text;
    }
  }
  function el(tag, attributes = {}, text = "") {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
    if (text) node.textContent = text;
    return node;
  }
  function flash(node) {
    node.classList.remove("flash");
    void node.offsetWidth; // restart the animation
    node.classList.add("flash");
  }
  function traceUrl(id) {
    return UUID.test(id || "") ? `${runsBase}${id}/` : "";
  }
  function showNotice(text) {
    const notice = document.getElementById("live-notice");
    if (!notice) return;
    notice.querySelector("span").textContent = text;
    notice.hidden = false;
  }
  function showMessage(text, ok) {
    let list = document.querySelector(".messages");
    if (!list) {
      list = el("ul", { class: "messages" });
      document.querySelector("main").before(list);
    }
    const item = el("li", { class: `message ${ok ? "success" : "error"}` }, text);
    list.append(item);
  }

  // --- rows ----------------------------------------------------------------------------------

  function fill(row, data) {
    for (const node of row.querySelectorAll("[data-field]")) {
      const name = node.dataset.field;
      if (!(name in data)) continue;
      const value = data[name];
      if (TIME_FIELDS.has(name)) node.replaceChildren(value ? timeElement(value) : "—");
      else node.textContent = value == null ? "" : String(value);
    }
    for (const link of row.querySelectorAll("[data-href]")) {
      const url = data[link.dataset.href];
      if (url) {
        link.href = url;
        link.hidden = false;
      } else {
        link.removeAttribute("href");
      }
    }
    for (const badge of row.querySelectorAll(".badge[data-field]")) {
      if (badge.dataset.field === "status_label" && data.status) badge.dataset.status = data.status;
      if (badge.dataset.field === "result") badge.dataset.status = String(data.result).toLowerCase();
    }
    for (const form of row.querySelectorAll("form[data-action]")) {
      if (data.id && !form.getAttribute("action")) {
        form.action = form.dataset.action.replace(PLACEHOLDER, data.id);
      }
    }
  }

  // A new row: the template's, trimmed to the columns this table shows.
  function newRow(body, templateId, key) {
    const row = document.getElementById(templateId).content.firstElementChild.cloneNode(true);
    row.dataset.key = key;
    if (!body.hasAttribute("data-cancel")) row.querySelector(".cancel-cell")?.remove();
    if (!body.hasAttribute("data-details")) row.querySelector(".details-cell")?.remove();
    body.querySelector("tr.empty")?.remove();
    body.prepend(row);
    const max = Number(body.dataset.max || 0);
    while (max && body.rows.length > max) body.rows[body.rows.length - 1].remove();
    return row;
  }

  function findRow(body, key) {
    return body.querySelector(`tr[data-key="${CSS.escape(String(key))}"]`);
  }

  // --- messages from the host ----------------------------------------------------------------

  function onAudit(events) {
    const trace = document.querySelector("[data-live-trace]")?.dataset.liveTrace;
    for (const e of events) {
      const data = {
        seq: e.seq,
        timestamp: e.timestamp,
        event_type: e.event_type,
        actor: e.actor.id ? `${e.actor.type}:${e.actor.id}` : e.actor.type,
        target: [e.target.server_id, e.target.tool_name].filter(Boolean).join(" / "),
        result: e.result,
        short_trace: (e.trace_id || "").slice(0, 8),
        trace_url: traceUrl(e.trace_id),
        details: JSON.stringify(e.details, null, 2),
      };
      for (const body of document.querySelectorAll('[data-live="audit"]')) {
        if (!findRow(body, e.seq)) flash(newRow(body, "tpl-audit", e.seq));
        fill(findRow(body, e.seq), data);
      }
      if (redrawn("audit")) redraw("audit", "New events arrived");
      else if (document.querySelector('[data-live-notice="audit"]')) showNotice("New events arrived.");
      if (trace && e.trace_id === trace) redrawTrace();
      if (e.event_type.startsWith(CYCLE)) onCycle(e);
    }
  }

  // Parts the server draws (a trace, a filtered audit log, the approvals' history, the
  // overview's counts): fetch the page again and swap each element of the part, keeping what
  // the operator opened. Events come in bursts, so wait for the burst to end.
  const redrawTimers = {};
  function redraw(part, notice) {
    clearTimeout(redrawTimers[part]);
    redrawTimers[part] = setTimeout(async () => {
      const selector = `[data-redraw="${part}"]`;
      const current = [...document.querySelectorAll(selector)];
      let fresh = [];
      try {
        const response = await fetch(location.pathname + location.search, {
          headers: { Accept: "text/html" },
        });
        if (response.ok) {
          const page = new DOMParser().parseFromString(await response.text(), "text/html");
          fresh = [...page.querySelectorAll(selector)];
        }
      } catch (error) {
        fresh = [];
      }
      if (!current.length || fresh.length !== current.length) {
        showNotice(`${notice}: reload the page to see it.`);
        return;
      }
      current.forEach((old, i) => swap(old, fresh[i]));
    }, 250);
  }
  function swap(current, fresh) {
    const opened = [...current.querySelectorAll("details[open][id]")].map((d) => d.id);
    for (const id of opened) fresh.querySelector(`#${CSS.escape(id)}`)?.setAttribute("open", "");
    localTimes(fresh);
    if (fresh.innerHTML === current.innerHTML) return;
    current.replaceWith(fresh);
    flash(fresh.querySelector(".diagram") || fresh);
  }
  const redrawn = (part) => document.querySelector(`[data-redraw="${part}"]`) !== null;
  const redrawTrace = () => redraw("trace", "New steps arrived in this trace");
  // The counts a run or an approval moves (the overview's tiles, its agents' runs).
  const redrawCounts = () => redrawn("counts") && redraw("counts", "The counts changed");

  function onCycle(e) {
    const outcome = e.event_type.slice(CYCLE.length);
    const selector = `[data-director-result="${CSS.escape(e.actor.id)}"]`;
    for (const cell of document.querySelectorAll(selector)) {
      const parts = [el("span", { class: "badge", "data-status": e.result.toLowerCase() }, outcome),
        " ", timeElement(e.timestamp)];
      if (e.details && e.details.reason) parts.push(el("br"), el("span", { class: "muted" }, e.details.reason));
      const url = traceUrl(e.trace_id);
      if (url) parts.push(" ", el("a", { href: url }, "trace"));
      cell.replaceChildren(...parts);
      cell.dataset.cycles = String(Number(cell.dataset.cycles || 0) + 1);
      flash(cell);
    }
  }

  function onRun(run) {
    redrawCounts();
    const data = { ...run, short_context: run.context_id.slice(0, 8) };
    for (const body of document.querySelectorAll('[data-live="runs"]')) {
      let row = findRow(body, run.id);
      if (body.dataset.context && body.dataset.context !== run.context_id) continue;
      if (!row && body.dataset.context) {
        redrawTrace();
        continue;
      }
      if (!row && body.dataset.only === "active" && run.final) continue;
      if (!row) row = newRow(body, "tpl-run", run.id);
      fill(row, data);
      flash(row);
      row.classList.toggle("finished", run.final);
      if (run.final) row.querySelectorAll('form[data-when="active"]').forEach((f) => f.remove());
    }
  }

  function onApproval(approval) {
    redrawCounts();
    if (redrawn("approvals")) redraw("approvals", "An approval changed");
    for (const body of document.querySelectorAll('[data-live="approvals"]')) {
      if (body.closest("[data-redraw]")) continue; // the server draws it again
      let row = findRow(body, approval.id);
      if (!row) {
        if (!approval.pending) continue;
        row = newRow(body, "tpl-approval", approval.id);
      }
      fill(row, approval);
      flash(row);
      row.classList.toggle("finished", !approval.pending);
    }
  }

  function handle(message) {
    if (message.type === "hello") setState("live");
    else if (message.type === "audit") onAudit(message.events || []);
    else if (message.type === "run") onRun(message.run);
    else if (message.type === "approval") onApproval(message.approval);
  }

  // --- the socket ----------------------------------------------------------------------------

  function setState(state) {
    live.dataset.state = state;
    live.textContent = { live: "live", offline: "offline — retrying", connecting: "connecting…" }[state];
  }

  let failures = 0;
  function connect() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${location.host}${live.dataset.socket}`);
    socket.addEventListener("message", (event) => {
      let message;
      try {
        message = JSON.parse(event.data);
      } catch {
        return;
      }
      failures = 0;
      handle(message);
    });
    socket.addEventListener("close", () => {
      setState("offline");
      failures += 1;
      setTimeout(connect, Math.min(30000, 1000 * 2 ** Math.min(failures, 5)));
    });
  }

  // --- forms that answer in place ("Run Director now") ----------------------------------------

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (form.dataset.confirm && !window.confirm(form.dataset.confirm)) {
      event.preventDefault();
      return;
    }
    if (!form.matches("form[data-async]")) return;
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    const results = () => form.dataset.director
      ? [...document.querySelectorAll(`[data-director-result="${CSS.escape(form.dataset.director)}"]`)]
      : [];
    // The cycle's outcome may arrive before the answer to the POST: the answer never hides it.
    const cyclesBefore = new Map(results().map((cell) => [cell, cell.dataset.cycles]));
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: new FormData(form),
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      const answer = await response.json();
      const cells = results();
      for (const cell of cells) {
        if (cyclesBefore.has(cell) && cyclesBefore.get(cell) !== cell.dataset.cycles) continue;
        cell.replaceChildren(
          el("span", { class: "badge", "data-status": answer.ok ? "queued" : "error" },
            answer.ok ? "queued" : "refused"),
          " ", el("span", { class: "muted" }, answer.message));
        flash(cell);
      }
      if (!cells.length) showMessage(answer.message, answer.ok);
    } catch {
      form.submit(); // no JSON (signed out, server error): let the server's page answer
    } finally {
      button.disabled = false;
    }
  });

  // --- page set-up ---------------------------------------------------------------------------

  function openStep() {
    const target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.tagName === "DETAILS") target.open = true;
  }

  localTimes(document);
  window.addEventListener("hashchange", openStep);
  openStep();
  setState("connecting");
  connect();
})();
