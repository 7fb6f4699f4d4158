// The console's shared script: the API call, the session, the error
// banner and a DOM builder that inserts text only (never HTML).
"use strict";
(function () {
  const TF = {};
  window.TF = TF;
  let csrf = "";

  // el builds an element: attrs are properties (class → className),
  // children strings (as text) or nodes.
  TF.el = function (tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k === "data") for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e[k] = v;
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      e.append(typeof c === "string" || typeof c === "number" ? String(c) : c);
    }
    return e;
  };

  // APIError is an answer of the API that is not a success.
  class APIError extends Error {
    constructor(status, code, message) {
      super(message);
      this.status = status;
      this.code = code;
    }
  }
  TF.APIError = APIError;

  // api calls the API as the session's user; a state-changing request
  // carries the session's CSRF token. A 401 goes to the login page.
  TF.api = async function (method, path, body) {
    const opts = { method, headers: {}, credentials: "same-origin" };
    if (method !== "GET") opts.headers["X-CSRF-Token"] = csrf;
    if (body !== undefined) {
      opts.headers["Content-Type"] = "application/json";
      opts.body = JSON.stringify(body);
    }
    const resp = await fetch(path, opts);
    let data = null;
    if (resp.status !== 204) {
      try { data = await resp.json(); } catch (_) { data = null; }
    }
    if (!resp.ok) {
      const e = (data && data.error) || {};
      if (resp.status === 401 && path !== "/v1/session") TF.toLogin();
      throw new APIError(resp.status, e.code || "error", e.message || resp.statusText);
    }
    return data;
  };

  TF.toLogin = function () {
    if (document.body.dataset.page === "login") return;
    location.assign("/login?next=" + encodeURIComponent(location.pathname + location.search));
  };

  // fail shows an error in the banner: a refusal says so plainly.
  TF.fail = function (err, what) {
    const box = document.getElementById("error");
    let text;
    if (err instanceof APIError) {
      const verb = err.status === 403 ? "Refused" : "Failed";
      text = verb + (what ? " — " + what : "") + ": " + err.message + " (" + err.status + " " + err.code + ")";
    } else {
      text = "Failed" + (what ? " — " + what : "") + ": " + (err && err.message ? err.message : String(err));
    }
    box.textContent = text;
    box.hidden = false;
  };
  TF.clearError = function () {
    const box = document.getElementById("error");
    box.hidden = true;
    box.textContent = "";
  };

  // session reads who the session acts as (and its CSRF token); without
  // one, the login page.
  TF.session = async function () {
    try {
      const s = await TF.api("GET", "/v1/session");
      csrf = s.csrf_token || "";
      TF.user = s.user;
      const u = document.getElementById("user");
      if (u) u.textContent = s.user;
      return s;
    } catch (e) {
      if (e instanceof APIError && e.status === 401) TF.toLogin();
      throw e;
    }
  };
  TF.setCSRF = function (t) { csrf = t; };

  TF.time = function (s) {
    if (!s) return "";
    const d = new Date(s);
    return isNaN(d) ? "" : d.toLocaleString();
  };
  TF.duration = function (ms) {
    if (ms === undefined || ms === null) return "";
    return ms < 1000 ? ms + " ms" : (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + " s";
  };
  TF.runLink = function (id) {
    return TF.el("a", { href: "/runs/" + encodeURIComponent(id), class: "run-link" }, TF.el("code", {}, id));
  };
  // fill replaces a table's body rows, or shows empty when there are none.
  TF.fill = function (table, rows, empty) {
    const body = table.tBodies[0];
    body.replaceChildren(...rows);
    if (rows.length === 0) {
      const cols = table.tHead.rows[0].cells.length;
      body.append(TF.el("tr", { class: "empty" }, TF.el("td", { colSpan: cols }, empty || "none")));
    }
  };
  // until is the end of a pause: a time, or "indefinitely" for one
  // paused with no end (stored as far in the future).
  TF.until = function (s) {
    const d = new Date(s);
    if (isNaN(d)) return "";
    return d.getTime() - Date.now() > 365 * 24 * 3600 * 1000 ? "indefinitely" : "until " + d.toLocaleString();
  };
  TF.traffic = function (t) {
    const parts = [];
    if (t.paused) parts.push(TF.el("span", { class: "badge paused" }, "paused" + (t.paused_until ? " " + TF.until(t.paused_until) : "")));
    if (t.limit) parts.push(TF.el("span", { class: "badge limited" }, "limited " + t.limit.rate + "/s" + (t.limit.burst ? " burst " + t.limit.burst : "")));
    if (parts.length === 0) parts.push(TF.el("span", { class: "badge ok" }, "open"));
    return parts;
  };

  // start runs the page's main once the session is known.
  TF.start = function (main) {
    document.addEventListener("DOMContentLoaded", async () => {
      const out = document.getElementById("logout");
      if (out) out.addEventListener("click", async () => {
        try { await TF.api("DELETE", "/v1/session"); } catch (_) { /* ended already */ }
        location.assign("/login");
      });
      try {
        await TF.session();
      } catch (e) {
        if (!(e instanceof APIError && e.status === 401)) TF.fail(e, "reading the session");
        return;
      }
      try { await main(); } catch (e) { TF.fail(e); }
    });
  };
})();
