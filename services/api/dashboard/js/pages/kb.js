// Knowledge base: search the kept kernels, list the strategies, and read one kernel or one
// strategy with its evidence (every job where it was tried, won or lost).

import { API, get, query as qs } from "../api.js";
import { badge, empty, errorBox, facts, h, loading, replace, table } from "../dom.js";
import * as fmt from "../format.js";

export async function kbPage(main, _params, { query, navigate }) {
  const q = query.get("q") || "";
  const family = query.get("family") || "";
  const text = h("input", { id: "kb-q", name: "q", type: "search", value: q, placeholder: "e.g. all-reduce rmsnorm fusion" });
  const familyInput = h("input", { id: "kb-family", name: "family", value: family, placeholder: "any", list: "kb-families" });
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Search the knowledge base" },
    h("div", { class: "field grow" }, h("label", { for: "kb-q" }, "Search kernels"), text),
    h("div", { class: "field" }, h("label", { for: "kb-family" }, "Family"), familyInput, h("datalist", { id: "kb-families" })),
    h("button", { type: "submit" }, "Search"),
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate("/kb", { q: text.value.trim(), family: familyInput.value.trim() });
  });
  const kernels = h("section", { "aria-labelledby": "kernels-title" }, h("h2", { id: "kernels-title" }, q ? `Kernels matching “${q}”` : "Fastest kernels"), loading());
  const strategies = h("section", { "aria-labelledby": "strategies-title" }, h("h2", { id: "strategies-title" }, "Strategies"), loading());
  replace(main, h("h1", {}, "Knowledge base"), h("p", { class: "muted" }, "What every finished job taught kloom: kernels that beat their reference, and how each strategy fared."), form, kernels, strategies);

  const [kResult, sResult] = await Promise.allSettled([get(`/kb/kernels${qs({ q, family, limit: 50 })}`), get(`/kb/strategies${qs({ family, limit: 100 })}`)]);
  const heading = kernels.firstChild;
  if (kResult.status === "rejected") replace(kernels, heading, errorBox(kResult.reason, () => kbPage(main, _params, { query, navigate })));
  else
    replace(
      kernels,
      heading,
      kResult.value.data.length
        ? table(
            [
              ["Workload", (k) => h("a", { href: `#/kb/kernels/${k.id}` }, k.workload_name)],
              ["Family", (k) => k.family],
              ["Ranks", (k) => k.world_size, { numeric: true }],
              ["Device", (k) => k.gpu || k.device],
              ["Strategy", (k) => k.strategy],
              ["Speedup", (k) => fmt.speedup(k.speedup), { numeric: true }],
              ["Of floor", (k) => fmt.percent(k.fraction_of_floor), { numeric: true }],
              q ? ["Relevance", (k) => fmt.number(k.score, 2), { numeric: true }] : null,
            ].filter(Boolean),
            kResult.value.data,
          )
        : empty(q || family ? "No kept kernel matches this search." : "The knowledge base has no kernel yet: it keeps the winners of finished jobs."),
    );
  const sHeading = strategies.firstChild;
  if (sResult.status === "rejected") replace(strategies, sHeading, errorBox(sResult.reason));
  else
    replace(
      strategies,
      sHeading,
      sResult.value.data.length
        ? table(
            [
              ["Strategy", (st) => h("a", { href: `#/kb/strategies/${st.id}` }, st.name)],
              ["Applies to", (st) => appliesTo(st.applies_to)],
              ["Wins", (st) => st.wins, { numeric: true }],
              ["Losses", (st) => st.losses, { numeric: true }],
              ["Confidence", (st) => fmt.percent(st.confidence, 0), { numeric: true }],
              ["Best speedup", (st) => fmt.speedup(st.best_speedup), { numeric: true }],
            ],
            sResult.value.data,
          )
        : empty("No strategy has evidence yet."),
    );
  const families = new Set([...(kResult.value?.data || []).map((k) => k.family)]);
  replace(form.querySelector("#kb-families"), [...families].map((f) => h("option", { value: f })));
}

/** A strategy's conditions in words; a [low, high] pair is a range whose null ends are open. */
function appliesTo(spec) {
  const parts = [];
  for (const [k, v] of Object.entries(spec || {})) {
    const name = k.replace(/_/g, " ");
    if (v === null || v === "" || (Array.isArray(v) && v.every((x) => x === null))) continue;
    if (Array.isArray(v) && v.length === 2 && v.every((x) => x === null || typeof x === "number")) {
      const [lo, hi] = k.endsWith("bytes") ? v.map((x) => (x === null ? null : fmt.bytes(x))) : v;
      parts.push(lo === null ? `${name} ≤ ${hi}` : hi === null ? `${name} ≥ ${lo}` : lo === hi ? `${name} ${lo}` : `${name} ${lo}–${hi}`);
    } else parts.push(`${name}: ${Array.isArray(v) ? v.join(", ") : typeof v === "object" ? JSON.stringify(v) : v}`);
  }
  return parts.length ? parts.join("; ") : "any workload";
}

