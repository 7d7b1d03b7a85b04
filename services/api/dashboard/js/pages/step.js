// Step: the plan and why, the candidate with its diff against the previous best (or against the
// reference, for the first), the evaluation record per rank, the profile, and what it cost.

import { allSteps, get } from "../api.js";
import { diffLines, hunks, stats } from "../diff.js";
import { badge, empty, errorBox, facts, h, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { measured } from "../speedup.js";

/** The speedup as reported: the reference run as a candidate never counts above 1.0x. */
function reportedSpeedup(st) {
  const speedup = st.status === "correct" ? st.evaluation?.timing?.speedup : null;
  if (speedup == null) return null;
  return st.plan?.strategy === "reference_copy" ? Math.min(speedup, 1) : speedup;
}

/** The correct step with the highest speedup before ``index`` (ties: the earliest), as the job's best is chosen. */
export function previousBest(steps, index) {
  let best = null;
  for (const st of steps) {
    const speedup = reportedSpeedup(st);
    if (st.index < index && speedup != null && (best === null || speedup > reportedSpeedup(best))) best = st;
  }
  return best;
}

export async function stepPage(main, [jobId, indexText]) {
  const index = Number(indexText);
  let job;
  let steps;
  try {
    [job, steps] = await Promise.all([get(`/jobs/${jobId}`), allSteps(jobId).then((list) => list.map((st) => st.data))]);
  } catch (err) {
    replace(main, h("h1", {}, `Step ${index}`), errorBox(err, () => stepPage(main, [jobId, indexText])));
    return;
  }
  const step = steps.find((st) => st.index === index);
  const crumbs = h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), " / ", h("a", { href: `#/jobs/${jobId}` }, `${job.workload_name} (${fmt.shortId(jobId)})`), " / ", `step ${index}`);
  if (!step) {
    replace(main, crumbs, h("h1", {}, `Step ${index}`), empty(`Job ${fmt.shortId(jobId)} has no step ${index} (it has ${steps.length}).`, h("a", { href: `#/jobs/${jobId}` }, "Back to the job")));
    return;
  }
  const base = previousBest(steps, index);
  let baseCode = base?.candidate_code ?? null;
  let baseLabel = base ? `step ${base.index} (the best before this one, ${fmt.speedup(base.evaluation.timing.speedup)})` : "the reference (no correct candidate before this step)";
  if (!base) {
    try {
      baseCode = (await get(`/jobs/${jobId}/workload`)).source;
    } catch (err) {
      baseLabel = `the reference, which could not be read: ${err.message}`;
    }
  }
  const prev = steps.find((st) => st.index === index - 1);
  const next = steps.find((st) => st.index === index + 1);
  replace(
    main,
    crumbs,
    h(
      "div",
      { class: "page-head" },
      h("h1", {}, `Step ${index}: ${step.plan.strategy} `, badge(step.status)),
      h(
        "nav",
        { class: "pager", "aria-label": "Other steps" },
        prev ? h("a", { href: `#/jobs/${jobId}/steps/${index - 1}`, class: "button" }, "← Previous step") : null,
        next ? h("a", { href: `#/jobs/${jobId}/steps/${index + 1}`, class: "button" }, "Next step →") : null,
      ),
    ),
    step.error ? h("div", { class: "error", role: "alert" }, h("p", {}, h("strong", {}, "Error: "), step.error)) : null,
    planSection(step),
    codeSection(step, baseCode, baseLabel),
    evaluationSection(step.evaluation),
    profileSection(step.profile),
    usageSection(step),
  );
}

function planSection(step) {
  const plan = step.plan;
  return h(
    "section",
    { "aria-labelledby": "plan-title", class: "card" },
    h("h2", { id: "plan-title" }, "Plan"),
    facts([
      ["Strategy", plan.strategy],
      ["Planned by", plan.source],
      ["Builds on", plan.base_step !== null && plan.base_step !== undefined ? `step ${plan.base_step}` : null],
      ["Parameters", Object.keys(plan.params || {}).length ? h("code", {}, JSON.stringify(plan.params)) : "none"],
    ]),
    h("h3", {}, "Rationale"),
    h("p", { class: "prose" }, plan.rationale || "No rationale was recorded."),
    step.feedback ? [h("h3", {}, "The verifier's feedback"), h("pre", { class: "feedback" }, step.feedback)] : null,
  );
}

