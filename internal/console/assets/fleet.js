// The fleet at a glance: tools × workers × queue × traffic, the pending
// approvals (live) and the agents.
"use strict";
TF.start(async () => {
  const tools = document.getElementById("fleet-tools");
  const approvals = document.getElementById("fleet-approvals");
  const agents = document.getElementById("fleet-agents");

  async function loadTools() {
    try {
      const d = await TF.api("GET", "/v1/tools");
      TF.fill(tools, d.tools.map((t) => TF.el("tr", { data: { tool: t.name } },
        TF.el("td", {}, TF.el("a", { href: "/tools#" + encodeURIComponent(t.name) }, t.name)),
        TF.el("td", { class: "workers" }, t.workers.length + " — " + t.workers.map((w) => w.name).join(", ")),
        TF.el("td", { class: "num waiting" }, t.waiting),
        TF.el("td", { class: "num inflight" }, t.in_flight),
        TF.el("td", {}, TF.traffic(t)))), "no tool is served");
    } catch (e) {
      TF.fill(tools, [], "refused: " + e.message);
      TF.fail(e, "reading the tools");
    }
  }
  async function loadApprovals() {
    try {
      const d = await TF.api("GET", "/v1/approvals");
      TF.fill(approvals, d.approvals.map((a) => TF.el("tr", {},
        TF.el("td", {}, TF.runLink(a.run_id)), TF.el("td", {}, a.tool),
        TF.el("td", {}, a.agent || ""), TF.el("td", {}, TF.time(a.deadline)))), "nothing waits");
    } catch (e) {
      TF.fill(approvals, [], "refused: " + e.message);
      TF.fail(e, "reading the approvals");
    }
  }
  async function loadAgents() {
    try {
      const d = await TF.api("GET", "/v1/agents");
      agents.replaceChildren(...(d.agents.length ? d.agents.map((n) => TF.el("li", {}, n)) : [TF.el("li", { class: "empty" }, "only the default agent")]));
    } catch (e) {
      agents.replaceChildren(TF.el("li", { class: "empty" }, "refused: " + e.message));
      TF.fail(e, "reading the agents");
    }
  }
  await Promise.all([loadTools(), loadApprovals(), loadAgents()]);
  // the queues move: read them again while the page is shown
  setInterval(() => { if (!document.hidden) { loadTools(); loadApprovals(); } }, 3000);
});
