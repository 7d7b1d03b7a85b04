// Sign in: the API key is checked against the API before it is kept.

import { clearKey, get, setKey } from "../api.js";
import { h, replace } from "../dom.js";

export async function loginPage(main, _params, { query, navigate, refusal }) {
  const status = h("div", { id: "login-status", "aria-live": "polite" });
  if (refusal) status.append(h("p", { class: "error", role: "alert" }, `The API refused the key: ${refusal}`));
  const input = h("input", {
    id: "api-key",
    name: "api-key",
    type: "password",
    autocomplete: "current-password",
    required: true,
    spellcheck: "false",
    "aria-describedby": "api-key-help",
  });
  const form = h(
    "form",
    { class: "card narrow", "aria-labelledby": "login-title" },
    h("h1", { id: "login-title" }, "Sign in"),
    h("label", { for: "api-key" }, "API key"),
    input,
    h(
      "p",
      { id: "api-key-help", class: "help" },
      "Keys start with kl_. An admin makes them with ",
      h("code", {}, "kloom keys create NAME"),
      "; kloom up keeps its admin key in ",
      h("code", {}, ".kloom/admin_key"),
      ". The key is kept in a cookie of this site only.",
    ),
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    if (!value) return;
    setKey(value);
    replace(status, h("p", { class: "loading", role: "status" }, "Checking the key…"));
    try {
      await get("/jobs?limit=1");
    } catch (err) {
      clearKey();
      replace(status, h("p", { class: "error", role: "alert" }, err.status === 401 ? "The API does not know this key (or it was revoked)." : err.message));
      input.focus();
      return;
    }
    const next = query.get("next");
    navigate(next && next.startsWith("/") && !next.startsWith("/login") ? next.split("?")[0] : "/jobs");
  });
  replace(main, form);
  input.focus();
}
