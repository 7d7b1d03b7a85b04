// Batch: the report of a suite run (per-workload table, fast_p curve, geomean, fraction of the
// roofline floor) as the API builds it with kloom.batch.report, and a comparison with another batch.

import { get, query as qs } from "../api.js";
import { badge, empty, errorBox, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { fastPPlot } from "../plot.js";
import { progress } from "./batches.js";

const REFRESH_MS = 5000;

export async function batchPage(main, [batchId], { query, navigate }) {
  const other = query.get("compare") || "";
  let timer = null;
  let stopped = false;

  async function load() {
    let batch, report, batches, comparison, otherReport;
    try {
      [batch, report, batches] = await Promise.all([get(`/batches/${batchId}`), get(`/batches/${batchId}/report`), get("/batches?limit=200")]);
      if (other) [comparison, otherReport] = await Promise.all([get(`/batches/${batchId}/compare${qs({ other })}`), get(`/batches/${other}/report`)]);
    } catch (err) {
      replace(main, h("p", { class: "crumbs" }, h("a", { href: "#/batches" }, "Batches")), h("h1", {}, "Batch"), errorBox(err, load));
      return;
    }
    if (stopped) return;
    // A redraw while the batch runs keeps the reader's place and focus.
    const focused = document.activeElement?.id;
    const scroll = window.scrollY;
    draw(batch, report, batches.data, comparison, otherReport);
    if (focused) document.getElementById(focused)?.focus({ preventScroll: true });
    window.scrollTo(0, scroll);
    clearTimeout(timer);
    if (batch.summary.finished < batch.summary.total) timer = setTimeout(load, REFRESH_MS);
  }

  function draw(batch, report, batches, comparison, otherReport) {
    const a = report.aggregate;
    const s = report.settings;
    const series = [{ rows: report.rows, cls: "series-a", label: `this batch (${fmt.shortId(batchId)})` }];
    if (otherReport) series.push({ rows: otherReport.rows, cls: "series-b", label: `batch ${fmt.shortId(other)}` });
    replace(
      main,
      h("p", { class: "crumbs" }, h("a", { href: "#/batches" }, "Batches"), " / ", fmt.shortId(batchId)),
      h("div", { class: "page-head" }, h("h1", {}, `Batch: ${s.suite} suite at world size ${s.world_size} on ${s.device_kind}`), progress(batch.summary)),
      h("p", { class: "muted" }, `Strategist ${s.strategist}; at most ${s.max_iters} step${s.max_iters === 1 ? "" : "s"} per workload; started ${fmt.age(batch.created_at)}.`),
      h(
        "section",
        { "aria-labelledby": "aggregate-title" },
        h("h2", { id: "aggregate-title", class: "sr-only" }, "Aggregates"),
        h(
          "div",
          { class: "stats" },
          stat("Workloads", `${a.finished}/${a.workloads}`, "finished"),
          stat("Correct", `${a.correct}`, `${fmt.percent(a.correctness_rate, 0)} of all`),
          ...Object.entries(a.fast_p).map(([p, v]) => stat(`fast_${p}`, fmt.fixed(v, 2), `correct and > ${p}× baseline`)),
          stat("Geomean speedup", fmt.speedup(a.geomean_speedup), "over correct workloads"),
          stat("Median of floor", fmt.percent(a.median_fraction_of_floor), "roofline fraction"),
          stat("GPU time", `${fmt.number(a.total_gpu_hours, 2)} h`, "GPU-hours"),
          stat("LLM cost", fmt.usd(a.total_llm_cost_usd), `${fmt.integer(a.total_tokens)} tokens`),
        ),
      ),
      h(
        "section",
        { "aria-labelledby": "fastp-title", class: "card" },
        h("h2", { id: "fastp-title" }, "fast_p"),
        h("p", { class: "muted" }, "Share of all workloads whose best kernel is correct and faster than p × the reference, for p from 0 to 3 (KernelBench's fast_p)."),
        h("div", { class: "plot-box", id: "fastp" }, fastPPlot(series), h("ul", { class: "legend" }, series.map((x) => h("li", {}, h("span", { class: `swatch ${x.cls}`, "aria-hidden": "true" }), x.label)))),
      ),
      h("section", { "aria-labelledby": "rows-title" }, h("h2", { id: "rows-title" }, "Workloads"), rowsTable(report.rows)),
      report.below_half_of_floor.length
        ? h(
            "section",
            { "aria-labelledby": "below-title", class: "card" },
            h("h2", { id: "below-title" }, "Under half of the roofline floor, and what bounds them"),
            h("ul", {}, report.below_half_of_floor.map((b) => h("li", {}, h("strong", {}, b.workload), ` (${fmt.percent(b.fraction_of_floor)} of a ${b.dominant}-bound floor): ${b.bottleneck}`))),
          )
        : null,
      compareSection(batches, comparison, navigate),
    );
  }

  function compareSection(batches, comparison, navigate) {
    const others = batches.filter((b) => b.id !== batchId);
    const select = h(
      "select",
      { id: "compare-with", name: "compare" },
      h("option", { value: "" }, "choose a batch"),
      others.map((b) => h("option", { value: b.id, selected: b.id === other }, `${b.suite} · ws ${b.settings.world_size} · ${b.settings.device_kind} · ${fmt.shortId(b.id)} (${fmt.age(b.created_at)})`)),
    );
    const form = h(
      "form",
      { class: "filters" },
      h("div", { class: "field" }, h("label", { for: "compare-with" }, "Compare with"), select),
      h("button", { type: "submit" }, "Compare"),
      other ? h("a", { class: "button subtle", href: `#/batches/${batchId}` }, "Stop comparing") : null,
    );
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      navigate(`/batches/${batchId}`, { compare: select.value });
    });
    const section = h("section", { "aria-labelledby": "compare-title", class: "card", id: "compare" }, h("h2", { id: "compare-title" }, "Comparison with another batch"));
    if (!others.length) {
      section.append(empty("There is no other batch to compare with yet."));
      return section;
    }
    section.append(form);
    if (!comparison) return section;
    const rows = Object.entries(comparison.aggregate).map(([metric, [va, vb]]) => ({ metric, va, vb }));
    const show = (metric, v) =>
      v === null || v === undefined
        ? fmt.DASH
        : metric.includes("geomean")
          ? fmt.speedup(v)
          : metric.includes("cost")
            ? fmt.usd(v)
            : metric.includes("fraction")
              ? fmt.percent(v)
              : fmt.fixed(v, 3);
    section.append(
      table(
        [
          ["Measure", (r) => r.metric.replace(/_/g, " ")],
          ["This batch (A)", (r) => show(r.metric, r.va), { numeric: true }],
          [`Batch ${fmt.shortId(comparison.b)} (B)`, (r) => show(r.metric, r.vb), { numeric: true }],
        ],
        rows,
        { caption: "Aggregates, A then B" },
      ),
      table(
        [
          ["Workload", (w) => w.workload],
          ["Speedup A", (w) => fmt.speedup(w.speedup_a), { numeric: true }],
          ["Speedup B", (w) => fmt.speedup(w.speedup_b), { numeric: true }],
          ["Change", (w) => badge(w.change.replace(/ /g, "_"))],
          ["Strategy A", (w) => w.strategy_a || fmt.DASH],
          ["Strategy B", (w) => w.strategy_b || fmt.DASH],
        ],
        comparison.workloads,
        { caption: "Per workload (a change needs more than 2%)", rowProps: (w) => ({ "data-workload": w.workload }) },
      ),
    );
    return section;
  }

  await load();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function stat(label, value, note) {
  return h("div", { class: "stat" }, h("div", { class: "stat-label" }, label), h("div", { class: "stat-value" }, value), h("div", { class: "stat-note" }, note));
}

