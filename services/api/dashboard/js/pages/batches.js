// Batches: the key's suite runs with their progress and summaries, and a form to start one.

import { get, post } from "../api.js";
import { empty, errorBox, h, keepFocus, loading, replace, table } from "../dom.js";
import * as fmt from "../format.js";

const REFRESH_MS = 5000;

export async function batchesPage(main, _params, { navigate }) {
  const list = h("section", { "aria-labelledby": "batches-title", "aria-live": "polite" }, loading("Loading batches…"));
  const form = h("section", { class: "card", "aria-labelledby": "batch-form-title" });
  replace(main, h("h1", { id: "batches-title" }, "Batches"), list, form);
  let timer = null;
  let stopped = false;

  async function refresh() {
    let page;
    try {
      page = await get("/batches?limit=100");
    } catch (err) {
      replace(list, errorBox(err, refresh));
      return;
    }
    if (stopped) return;
    keepFocus(list, () => replace(
      list,
      page.data.length
        ? table(
            [
              ["Batch", (b) => h("a", { href: `#/batches/${b.id}` }, `${b.suite} · ${fmt.shortId(b.id)}`)],
              ["Ranks", (b) => b.settings.world_size, { numeric: true }],
              ["Device", (b) => b.settings.device_kind],
              ["Strategist", (b) => b.settings.strategist],
              ["Progress", (b) => progress(b.summary)],
              ["Correct", (b) => `${b.summary.correct}/${b.summary.total}`, { numeric: true }],
              ["fast_1", (b) => fmt.fixed(b.summary.fast_1, 2), { numeric: true, title: "measurable wins: faster beyond the timing's 95% interval" }],
              ["fast_1 (any)", (b) => fmt.fixed(b.summary.fast_1_any, 2), { numeric: true, title: "any correct kernel measured faster, noise included, as the literature counts" }],
              ["Geomean", (b) => fmt.speedup(b.summary.geomean_speedup), { numeric: true }],
              ["Cost", (b) => fmt.usd(b.summary.cost_usd), { numeric: true }],
              ["Started", (b) => fmt.when(b.created_at)],
            ],
            page.data,
            { caption: `${page.count} batch${page.count === 1 ? "" : "es"}` },
          )
        : empty("No batches yet. A batch runs every workload of a suite that supports the world size, one job each."),
    ));
    clearTimeout(timer);
    if (page.data.some((b) => b.summary.finished < b.summary.total)) timer = setTimeout(refresh, REFRESH_MS);
  }
  await refresh();
  batchForm(form, navigate);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** A progress bar with its numbers, for a batch summary. */
export function progress(summary) {
  return h(
    "span",
    { class: "progress" },
    h("progress", { max: summary.total, value: summary.finished, "aria-label": `${summary.finished} of ${summary.total} finished` }),
    ` ${summary.finished}/${summary.total}`,
  );
}

function batchForm(section, navigate) {
  const suite = h("input", { id: "batch-suite", value: "kloom", required: true, "aria-describedby": "batch-suite-help" });
  const worldSize = h("input", { id: "batch-world-size", type: "number", min: 1, max: 64, value: 2, required: true });
  const device = h("input", { id: "batch-device", value: "cpu", required: true, pattern: "cpu|cuda(-[a-z0-9]+x[0-9]+)?" });
  const strategist = h("input", { id: "batch-strategist", value: "offline", required: true });
  const maxIters = h("input", { id: "batch-max-iters", type: "number", min: 1, max: 200, value: 6, required: true });
  const status = h("div", { "aria-live": "polite" });
  const form = h(
    "form",
    { class: "inline-form" },
    h("div", { class: "field" }, h("label", { for: "batch-suite" }, "Suite"), suite, h("p", { class: "help", id: "batch-suite-help" }, "kloom, or an imported suite's name")),
    h("div", { class: "field" }, h("label", { for: "batch-world-size" }, "World size"), worldSize),
    h("div", { class: "field" }, h("label", { for: "batch-device" }, "Device kind"), device),
    h("div", { class: "field" }, h("label", { for: "batch-strategist" }, "Strategist (offline or a model)"), strategist),
    h("div", { class: "field" }, h("label", { for: "batch-max-iters" }, "Steps per workload"), maxIters),
    h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Start batch"), status),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    replace(status, h("p", { class: "loading", role: "status" }, "Starting…"));
    try {
      const batch = await post("/batches", {
        suite: suite.value.trim(),
        world_size: Number(worldSize.value),
        device_kind: device.value.trim(),
        strategist: strategist.value.trim(),
        max_iters: Number(maxIters.value),
      });
      navigate(`/batches/${batch.id}`);
    } catch (err) {
      replace(status, h("p", { class: "error", role: "alert" }, `The batch was not started: ${err.message}`));
    }
  });
  replace(section, h("h2", { id: "batch-form-title" }, "Run a suite"), form);
}
