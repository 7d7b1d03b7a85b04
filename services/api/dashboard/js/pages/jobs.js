// Jobs: every job of this key with its best result, filters, and the form that submits a job.

import { get, post, query as qs } from "../api.js";
import { badge, empty, errorBox, h, keepFocus, loading, replace, table } from "../dom.js";
import * as fmt from "../format.js";

const STATES = ["queued", "running", "succeeded", "failed", "cancelled", "stopped"];
const PAGE = 25;
const REFRESH_MS = 4000;

export async function jobsPage(main, _params, { query, navigate }) {
  const filters = { state: query.get("state") || "", workload: query.get("workload") || "", offset: Number(query.get("offset") || 0) };
  const list = h("section", { "aria-labelledby": "jobs-title", "aria-live": "polite", "aria-busy": "true" }, loading("Loading jobs…"));
  const submit = h("section", { "aria-labelledby": "submit-title", class: "card" });
  replace(
    main,
    h(
      "div",
      { class: "page-head" },
      h("h1", { id: "jobs-title" }, "Jobs"),
      // A button, not an in-page link: the hash holds the route.
      h("button", { type: "button", onclick: () => submit.querySelector("input, select")?.focus() }, "Submit a job"),
    ),
    filterForm(filters, navigate),
    list,
    submit,
  );
  let timer = null;
  let stopped = false;

  async function refresh() {
    let page;
    try {
      page = await get(`/jobs${qs({ state: filters.state, workload: filters.workload, offset: filters.offset, limit: PAGE })}`);
    } catch (err) {
      list.setAttribute("aria-busy", "false");
      replace(list, errorBox(err, refresh));
      return;
    }
    if (stopped) return;
    list.setAttribute("aria-busy", "false");
    keepFocus(list, () => replace(list, jobsTable(page, filters, navigate)));
    clearTimeout(timer);
    if (page.data.some((j) => j.state === "queued" || j.state === "running")) timer = setTimeout(refresh, REFRESH_MS);
  }

  await refresh();
  submitForm(submit, navigate);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

function filterForm(filters, navigate) {
  const state = h("select", { id: "filter-state", name: "state" }, h("option", { value: "" }, "any state"), STATES.map((st) => h("option", { value: st, selected: st === filters.state }, st)));
  const workload = h("input", { id: "filter-workload", name: "workload", type: "search", value: filters.workload, placeholder: "name contains…" });
  const form = h(
    "form",
    { class: "filters", role: "search", "aria-label": "Filter jobs" },
    h("div", { class: "field" }, h("label", { for: "filter-state" }, "State"), state),
    h("div", { class: "field" }, h("label", { for: "filter-workload" }, "Workload"), workload),
    h("button", { type: "submit" }, "Filter"),
    filters.state || filters.workload ? h("a", { href: "#/jobs", class: "button subtle" }, "Clear") : null,
  );
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    navigate("/jobs", { state: state.value, workload: workload.value.trim() });
  });
  state.addEventListener("change", () => form.requestSubmit());
  return form;
}

function jobsTable(page, filters, navigate) {
  if (!page.data.length) {
    return filters.state || filters.workload
      ? empty("No job matches these filters.", h("a", { href: "#/jobs" }, "Show every job"))
      : empty("No jobs yet. Submit one with the form below: a suite workload on the CPU is a good first try.");
  }
  const rows = table(
    [
      ["Workload", (j) => h("a", { href: `#/jobs/${j.id}` }, j.workload_name)],
      ["Ranks", (j) => j.world_size, { numeric: true }],
      ["Device", (j) => j.device_kind],
      ["State", (j) => badge(j.state)],
      ["Steps", (j) => `${j.num_steps}/${j.limits.max_iters}`, { numeric: true }],
      ["Result", (j) => (j.outcome ? `${fmt.speedup(j.result_speedup)} (${j.outcome})` : fmt.speedup(j.best_speedup)), { numeric: true }],
      ["Of roofline", (j) => fmt.percent(j.best_fraction_of_floor), { numeric: true }],
      ["Cost", (j) => fmt.usd(j.cost_usd), { numeric: true }],
      ["Strategist", (j) => j.strategist],
      ["Age", (j) => fmt.when(j.created_at)],
    ],
    page.data,
    { caption: `${page.count} job${page.count === 1 ? "" : "s"}${filters.state ? `, ${filters.state}` : ""}${filters.workload ? `, workload contains “${filters.workload}”` : ""}`, rowProps: (j) => ({ "data-job": j.id }) },
  );
  const pager = h("nav", { class: "pager", "aria-label": "Pages of jobs" });
  const go = (offset) => navigate("/jobs", { state: filters.state, workload: filters.workload, offset: offset || "" });
  if (filters.offset > 0) pager.append(h("button", { type: "button", onclick: () => go(Math.max(0, filters.offset - PAGE)) }, "Newer"));
  pager.append(h("span", { class: "muted" }, `${filters.offset + 1}–${filters.offset + page.data.length} of ${page.count}`));
  if (filters.offset + page.data.length < page.count) pager.append(h("button", { type: "button", onclick: () => go(filters.offset + PAGE) }, "Older"));
  return h("div", {}, rows, pager);
}

