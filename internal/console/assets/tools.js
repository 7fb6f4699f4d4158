// Tools: each tool's workers, queue and traffic; pause, resume and limit
// with a reason; the history of who did what.
"use strict";
TF.start(async () => {
  const table = document.getElementById("tools");
  const history = document.getElementById("history");
  let current = decodeURIComponent(location.hash.slice(1));

  async function loadHistory(tool) {
    if (!tool) return;
    current = tool;
    document.getElementById("history-tool").textContent = tool;
    try {
      const d = await TF.api("GET", "/v1/tools/" + encodeURIComponent(tool) + "/history");
      TF.fill(history, d.history.slice().reverse().map((n) => TF.el("tr", {},
        TF.el("td", {}, TF.time(n.at)), TF.el("td", {}, n.action), TF.el("td", {}, n.by || ""),
        TF.el("td", { class: "reason" }, n.reason || ""),
        TF.el("td", {}, n.until ? TF.until(n.until) : n.rate ? n.rate + "/s" + (n.burst ? " burst " + n.burst : "") : ""))), "nothing was done to " + tool);
    } catch (e) {
      TF.fill(history, [], "refused: " + e.message);
      TF.fail(e, "reading the history of " + tool);
    }
  }

  async function act(tool, action, body) {
    try {
      await TF.api("POST", "/v1/tools/" + encodeURIComponent(tool) + "/" + action, body);
      TF.clearError();
      await load();
      await loadHistory(tool);
    } catch (e) {
      TF.fail(e, action + " " + tool);
    }
  }

  function row(t) {
    const reason = TF.el("input", { class: "reason", placeholder: "reason (required)", maxLength: 1000 });
    const rate = TF.el("input", { class: "rate", type: "number", min: "0", step: "any", placeholder: "calls/s" });
    return TF.el("tr", { data: { tool: t.name } },
      TF.el("td", {}, TF.el("a", { href: "#" + encodeURIComponent(t.name), onclick: () => loadHistory(t.name) }, t.name)),
      TF.el("td", { class: "workers" }, t.workers.length + " — " + t.workers.map((w) => w.name).join(", ")),
      TF.el("td", { class: "num waiting" }, t.waiting), TF.el("td", { class: "num inflight" }, t.in_flight),
      TF.el("td", {}, TF.traffic(t)),
      TF.el("td", { class: "act" }, reason,
        TF.el("button", { type: "button", class: "pause", onclick: () => act(t.name, "pause", { reason: reason.value }) }, "Pause"),
        TF.el("button", { type: "button", class: "resume", onclick: () => act(t.name, "resume", { reason: reason.value }) }, "Resume"),
        rate,
        TF.el("button", { type: "button", class: "limit", onclick: () => act(t.name, "limit", { reason: reason.value, rate: Number(rate.value) }) }, "Limit")));
  }

  async function load() {
    try {
      const d = await TF.api("GET", "/v1/tools");
      TF.fill(table, d.tools.map(row), "no tool is served");
      if (!current && d.tools.length) current = d.tools[0].name;
    } catch (e) {
      TF.fill(table, [], "refused: " + e.message);
      TF.fail(e, "reading the tools");
    }
  }
  await load();
  await loadHistory(current);
});