function rowsTable(rows) {
  if (!rows.length) return empty("This batch has no workloads.");
  return table(
    [
      ["Workload", (r) => h("a", { href: `#/jobs/${r.job_id}` }, r.workload)],
      ["Family", (r) => r.family],
      ["State", (r) => badge(r.state)],
      ["Outcome", (r) => r.outcome || fmt.DASH],
      // The two times the best kernel's speedup divides, from the same measurement.
      ["Reference", (r) => fmt.ms(r.reference_ms ?? r.baseline_ms), { numeric: true }],
      ["Best", (r) => fmt.ms(r.best_ms), { numeric: true }],
      ["Speedup (95% CI)", (r) => speedupCell(r), { numeric: true }],
      ["Floor", (r) => fmt.ms(r.floor_ms), { numeric: true }],
      ["Of floor", (r) => fmt.percent(r.fraction_of_floor), { numeric: true }],
      ["Correct", (r) => (r.correct ? badge("yes") : badge("no"))],
      ["Strategy", (r) => r.strategy || fmt.DASH],
      ["Steps", (r) => r.steps, { numeric: true }],
    ],
    rows,
    { rowProps: (r) => ({ "data-workload": r.workload, title: r.correct ? "" : r.stop_reason }) },
  );
}

function speedupCell(r) {
  const value = r.measured_speedup ?? r.speedup;
  if (value === null || value === undefined) return fmt.DASH;
  const ci = r.speedup_ci ? ` (${fmt.speedup(r.speedup_ci[0])}–${fmt.speedup(r.speedup_ci[1])})` : "";
  const verdict = r.verdict && r.verdict !== "faster" ? `: ${r.verdict}` : "";
  return `${fmt.speedup(value)}${ci}${verdict}`;
}
