// Runs: the list, filtered by agent, client, state and time, and a run
// opened by its id.
"use strict";
TF.start(async () => {
  const form = document.getElementById("runs-filter");
  const table = document.getElementById("runs");
  const params = new URLSearchParams(location.search);
  for (const k of ["agent", "client", "state", "since"]) if (params.get(k)) form.elements[k].value = params.get(k);

  async function load() {
    const q = new URLSearchParams();
    for (const k of ["agent", "client", "state", "since"]) if (form.elements[k].value) q.set(k, form.elements[k].value.trim());
    try {
      const d = await TF.api("GET", "/v1/runs" + (q.toString() ? "?" + q : ""));
      TF.clearError();
      TF.fill(table, d.runs.map((r) => TF.el("tr", { data: { run: r.run_id } },
        TF.el("td", {}, TF.runLink(r.run_id)),
        TF.el("td", {}, TF.el("span", { class: "badge " + r.status }, r.status + (r.termination ? " · " + r.termination : ""))),
        TF.el("td", {}, r.client || ""), TF.el("td", {}, r.agent || ""), TF.el("td", { class: "num" }, r.round),
        TF.el("td", {}, r.last_step), TF.el("td", {}, TF.time(r.started_at)))), "no run matches");
    } catch (e) {
      TF.fill(table, [], "refused: " + e.message);
      TF.fail(e, "listing the runs");
    }
  }
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    for (const k of ["agent", "client", "state", "since"]) if (form.elements[k].value) q.set(k, form.elements[k].value.trim());
    history.replaceState(null, "", "/runs" + (q.toString() ? "?" + q : ""));
    load();
  });
  document.getElementById("run-open").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const id = document.getElementById("open-run").value.trim();
    if (id) location.assign("/runs/" + encodeURIComponent(id));
  });
  await load();
});
