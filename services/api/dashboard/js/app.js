// The dashboard's shell: a hash router (the API serves this directory as static files, so every
// page lives at /#/...), the sign-in gate, and the session line in the header.

import { clearKey, hasKey } from "./api.js";
import { h, replace } from "./dom.js";
import { batchPage } from "./pages/batch.js";
import { batchesPage } from "./pages/batches.js";
import { jobPage } from "./pages/job.js";
import { jobsPage } from "./pages/jobs.js";
import { kernelPage, kbPage, strategyPage } from "./pages/kb.js";
import { loginPage } from "./pages/login.js";
import { stepPage } from "./pages/step.js";
import { workersPage } from "./pages/workers.js";

const ROUTES = [
  [/^\/login$/, loginPage, "login"],
  [/^\/jobs$/, jobsPage, "jobs"],
  [/^\/jobs\/([^/]+)$/, jobPage, "jobs"],
  [/^\/jobs\/([^/]+)\/steps\/(\d+)$/, stepPage, "jobs"],
  [/^\/batches$/, batchesPage, "batches"],
  [/^\/batches\/([^/]+)$/, batchPage, "batches"],
  [/^\/kb$/, kbPage, "kb"],
  [/^\/kb\/kernels\/([^/]+)$/, kernelPage, "kb"],
  [/^\/kb\/strategies\/([^/]+)$/, strategyPage, "kb"],
  [/^\/workers$/, workersPage, "workers"],
];

const main = document.getElementById("main");
let cleanup = null;
let lastPath = null;
let refusal = "";

/** The current route: its path, its parameters and its query (``#/jobs?state=running``). */
export function location() {
  const raw = window.location.hash.replace(/^#/, "") || "/jobs";
  const [path, search = ""] = raw.split("?");
  return { path, query: new URLSearchParams(search) };
}

/** Go to ``path`` (``/jobs/abc``), with an optional query object. */
export function navigate(path, query) {
  const q = query ? new URLSearchParams(Object.entries(query).filter(([, v]) => v !== "" && v !== null && v !== undefined)).toString() : "";
  window.location.hash = `#${path}${q ? `?${q}` : ""}`;
}

function renderSession() {
  const box = document.getElementById("session");
  if (!hasKey()) return replace(box, h("a", { href: "#/login" }, "Sign in"));
  replace(
    box,
    h("span", { class: "muted" }, "Signed in with an API key"),
    h("button", { type: "button", class: "link", onclick: () => { clearKey(); navigate("/login"); } }, "Sign out"),
  );
}

async function route() {
  if (cleanup) {
    cleanup();
    cleanup = null;
  }
  const { path, query } = location();
  renderSession();
  if (!hasKey() && path !== "/login") {
    navigate("/login", { next: `${path}${query.toString() ? `?${query}` : ""}` });
    return;
  }
  const found = ROUTES.map(([re, page, section]) => [path.match(re), page, section]).find(([match]) => match);
  for (const link of document.querySelectorAll("nav a[data-section]")) {
    if (found && link.dataset.section === found[2]) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (!found) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "There is no page at this address. ", h("a", { href: "#/jobs" }, "Go to the jobs")));
    return;
  }
  const [match, page] = found;
  // Focus follows navigation (for screen readers), but not the first page: Tab starts at the skip link.
  const pathChanged = lastPath !== null && path !== lastPath;
  lastPath = path;
  const ctx = { query, navigate, refusal };
  refusal = "";
  replace(main, h("p", { class: "loading", role: "status" }, "Loading…"));
  try {
    cleanup = (await page(main, match.slice(1).map(decodeURIComponent), ctx)) || null;
  } catch (err) {
    console.error(err);
    replace(main, h("div", { class: "error", role: "alert" }, h("p", {}, `This page failed to draw: ${err.message}`)));
  }
  document.title = `${main.querySelector("h1")?.textContent || "kloom"} · kloom`;
  if (pathChanged) {
    window.scrollTo(0, 0);
    main.focus({ preventScroll: true });
  }
}

// A key the API refuses (revoked, or typed wrong) sends the user back to the sign-in form.
window.addEventListener("kloom:unauthorized", (event) => {
  if (location().path === "/login") return;
  clearKey();
  refusal = event.detail;
  navigate("/login", { next: location().path });
});
// The skip link moves focus without touching the hash, which holds the route.
document.querySelector(".skip").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});
window.addEventListener("hashchange", route);
route();