function codeSection(step, baseCode, baseLabel) {
  const section = h("section", { "aria-labelledby": "code-title", class: "card" }, h("h2", { id: "code-title" }, "Candidate code"));
  if (!step.candidate_code) {
    section.append(empty("No candidate was written at this step."));
    return section;
  }
  const panel = h("div", { id: "code-panel" });
  const diffTab = h("button", { type: "button", role: "tab", id: "tab-diff", "aria-controls": "code-panel" }, "Diff");
  const fullTab = h("button", { type: "button", role: "tab", id: "tab-full", "aria-controls": "code-panel" }, "Full code");
  const show = (which) => {
    diffTab.setAttribute("aria-selected", String(which === "diff"));
    fullTab.setAttribute("aria-selected", String(which === "full"));
    replace(panel, which === "diff" ? diffView(baseCode, step.candidate_code, baseLabel) : codeView(step.candidate_code));
  };
  diffTab.addEventListener("click", () => show("diff"));
  fullTab.addEventListener("click", () => show("full"));
  const tabs = h("div", { role: "tablist", class: "tabs", "aria-label": "Code view" }, diffTab, fullTab);
  tabs.addEventListener("keydown", (event) => {
    if (event.key === "ArrowRight" || event.key === "ArrowLeft") {
      const other = document.activeElement === diffTab ? fullTab : diffTab;
      other.focus();
      other.click();
    }
  });
  section.append(tabs, h("p", { class: "muted" }, `sha256 ${step.candidate_sha256.slice(0, 16)}…`), panel);
  show(baseCode === null ? "full" : "diff");
  return section;
}

function codeView(code) {
  const lines = code.split("\n");
  return h("pre", { class: "code", tabindex: 0, "aria-label": "Candidate code" }, h("code", {}, lines.map((line, i) => h("span", { class: "line" }, h("span", { class: "ln", "aria-hidden": "true" }, String(i + 1)), line, "\n"))));
}

function diffView(baseCode, code, baseLabel) {
  if (baseCode === null) return h("p", { class: "muted" }, `Nothing to compare with: ${baseLabel}.`);
  const edits = diffLines(baseCode.split("\n"), code.split("\n"));
  const { added, removed } = stats(edits);
  const header = h("p", { class: "diff-summary" }, `Against ${baseLabel}: `, h("span", { class: "added" }, `+${added}`), " ", h("span", { class: "removed" }, `−${removed}`), " lines.");
  if (!added && !removed) return h("div", {}, header, h("p", {}, "The same code as its base."));
  const parts = hunks(edits).map((hunk) =>
    h(
      "tbody",
      {},
      h("tr", { class: "hunk" }, h("td", { colspan: 4 }, `@@ ${hunk[0].a ?? hunk.find((e) => e.a)?.a ?? 0} / ${hunk[0].b ?? hunk.find((e) => e.b)?.b ?? 0} @@`)),
      hunk.map((e) =>
        h(
          "tr",
          { class: e.op === "+" ? "add" : e.op === "-" ? "del" : "ctx" },
          h("td", { class: "ln" }, e.a ?? ""),
          h("td", { class: "ln" }, e.b ?? ""),
          h("td", { class: "op", "aria-label": e.op === "+" ? "added" : e.op === "-" ? "removed" : "unchanged" }, e.op),
          h("td", { class: "src" }, e.line),
        ),
      ),
    ),
  );
  return h("div", {}, header, h("div", { class: "diff-wrap", tabindex: 0, "aria-label": "Diff" }, h("table", { class: "diff" }, h("caption", { class: "sr-only" }, `Diff against ${baseLabel}`), parts)));
}