async function submitForm(section, navigate) {
  replace(section, h("h2", { id: "submit-title" }, "Submit a job"), loading("Loading the suite…"));
  let suite = [];
  let queues = ["cpu"];
  try {
    [suite, queues] = await Promise.all([
      get("/suite").then((r) => r.data),
      get("/workers").then((r) => [...new Set(["cpu", ...r.data.flatMap((w) => w.queues)])]),
    ]);
  } catch (err) {
    replace(section, h("h2", { id: "submit-title" }, "Submit a job"), errorBox(err, () => submitForm(section, navigate)));
    return;
  }
  const byFamily = {};
  for (const w of suite) (byFamily[w.family] ||= []).push(w);

  const sourceSuite = h("input", { type: "radio", name: "source", id: "source-suite", value: "suite", checked: true });
  const sourceFile = h("input", { type: "radio", name: "source", id: "source-file", value: "file" });
  const workload = h(
    "select",
    { id: "workload", name: "workload" },
    Object.entries(byFamily).map(([family, items]) => h("optgroup", { label: family }, items.map((w) => h("option", { value: w.name }, w.name)))),
  );
  const description = h("p", { class: "help", id: "workload-help" });
  workload.setAttribute("aria-describedby", "workload-help");
  const file = h("input", { type: "file", id: "workload-file", name: "workload_file", accept: ".py,text/x-python", disabled: true });
  const worldSize = h("input", { type: "number", id: "world-size", name: "world_size", min: 1, max: 64, value: 2, required: true, "aria-describedby": "world-size-help" });
  const worldHelp = h("p", { class: "help", id: "world-size-help" });
  const device = h("input", { id: "device-kind", name: "device_kind", value: "cpu", list: "device-kinds", required: true, pattern: "cpu|cuda(-[a-z0-9]+x[0-9]+)?", "aria-describedby": "device-help" });
  const offline = h("input", { type: "radio", name: "strategist", id: "strategist-offline", value: "offline", checked: true });
  const useModel = h("input", { type: "radio", name: "strategist", id: "strategist-model", value: "model" });
  const model = h("input", { id: "model", name: "model", placeholder: "e.g. gpt-4o, anthropic/claude-sonnet-4-5", disabled: true });
  const maxIters = h("input", { type: "number", id: "max-iters", name: "max_iters", min: 1, max: 200, value: 8, required: true });
  const budget = h("input", { type: "number", id: "budget", name: "budget_usd", min: 0, step: "0.01", placeholder: "no limit" });
  const useKb = h("input", { type: "checkbox", id: "use-kb", name: "use_kb", checked: true });
  const profile = h(
    "select",
    { id: "profile", name: "profile", "aria-describedby": "profile-help" },
    [["new_best", "Each new best kernel"], ["every_correct", "Every correct kernel"], ["none", "None"]].map(([value, label]) => h("option", { value }, label)),
  );
  const status = h("div", { id: "submit-status", "aria-live": "polite" });
  const button = h("button", { type: "submit", class: "primary" }, "Submit job");

  function describe() {
    const w = suite.find((x) => x.name === workload.value);
    if (!w || sourceFile.checked) {
      description.textContent = sourceFile.checked ? "A workload file in kloom's format (a Model, get_inputs, WORLD_SIZES)." : "";
      worldHelp.textContent = "";
      return;
    }
    description.textContent = w.description || "";
    worldHelp.textContent = `This workload runs at world size ${w.world_sizes.join(", ")}.`;
    if (!w.world_sizes.includes(Number(worldSize.value))) worldSize.value = w.world_sizes[0];
  }
  function toggle() {
    workload.disabled = sourceFile.checked;
    file.disabled = !sourceFile.checked;
    model.disabled = !useModel.checked;
    model.required = useModel.checked;
    describe();
  }
  for (const el of [sourceSuite, sourceFile, offline, useModel]) el.addEventListener("change", toggle);
  workload.addEventListener("change", describe);

  const form = h(
    "form",
    { class: "submit-form", "aria-labelledby": "submit-title" },
    h(
      "fieldset",
      {},
      h("legend", {}, "Workload"),
      h("div", { class: "choice" }, sourceSuite, h("label", { for: "source-suite" }, "From the suite")),
      h("div", { class: "field" }, h("label", { for: "workload" }, "Suite workload"), workload, description),
      h("div", { class: "choice" }, sourceFile, h("label", { for: "source-file" }, "Upload a workload file")),
      h("div", { class: "field" }, h("label", { for: "workload-file" }, "Workload file (.py)"), file),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Where and how long"),
      h("div", { class: "field" }, h("label", { for: "world-size" }, "World size (ranks)"), worldSize, worldHelp),
      h("div", { class: "field" }, h("label", { for: "device-kind" }, "Device kind"), device, h("datalist", { id: "device-kinds" }, queues.map((q) => h("option", { value: q }))), h("p", { class: "help", id: "device-help" }, `cpu, or cuda-<gpu>x<count>; workers serve: ${queues.join(", ")}`)),
      h("div", { class: "field" }, h("label", { for: "max-iters" }, "Steps at most"), maxIters),
      h("div", { class: "field" }, h("label", { for: "budget" }, "Model budget (US dollars)"), budget),
      h("div", { class: "field" }, h("label", { for: "profile" }, "Hardware profiles"), profile, h("p", { class: "help", id: "profile-help" }, "Which correct kernels Nsight Compute and the kernel timeline profile on a GPU (each profile adds its run time to the job).")),
    ),
    h(
      "fieldset",
      {},
      h("legend", {}, "Strategist"),
      h("div", { class: "choice" }, offline, h("label", { for: "strategist-offline" }, "Offline (no model, no network)")),
      h("div", { class: "choice" }, useModel, h("label", { for: "strategist-model" }, "A model")),
      h("div", { class: "field" }, h("label", { for: "model" }, "Model name (as litellm knows it)"), model),
      h("div", { class: "choice" }, useKb, h("label", { for: "use-kb" }, "Let the knowledge base advise the planner")),
    ),
    h("div", { class: "actions" }, button, status),
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const data = new FormData();
    if (sourceFile.checked) {
      if (!file.files.length) {
        replace(status, h("p", { class: "error", role: "alert" }, "Choose a workload file to upload."));
        file.focus();
        return;
      }
      data.set("workload_file", file.files[0]);
    } else data.set("workload", workload.value);
    data.set("world_size", worldSize.value);
    data.set("device_kind", device.value.trim());
    data.set("strategist", useModel.checked ? model.value.trim() : "offline");
    data.set("max_iters", maxIters.value);
    if (budget.value !== "") data.set("budget_usd", budget.value);
    data.set("use_kb", useKb.checked ? "true" : "false");
    data.set("profile", profile.value);
    button.disabled = true;
    replace(status, h("p", { class: "loading", role: "status" }, "Submitting…"));
    try {
      const job = await post("/jobs", data);
      navigate(`/jobs/${job.id}`);
    } catch (err) {
      replace(status, h("p", { class: "error", role: "alert" }, `The job was not submitted: ${err.message}`));
    } finally {
      button.disabled = false;
    }
  });
  replace(section, h("h2", { id: "submit-title" }, "Submit a job"), form);
  toggle();
}
