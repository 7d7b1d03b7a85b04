// Workers: each registered worker, the queues it serves, its GPUs as NVML reports them, and when
// it was last heard from.

import { get } from "../api.js";
import { badge, empty, errorBox, facts, h, keepFocus, loading, replace, table } from "../dom.js";
import * as fmt from "../format.js";

const REFRESH_MS = 5000;

export async function workersPage(main) {
  const list = h("section", { "aria-label": "Workers", "aria-live": "polite" }, loading("Loading workers…"));
  replace(main, h("h1", {}, "Workers"), h("p", { class: "muted" }, "A worker beats every few seconds; one silent past the dead-worker threshold has its running job handed to another."), list);
  let timer = null;
  let stopped = false;

  async function refresh() {
    let page;
    try {
      page = await get("/workers");
    } catch (err) {
      replace(list, errorBox(err, refresh));
      return;
    }
    if (stopped) return;
    keepFocus(list, () => replace(list, page.data.length ? page.data.map(workerCard) : empty("No worker has registered. Start one with kloom worker --queues cpu (kloom up starts one).")));
    timer = setTimeout(refresh, REFRESH_MS);
  }
  await refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function workerCard(w) {
  const state = w.stopped_at ? "stopped" : w.alive ? "alive" : "silent";
  return h(
    "article",
    { class: "card worker", "aria-labelledby": `w-${w.id}`, "data-worker": w.id },
    h("h2", { id: `w-${w.id}` }, w.id, " ", badge(state)),
    facts([
      ["Host", w.hostname],
      ["Queues", w.queues.join(", ")],
      ["Roofline profile", w.profile],
      ["Last heartbeat", fmt.when(w.last_heartbeat)],
      ["Started", fmt.when(w.started_at)],
      ["Stopped", w.stopped_at ? fmt.when(w.stopped_at) : null],
    ]),
    w.gpus.length
      ? table(
          [
            ["GPU", (g) => g.index],
            ["Model", (g) => g.name],
            ["Utilisation", (g) => (g.utilization_pct != null ? fmt.percent(g.utilization_pct / 100, 0) : fmt.DASH), { numeric: true }],
            ["Memory", (g) => memory(g), { numeric: true }],
            ["Temperature", (g) => (g.temperature_c != null ? `${g.temperature_c} °C` : fmt.DASH), { numeric: true }],
            ["Power", (g) => (g.power_w != null ? `${Math.round(g.power_w)} W` : fmt.DASH), { numeric: true }],
            ["NVLinks", (g) => g.nvlink_active_links ?? fmt.DASH, { numeric: true }],
            ["Peers", (g) => Object.entries(g.topology || {}).map(([peer, how]) => `${peer}: ${how}`).join(", ") || fmt.DASH],
          ],
          w.gpus,
          { caption: `GPUs (NVML, ${w.gpus[0]?.driver ? `driver ${w.gpus[0].driver}` : "driver unknown"}${w.gpus[0]?.sampled_at ? `, sampled ${fmt.age(w.gpus[0].sampled_at)}` : ""})` },
        )
      : h("p", { class: "muted" }, "No GPUs: this worker runs CPU jobs (NVML found no NVIDIA driver)."),
  );
}

function memory(g) {
  const total = g.memory_total_gib != null ? `${g.memory_total_gib} GiB` : fmt.DASH;
  return g.memory_used_gib != null ? `${g.memory_used_gib} of ${total}` : total;
}