function evaluationSection(ev) {
  const section = h("section", { "aria-labelledby": "eval-title", class: "card" }, h("h2", { id: "eval-title" }, "Evaluation"));
  if (!ev) {
    section.append(empty("This step was not evaluated."));
    return section;
  }
  const timing = ev.timing;
  const roof = ev.roofline;
  section.append(
    facts([
      ["Status", badge(ev.status)],
      ["Ranks", ev.world_size],
      ["Device", ev.device],
      ["Speedup", timing ? speedupLine(measured(timing)) : null],
      ["Candidate", timing ? fmt.ms(timing.candidate_ms) : null],
      ["Reference", timing ? fmt.ms(timing.reference_ms) : null],
      ["Clock", timing?.clock],
      ["Roofline floor", roof ? `${fmt.ms(roof.floor_ms)} (${roof.dominant}-bound)` : null],
      ["Of roofline floor", roof?.fraction_of_floor != null ? fmt.percent(roof.fraction_of_floor) : null],
      ["Trials", ev.trials?.length],
    ]),
  );
  if (ev.flags?.length) section.append(h("ul", { class: "flags", "aria-label": "Flags" }, ev.flags.map((f) => h("li", {}, f))));
  if (ev.error) {
    section.append(
      h("div", { class: "error" }, h("p", {}, h("strong", {}, `${ev.error.kind}${ev.error.rank !== null && ev.error.rank !== undefined ? ` on rank ${ev.error.rank}` : ""}${ev.error.phase ? ` (${ev.error.phase})` : ""}: `), ev.error.message)),
      ev.error.traceback ? h("details", {}, h("summary", {}, "Traceback"), h("pre", { class: "code" }, ev.error.traceback)) : null,
      ev.error.log_tail ? h("details", {}, h("summary", {}, "Log"), h("pre", { class: "code" }, ev.error.log_tail)) : null,
    );
  }
  if (timing) {
    // Interleaved records keep the reference timed alone before the candidate; older ones, after it.
    const other = timing.interleaved ? timing.reference_alone : timing.reference_after;
    const ranks = timing.candidate.map((c, rank) => ({ rank, c, r: timing.reference[rank], after: other?.[rank] }));
    section.append(
      h("h3", {}, "Times per rank"),
      table(
        [
          ["Rank", (x) => x.rank],
          ["Candidate median", (x) => fmt.ms(x.c.median_ms), { numeric: true }],
          ["p10–p90", (x) => `${fmt.ms(x.c.p10_ms)} – ${fmt.ms(x.c.p90_ms)}`, { numeric: true }],
          ["Reference median", (x) => fmt.ms(x.r?.median_ms), { numeric: true }],
          [timing.interleaved ? "Reference alone" : "Reference after", (x) => fmt.ms(x.after?.median_ms), { numeric: true }],
          ["Iterations", (x) => x.c.iters, { numeric: true }],
        ],
        ranks,
        {
          caption: timing.interleaved
            ? "Timed interleaved with the reference, call by call; the slowest rank sets the step's time. Reference alone: timed before the candidate was loaded."
            : "Timed after the reference; the slowest rank sets the step's time. Reference after: timed again after the candidate.",
        },
      ),
    );
  }
  if (ev.trials?.length) {
    const rows = ev.trials.flatMap((t) => t.ranks.map((r) => ({ ...r, trial: t.trial, phase: t.phase, seed: t.seed })));
    const failed = rows.filter((r) => !r.ok).length;
    section.append(
      h("h3", {}, "Correctness per rank"),
      h("p", {}, failed ? `${failed} of ${rows.length} rank checks failed.` : `All ${rows.length} rank checks passed (${ev.trials.length} trials × ${ev.world_size} ranks).`),
      h(
        "details",
        { open: failed > 0 },
        h("summary", {}, "Every trial and rank"),
        table(
        [
          ["Trial", (x) => x.trial],
          ["Phase", (x) => x.phase.replace("_", " ")],
          ["Rank", (x) => x.rank],
          ["Result", (x) => badge(x.ok ? "ok" : "mismatch")],
          ["Max abs diff", (x) => fmt.number(x.max_abs_diff), { numeric: true }],
          ["Max rel diff", (x) => fmt.number(x.max_rel_diff), { numeric: true }],
          ["Mismatched", (x) => `${x.mismatched} of ${fmt.integer(x.numel)}`, { numeric: true }],
          ["Message", (x) => x.message],
        ],
          rows,
          { rowProps: (x) => ({ class: x.ok ? null : "bad" }) },
        ),
      ),
    );
  }
  return section;
}

