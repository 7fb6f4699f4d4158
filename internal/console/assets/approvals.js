// Approvals: the pending requests, live from /v1/approvals/events;
// approve or deny each with a reason; the audit of decisions.
"use strict";
TF.start(async () => {
  const box = document.getElementById("approvals");
  const none = document.getElementById("approvals-none");
  const decisions = document.getElementById("decisions");
  const cards = new Map(); // run/call_key → {card, shown}

  function refreshNone() { none.hidden = cards.size > 0; }

  async function loadDecisions() {
    try {
      const d = await TF.api("GET", "/v1/approvals/decisions");
      TF.fill(decisions, d.decisions.slice().reverse().map((n) => TF.el("tr", { data: { run: n.run_id, call: n.call_key } },
        TF.el("td", {}, TF.time(n.at)), TF.el("td", {}, TF.runLink(n.run_id)), TF.el("td", {}, n.tool),
        TF.el("td", {}, TF.el("span", { class: "badge " + (n.outcome === "approved" ? "ok" : "bad") }, n.outcome)),
        TF.el("td", {}, n.approver || ""), TF.el("td", { class: "reason" }, n.reason || ""))), "no decision yet");
    } catch (e) {
      TF.fill(decisions, [], "refused: " + e.message);
      TF.fail(e, "reading the decisions");
    }
  }

  function remove(k) {
    const c = cards.get(k);
    if (c) c.card.remove();
    cards.delete(k);
    refreshNone();
  }

  function show(a) {
    const k = a.run_id + "/" + a.call_key;
    if (cards.has(k)) return;
    const reason = TF.el("input", { class: "reason", placeholder: "reason (required to deny)", maxLength: 1000 });
    const status = TF.el("p", { class: "status" });
    const decide = async (decision) => {
      try {
        const r = await TF.api("POST", "/v1/approvals/" + encodeURIComponent(a.run_id) + "/" + encodeURIComponent(a.call_key),
          { decision, reason: reason.value });
        TF.clearError();
        status.textContent = r.outcome + " by " + r.approver;
        if (r.outcome !== "pending") remove(k);
        loadDecisions();
      } catch (e) {
        if (e.code === "conflict") remove(k);
        TF.fail(e, decision + " " + a.tool);
      }
    };
    const card = TF.el("article", { class: "card approval", data: { run: a.run_id, call: a.call_key, tool: a.tool } },
      TF.el("h3", {}, a.tool, " ", TF.el("span", { class: "hint" }, "round " + a.round)),
      TF.el("p", {}, "run ", TF.runLink(a.run_id), a.agent ? " · agent " + a.agent : "", " · decide by " + TF.time(a.deadline)),
      TF.el("pre", { class: "arguments" }, JSON.stringify(a.arguments, null, 2)),
      TF.el("p", { class: "digest" }, "digest ", TF.el("code", {}, a.digest)),
      TF.el("div", { class: "decide" }, reason,
        TF.el("button", { type: "button", class: "approve", onclick: () => decide("approve") }, "Approve"),
        TF.el("button", { type: "button", class: "deny", onclick: () => decide("deny") }, "Deny")),
      status);
    cards.set(k, { card, shown: Date.now() });
    box.append(card);
    refreshNone();
  }

  refreshNone();
  loadDecisions();
  const live = document.getElementById("approvals-live");
  const es = new EventSource("/v1/approvals/events");
  es.addEventListener("open", () => { live.className = "live on"; });
  es.addEventListener("approval", (m) => {
    let a;
    try { a = JSON.parse(m.data); } catch (_) { return; }
    if (new Date(a.deadline).getTime() > Date.now()) show(a);
  });
  es.addEventListener("error", () => {
    live.className = "live off";
    if (es.readyState === EventSource.CLOSED) {
      // a refused stream: say why from the list's answer
      TF.api("GET", "/v1/approvals").catch((e) => TF.fail(e, "reading the approvals"));
    }
  });
  // the stream keeps requests settled elsewhere: drop what the list no longer has
  setInterval(async () => {
    if (document.hidden || cards.size === 0) return;
    try {
      const d = await TF.api("GET", "/v1/approvals");
      const open = new Set(d.approvals.map((a) => a.run_id + "/" + a.call_key));
      for (const [k, c] of cards) if (!open.has(k) && Date.now() - c.shown > 5000) remove(k);
      loadDecisions();
    } catch (_) { /* shown by the next action */ }
  }, 5000);
});
