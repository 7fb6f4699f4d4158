// The login page: POST /v1/session, then back where the user came from.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("login");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    TF.clearError();
    const user = form.elements.user.value, password = form.elements.password.value;
    try {
      const s = await TF.api("POST", "/v1/session", { user, password });
      TF.setCSRF(s.csrf_token);
      let next = new URLSearchParams(location.search).get("next") || "/";
      if (!next.startsWith("/") || next.startsWith("//")) next = "/";
      location.assign(next);
    } catch (e) {
      form.elements.password.value = "";
      TF.fail(e, "logging in");
    }
  });
});