function profileSection(profile) {
  const section = h("section", { "aria-labelledby": "profile-title", class: "card" }, h("h2", { id: "profile-title" }, "Profile"));
  if (!profile) {
    section.append(empty("No profile was recorded for this step."));
    return section;
  }
  const nvml = profile.nvml || {};
  const link = profile.link || {};
  section.append(
    facts([
      ["Tool", profile.tool],
      ["Status", badge(profile.status)],
      ["Why", profile.reason],
      ["Communication share", fmt.percent(profile.communication_share)],
      ["Exposed communication", fmt.percent(profile.exposed_communication_share)],
      ["Idle", fmt.percent(profile.idle_share)],
      ["Link throughput", link.tx_gbps_max != null ? `${fmt.number(link.tx_gbps_max)} GB/s out, ${fmt.number(link.rx_gbps_max ?? 0)} GB/s in per GPU (${link.source || "?"})` : null],
      ["Profiling took", fmt.seconds(profile.seconds)],
    ]),
  );
  if (profile.summary) section.append(h("pre", { class: "feedback" }, Array.isArray(profile.summary) ? profile.summary.join("\n") : profile.summary));
  const devices = Object.entries(nvml.devices || {});
  if (devices.length) {
    const median = (d, key) => d[key]?.median;
    section.append(
      h("h3", {}, "GPUs while it ran (NVML)"),
      table(
        [
          ["GPU", ([i]) => i],
          ["Utilisation", ([, d]) => fmt.percent(median(d, "gpu_util_pct") != null ? median(d, "gpu_util_pct") / 100 : null), { numeric: true }],
          ["Memory throughput", ([, d]) => fmt.percent(median(d, "mem_util_pct") != null ? median(d, "mem_util_pct") / 100 : null), { numeric: true }],
          ["Memory used", ([, d]) => (median(d, "memory_used_gib") != null ? `${fmt.number(median(d, "memory_used_gib"))} GiB` : fmt.DASH), { numeric: true }],
          ["NVLink out (max)", ([, d]) => (d.nvlink_tx_gbps ? `${fmt.number(d.nvlink_tx_gbps.max)} GB/s` : fmt.DASH), { numeric: true }],
          ["Clock events", ([, d]) => (d.clock_event_reasons || []).join(", ") || "none"],
        ],
        devices,
        { caption: "Medians of the samples taken during the timing run." },
      ),
    );
  }
  const kernels = [...(profile.kernels || [])].sort((a, b) => b.total_us - a.total_us).slice(0, 10);
  if (kernels.length) {
    section.append(
      h("h3", {}, "Top kernels"),
      table(
        [
          ["Kernel", (k) => h("span", { class: "kernel-name", title: k.name }, k.name)],
          ["Kind", (k) => k.category],
          ["Calls", (k) => k.calls, { numeric: true }],
          ["Total", (k) => fmt.us(k.total_us), { numeric: true }],
          ["Share", (k) => fmt.percent(k.share), { numeric: true }],
          ["SM (SOL)", (k) => fmt.percent(k.sm_throughput_pct != null ? k.sm_throughput_pct / 100 : null), { numeric: true }],
          ["Memory (SOL)", (k) => fmt.percent(k.memory_throughput_pct != null ? k.memory_throughput_pct / 100 : null), { numeric: true }],
          ["DRAM", (k) => fmt.percent(k.dram_throughput_pct != null ? k.dram_throughput_pct / 100 : null), { numeric: true }],
          ["Bound by", (k) => h("span", { title: k.bottleneck_detail || "" }, k.bottleneck || fmt.DASH)],
        ],
        kernels,
      ),
    );
  }
  if (profile.timelines?.length) {
    section.append(
      h("h3", {}, "Timeline per rank"),
      table(
        [
          ["Rank", (t) => t.rank],
          ["Busy", (t) => fmt.us(t.busy_us), { numeric: true }],
          ["Compute", (t) => fmt.us(t.compute_us), { numeric: true }],
          ["Communication", (t) => fmt.us(t.communication_us), { numeric: true }],
          ["Exposed communication", (t) => fmt.us(t.exposed_communication_us), { numeric: true }],
        ],
        profile.timelines,
      ),
    );
  }
  return section;
}

function usageSection(step) {
  const u = step.usage || {};
  return h(
    "section",
    { "aria-labelledby": "usage-title", class: "card" },
    h("h2", { id: "usage-title" }, "Tokens, cost and time"),
    facts([
      ["Model", u.model || "none (offline)"],
      ["Model calls", u.calls],
      ["Prompt tokens", fmt.integer(u.prompt_tokens)],
      ["Completion tokens", fmt.integer(u.completion_tokens)],
      ["Cost", fmt.usd(u.cost_usd)],
      ...Object.entries(step.seconds || {}).map(([phase, sec]) => [`Time to ${phase}`, fmt.seconds(sec)]),
    ]),
  );
}

/** "1.42× (0.91 / 0.64 ms, 95% CI 1.31–1.55×)", with the verdict when it is not a win. */
function speedupLine(m) {
  const ci = m.low !== null ? `, 95% CI ${fmt.speedup(m.low)}–${fmt.speedup(m.high)}` : "";
  const text = `${fmt.speedup(m.speedup)} (${fmt.ms(m.reference_ms)} / ${fmt.ms(m.candidate_ms)}${ci})`;
  return m.verdict === "faster" ? text : `${text}: ${m.verdict}`;
}