export async function kernelPage(main, [kernelId]) {
  let k;
  try {
    k = await get(`/kb/kernels/${kernelId}`);
  } catch (err) {
    replace(main, h("p", { class: "crumbs" }, h("a", { href: "#/kb" }, "Knowledge base")), h("h1", {}, "Kernel"), errorBox(err, () => kernelPage(main, [kernelId])));
    return;
  }
  const summary = k.evaluation?.status ? `${k.evaluation.status} on ${k.evaluation.world_size} ranks` : null;
  replace(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/kb" }, "Knowledge base"), " / kernel ", fmt.shortId(k.id)),
    h("div", { class: "page-head" }, h("h1", {}, `${k.workload_name}: ${k.strategy}`), h("a", { class: "button", href: `${API}/kb/kernels/${k.id}/export`, download: "" }, "Export as a zip")),
    h(
      "section",
      { class: "card", "aria-labelledby": "kernel-facts" },
      h("h2", { id: "kernel-facts" }, "What it is and how it did"),
      facts([
        ["Speedup", fmt.speedup(k.speedup)],
        ["Time", `${fmt.ms(k.candidate_ms)} vs reference ${fmt.ms(k.reference_ms)}`],
        ["Of roofline floor", fmt.percent(k.fraction_of_floor)],
        ["Evaluation", summary],
        ["Family", k.family],
        ["World size", k.world_size],
        ["Device", [k.device, k.gpu, k.interconnect].filter(Boolean).join(", ")],
        ["Parameters", h("code", {}, JSON.stringify(k.params))],
        ["Planned by", `${k.plan_source}${k.model && k.model !== k.plan_source ? ` (${k.model})` : ""}`],
        ["From", h("a", { href: `#/jobs/${k.job_id}/steps/${k.step_index}` }, `job ${fmt.shortId(k.job_id)}, step ${k.step_index}`)],
        ["Kept", fmt.when(k.created_at)],
      ]),
      h("h3", {}, "Rationale"),
      h("p", { class: "prose" }, k.rationale || "No rationale was recorded."),
    ),
    h("section", { class: "card", "aria-labelledby": "kernel-code" }, h("h2", { id: "kernel-code" }, "Code"), h("pre", { class: "code", tabindex: 0 }, h("code", {}, k.code))),
  );
}

export async function strategyPage(main, [strategyId]) {
  let st;
  try {
    st = await get(`/kb/strategies/${strategyId}`);
  } catch (err) {
    replace(main, h("p", { class: "crumbs" }, h("a", { href: "#/kb" }, "Knowledge base")), h("h1", {}, "Strategy"), errorBox(err, () => strategyPage(main, [strategyId])));
    return;
  }
  replace(
    main,
    h("p", { class: "crumbs" }, h("a", { href: "#/kb" }, "Knowledge base"), " / strategy"),
    h("h1", {}, st.name),
    h("p", { class: "prose" }, st.description),
    h("p", { class: "prose" }, h("strong", {}, "Applies to: "), appliesTo(st.applies_to)),
    facts([
      ["Wins / losses", `${st.wins} / ${st.losses}`],
      ["Confidence", fmt.percent(st.confidence, 0)],
      ["Best speedup", fmt.speedup(st.best_speedup)],
      ["Best parameters", Object.keys(st.best_params || {}).length ? h("code", {}, JSON.stringify(st.best_params)) : null],
    ]),
    h(
      "section",
      { "aria-labelledby": "evidence-title" },
      h("h2", { id: "evidence-title" }, "Evidence"),
      st.evidence.length
        ? table(
            [
              ["Job", (e) => h("a", { href: `#/jobs/${e.job_id}/steps/${e.step_index}` }, `${e.workload_name} · step ${e.step_index}`)],
              ["Ranks", (e) => e.world_size, { numeric: true }],
              ["Outcome", (e) => badge(e.won ? "won" : "lost")],
              ["Status", (e) => badge(e.status)],
              ["Tries", (e) => e.tries, { numeric: true }],
              ["Speedup", (e) => fmt.speedup(e.speedup), { numeric: true }],
              ["Of floor", (e) => fmt.percent(e.fraction_of_floor), { numeric: true }],
              ["Parameters", (e) => h("code", {}, JSON.stringify(e.params))],
              ["What the profile said", (e) => h("span", { class: "note", title: e.profile_summary }, e.profile_summary || fmt.DASH)],
            ],
            st.evidence,
          )
        : empty("No job has tried this strategy yet."),
    ),
  );
}
