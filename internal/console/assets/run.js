// A run's page: its state, answer, calls and transcript from GET
// /v1/runs/{id}, and its events, live from the run's stream, drawn as a
// timeline of each round's calls: queued, started on a worker (the
// call_started event, live; a page opened later has only the answer's
// worker, and draws queued and running as one segment), done.
"use strict";
TF.start(async () => {
  const id = decodeURIComponent(location.pathname.slice("/runs/".length));
  document.getElementById("run-id").textContent = id;
  document.title = "Run " + id + " · toolfleet";
  const path = "/v1/runs/" + encodeURIComponent(id);
  const calls = new Map(); // call_key → what the events said of the call
  let t0 = null, finished = false, result = null;

  function call(key, tool) {
    let c = calls.get(key);
    if (!c) {
      c = { key, tool: tool || "", round: 0 };
      calls.set(key, c);
    }
    if (tool) c.tool = tool;
    return c;
  }

  // apply folds one event into the calls' timeline.
  function apply(ev) {
    const at = new Date(ev.at).getTime();
    if (!isNaN(at) && (t0 === null || at < t0)) t0 = at;
    for (const ec of ev.calls || []) {
      const c = call(ec.call_key, ec.tool);
      if (ev.round) c.round = ev.round;
      switch (ev.kind) {
        case "approval_requested": c.approvalFrom = at; break;
        case "approval_decided": c.approvalTo = at; c.gate = ec.gate_result; if (ec.outcome) { c.done = at; c.outcome = ec.outcome; } break;
        case "dispatched": c.dispatched = at; break;
        case "answered": c.done = at; c.outcome = ec.outcome; c.worker = ec.worker; c.duration = ec.duration_ms; break;
      }
    }
    if (ev.kind === "call_started" && ev.call_started) {
      const c = call(ev.call_started.call_key, ev.call_started.tool);
      if (!isNaN(at)) c.started = at;
      if (ev.call_started.worker) c.worker = ev.call_started.worker;
    }
    if (ev.kind === "progress" && ev.progress) {
      const c = call(ev.progress.call_key, ev.progress.tool);
      if (!c.started) c.started = isNaN(at) ? Date.now() : at;
      if (ev.progress.worker) c.worker = ev.progress.worker;
      c.said = ev.progress.message;
    }
  }

  const NS = "http://www.w3.org/2000/svg";
  function svg(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // draw renders the timeline: a row a call, its segments over time.
  function draw() {
    const box = document.getElementById("timeline");
    const rows = [...calls.values()].sort((a, b) => a.round - b.round);
    if (rows.length === 0 || t0 === null) {
      box.replaceChildren(TF.el("p", { class: "hint" }, finished ? "The run made no tool call." : "No tool call yet."));
      return;
    }
    const now = Date.now();
    let end = t0 + 1;
    for (const c of rows) for (const t of [c.approvalFrom, c.approvalTo, c.dispatched, c.started, c.done]) if (t) end = Math.max(end, t);
    if (!finished) end = Math.max(end, now);
    const W = 900, L = 230, R = 70, H = 28, top = 24;
    const x = (t) => L + ((t - t0) / (end - t0)) * (W - L - R);
    const g = svg("svg", { viewBox: `0 0 ${W} ${top + rows.length * H + 8}`, width: "100%", role: "img", "aria-label": "the calls of the run over time", id: "timeline-svg" });
    for (let i = 0; i <= 4; i++) {
      const t = t0 + ((end - t0) * i) / 4;
      g.append(svg("line", { x1: x(t), x2: x(t), y1: top - 6, y2: top + rows.length * H, class: "tick" }));
      g.append(svg("text", { x: x(t), y: top - 10, class: "tick-label", "text-anchor": "middle" }, "+" + ((t - t0) / 1000).toFixed(1) + " s"));
    }
    rows.forEach((c, i) => {
      const y = top + i * H + 4, h = H - 10;
      const row = svg("g", { class: "call " + (c.done ? "is-done" : "is-open"), "data-call": c.key, "data-outcome": c.outcome || "" });
      row.append(svg("text", { x: 4, y: y + h - 4, class: "call-label" }, "round " + c.round + " · " + c.tool + (c.worker ? " @ " + c.worker : "")));
      const seg = (from, to, cls, title) => {
        if (!from) return;
        const stop = to || (finished ? from : now);
        const r = svg("rect", { x: x(from), y, width: Math.max(2, x(stop) - x(from)), height: h, class: "seg " + cls });
        r.append(svg("title", {}, title));
        row.append(r);
      };
      seg(c.approvalFrom, c.approvalTo || c.done, "approval", "waiting for approval" + (c.gate ? ": " + c.gate : ""));
      seg(c.dispatched, c.started || c.done, c.started ? "queued" : "queued running", c.started ? "queued" : "queued, then running");
      seg(c.started, c.done, "running", "running on " + (c.worker || "a worker") + (c.said ? ": " + c.said : ""));
      if (c.started && c.worker) {
        // the worker's name inside the running segment, else just before
        // the start when the segment is too short for it
        const w = 6.5 * c.worker.length + 8, sx = x(c.started), ex = x(c.done || (finished ? c.started : now));
        const inside = ex - sx > w || sx - L <= w;
        row.append(svg("text", { x: inside ? sx + 4 : sx - 4, y: y + h - 5, "text-anchor": inside ? "start" : "end", class: "seg-label", "data-worker": c.worker }, c.worker));
      }
      if (c.done) {
        row.append(svg("circle", { cx: x(c.done), cy: y + h / 2, r: 6, class: "done " + (c.outcome === "ok" ? "ok" : "bad") }));
        row.append(svg("text", { x: x(c.done) + 10, y: y + h - 4, class: "outcome" }, c.outcome || ""));
      }
      g.append(row);
    });
    box.replaceChildren(g);
  }

  function callRows() {
    const table = document.getElementById("calls");
    let list;
    if (result && Array.isArray(result.calls)) {
      list = result.calls.map((c) => ({ round: c.round, tool: c.tool, outcome: c.outcome, duration: c.duration_ms, worker: c.worker, key: c.call_key }));
    } else {
      list = [...calls.values()];
    }
    TF.fill(table, list.map((c) => TF.el("tr", { data: { call: c.key || "" } },
      TF.el("td", { class: "num" }, c.round || ""), TF.el("td", {}, c.tool || ""),
      TF.el("td", {}, c.outcome ? TF.el("span", { class: "badge " + (c.outcome === "ok" ? "ok" : "bad") }, c.outcome) : TF.el("span", { class: "badge running" }, "open")),
      TF.el("td", { class: "num" }, TF.duration(c.duration)), TF.el("td", {}, c.worker || ""),
      TF.el("td", {}, TF.el("code", {}, c.key || "")))), "no call");
  }

  function transcript(msgs) {
    const ol = document.getElementById("transcript");
    ol.replaceChildren(...(msgs || []).map((m) => TF.el("li", { class: "msg " + m.role },
      TF.el("span", { class: "role" }, m.role + (m.tool_call_id ? " · " + m.tool_call_id : "")),
      m.content ? TF.el("div", { class: "content" }, m.content) : null,
      (m.tool_calls || []).map((tc) => TF.el("div", { class: "toolcall" },
        TF.el("code", {}, (tc.function && tc.function.name) + "(" + ((tc.function && tc.function.arguments) || "") + ")"), " · ", tc.id)))));
    if (!msgs || msgs.length === 0) ol.append(TF.el("li", { class: "hint" }, finished ? "The result keeps no transcript." : "The transcript is stored with the result."));
  }

  // load reads the run; it answers whether the result is stored.
  async function load() {
    let run;
    try {
      run = await TF.api("GET", path);
    } catch (e) {
      TF.fail(e, "reading the run");
      return;
    }
    const st = run.state, res = run.result;
    result = res || null;
    const parts = [];
    if (st) parts.push("state " + st.status, "round " + st.round, "client " + (st.client || "?"), "agent " + (st.agent || "?"), "coordinator " + (st.owner || "?"), "started " + TF.time(st.started_at));
    if (res) {
      parts.push("finished: " + (res.termination_reason || (res.error ? "error" : "")));
      if (res.finished_at) parts.push("at " + TF.time(res.finished_at));
      finished = true;
    }
    document.getElementById("run-summary").textContent = parts.join(" · ");
    if (res) document.getElementById("run-answer").textContent = res.answer || (res.error && res.error.message) || "(no answer)";
    transcript(res && res.messages);
    callRows();
    draw();
    return !!res;
  }

  // loadResult reads the run until its result is stored, which follows
  // the journal's finished step closely but not at once.
  async function loadResult() {
    for (let i = 0; i < 40; i++) {
      if (await load()) return;
      await new Promise((r) => setTimeout(r, 500));
    }
  }

  document.getElementById("run-cancel").addEventListener("click", async () => {
    const reason = window.prompt("Why cancel this run?");
    if (!reason) return;
    try {
      await TF.api("POST", path + "/cancel", { reason });
      TF.clearError();
    } catch (e) {
      TF.fail(e, "cancelling the run");
    }
  });

  await load();
  const list = document.getElementById("events");
  const es = new EventSource(path + "/events");
  const kinds = ["started", "queued", "model", "approval_requested", "approval_decided", "dispatched", "call_started", "answered", "progress", "finished"];
  for (const k of kinds) {
    es.addEventListener(k, (m) => {
      let ev;
      try { ev = JSON.parse(m.data); } catch (_) { return; }
      apply(ev);
      const what = ev.kind === "model" ? (ev.content || "") + (ev.tool_calls ? " → " + ev.tool_calls.map((t) => t.name).join(", ") : "")
        : ev.kind === "finished" ? (ev.termination || "") + ": " + (ev.answer || "")
        : ev.kind === "progress" && ev.progress ? ev.progress.tool + ": " + ev.progress.message
        : ev.kind === "call_started" && ev.call_started ? ev.call_started.tool + " on " + ev.call_started.worker
        : (ev.calls || []).map((c) => c.tool + (c.outcome ? " " + c.outcome : c.gate_result ? " " + c.gate_result : "")).join(", ");
      list.append(TF.el("li", { class: "ev " + ev.kind, data: { kind: ev.kind } },
        TF.el("span", { class: "when" }, TF.time(ev.at)), " ", TF.el("b", {}, ev.kind), " ", what));
      if (ev.kind === "finished") {
        finished = true;
        es.close();
        document.getElementById("run-answer").textContent = ev.answer || "(no answer)";
        loadResult();
      } else if (!result) {
        callRows();
      }
      draw();
    });
  }
  es.addEventListener("error", () => {
    if (es.readyState === EventSource.CLOSED && !finished) TF.fail(new Error("the run's event stream was refused or ended"), "following the run");
  });
  const tick = setInterval(() => { if (finished) clearInterval(tick); else draw(); }, 1000);
});
