// Job: the trajectory plot and the table of steps, kept current from the job's event stream
// (server-sent events, with the key in the kloom_key cookie) without reloading the page.

import { API, allSteps, get, post } from "../api.js";
import { badge, empty, errorBox, facts, h, keepFocus, replace, table } from "../dom.js";
import * as fmt from "../format.js";
import { trajectoryLegend, trajectoryPlot } from "../plot.js";
import { isWin, measured, selfBias } from "../speedup.js";

const FINISHED = new Set(["succeeded", "failed", "cancelled", "stopped"]);

function speedupFacts(timing, bias) {
  const m = measured(timing, bias);
  return m ? { reference_ms: m.reference_ms, low: m.low, high: m.high, verdict: m.verdict } : {};
}

/** A speedup with the two times it divides and its interval: "1.42× (0.91 / 0.64 ms, 95% CI 1.31–1.55×)". */
export function speedupText(st) {
  const ci = st.low !== null && st.low !== undefined ? `, 95% CI ${fmt.speedup(st.low)}–${fmt.speedup(st.high)}` : "";
  return `${fmt.speedup(st.speedup)} (${fmt.ms(st.reference_ms)} / ${fmt.ms(st.candidate_ms)}${ci})`;
}

/** The step's row fields from its record (agents.records.Step); `bias`: the job's (selfBias). */
export function stepView(step, bias = 0) {
  const data = step.data || step;
  const timing = data.evaluation?.timing;
  const correct = data.status === "correct";
  return {
    index: data.index,
    status: data.status,
    strategy: data.plan?.strategy,
    source: data.plan?.source,
    speedup: correct ? timing?.speedup ?? null : null,
    ...(correct ? speedupFacts(timing, bias) : {}),
    candidate_ms: correct ? timing?.candidate_ms ?? null : null,
    fraction: correct ? data.evaluation?.roofline?.fraction_of_floor ?? null : null,
    tokens: (data.usage?.prompt_tokens || 0) + (data.usage?.completion_tokens || 0),
    cost: data.usage?.cost_usd,
    seconds: Object.values(data.seconds || {}).reduce((a, b) => a + b, 0),
    note: data.error || (data.feedback || "").split("\n")[0],
  };
}

export async function jobPage(main, [jobId]) {
  const state = { job: null, traj: null, steps: new Map(), live: "idle" };
  let source = null;
  let closed = false;

  async function load() {
    replace(main, h("p", { class: "loading", role: "status" }, "Loading the job…"));
    try {
      const [job, traj, steps] = await Promise.all([get(`/jobs/${jobId}`), get(`/jobs/${jobId}/trajectory`), allSteps(jobId)]);
      state.job = job;
      state.traj = traj;
      for (const st of steps) state.steps.set(st.index, st.data);
    } catch (err) {
      replace(main, h("h1", {}, "Job"), errorBox(err, load));
      return;
    }
    replace(main, head, notice, summary, h("section", { "aria-labelledby": "plot-title" }, h("h2", { id: "plot-title" }, "Trajectory"), liveLine, plotBox), stepsBox);
    draw();
    if (!FINISHED.has(state.job.state)) follow();
  }

  // The page's parts, redrawn in place as events arrive.
  const head = h("div", { class: "page-head" });
  const notice = h("div", { id: "job-notice" });
  const summary = h("section", { "aria-label": "Summary" });
  const liveLine = h("p", { class: "live", id: "live-status", role: "status" });
  const plotBox = h("div", { class: "plot-box", id: "trajectory" });
  const stepsBox = h("section", { "aria-labelledby": "steps-title" });

  function draw() {
    const { job, traj } = state;
    const bias = selfBias([...state.steps.values()]);
    const steps = [...state.steps.values()].sort((a, b) => a.index - b.index).map((st) => stepView(st, bias));
    keepFocus(head, () => replace(
      head,
      h("div", {}, h("p", { class: "crumbs" }, h("a", { href: "#/jobs" }, "Jobs"), " / ", fmt.shortId(job.id)), h("h1", {}, job.workload_name, " ", badge(job.state))),
      FINISHED.has(job.state) ? null : h("button", { type: "button", id: "cancel", onclick: cancel, disabled: job.cancel_requested }, job.cancel_requested ? "Cancelling…" : "Cancel job"),
    ));
    replace(notice, stateNotice(job));
    const best = job.best_step_index;
    replace(
      summary,
      facts([
        ["Outcome", outcome(job, steps)],
        ["Of roofline floor", fmt.percent(job.best_fraction_of_floor)],
        ["Reference", traj?.reference_ms ? fmt.ms(traj.reference_ms) : "not measured yet"],
        ["Roofline floor", traj?.floor_ms ? `${fmt.ms(traj.floor_ms)} (${traj.dominant}-bound)` : fmt.DASH],
        ["Steps", `${job.num_steps} of at most ${job.limits.max_iters}`],
        ["World size", job.world_size],
        ["Device", job.device_kind],
        ["Strategist", job.strategist],
        ["Tokens", fmt.integer(traj?.usage?.tokens)],
        ["Cost", fmt.usd(job.cost_usd)],
        ["Worker", job.worker_id || fmt.DASH],
        ["Attempts", job.attempts],
        ["Submitted", fmt.when(job.created_at)],
        ["Ran for", job.started_at ? fmt.duration(job.started_at, job.finished_at) : fmt.DASH],
        ["Batch", job.batch_id ? h("a", { href: `#/batches/${job.batch_id}` }, fmt.shortId(job.batch_id)) : null],
      ]),
    );
    keepFocus(plotBox, () => replace(
      plotBox,
      trajectoryPlot({
        steps,
        jobId: job.id,
        floorSpeedup: traj?.floor_speedup,
        // While the job runs the axis spans its limit (points do not jump as they arrive); once
        // it has finished, the steps that exist.
        stepsPlanned: FINISHED.has(job.state) ? Math.max(1, steps.length) : job.limits.max_iters,
        emptyText: FINISHED.has(job.state) ? "No candidate was evaluated" : "No candidate evaluated yet",
      }),
      trajectoryLegend(),
    ));
    plotBox.dataset.points = String(steps.length);
    keepFocus(stepsBox, () => replace(
      stepsBox,
      h("h2", { id: "steps-title" }, "Steps"),
      steps.length
        ? table(
            [
              ["#", (st) => h("a", { href: `#/jobs/${job.id}/steps/${st.index}` }, `Step ${st.index}`)],
              ["Strategy", (st) => st.strategy],
              ["Status", (st) => badge(st.status)],
              ["Speedup", (st) => fmt.speedup(st.speedup), { numeric: true }],
              ["Time", (st) => fmt.ms(st.candidate_ms), { numeric: true }],
              ["Of roofline", (st) => fmt.percent(st.fraction), { numeric: true }],
              ["Tokens", (st) => fmt.integer(st.tokens), { numeric: true }],
              ["Cost", (st) => fmt.usd(st.cost), { numeric: true }],
              ["Took", (st) => fmt.seconds(st.seconds), { numeric: true }],
              ["What happened", (st) => h("span", { class: "note", title: st.note }, st.note)],
            ],
            steps,
            { rowProps: (st) => ({ "data-step": st.index, "data-status": st.status }) },
          )
        : empty(FINISHED.has(job.state) ? "This job recorded no step." : "No step yet: the worker measures the reference first, then each candidate appears here as it is evaluated."),
    ));
    replace(liveLine, liveText());
  }

  function liveText() {
    if (FINISHED.has(state.job.state)) return `Finished ${fmt.age(state.job.finished_at)}.`;
    if (state.live === "open") return "Live: following the job's events.";
    if (state.live === "reconnecting") return "The event stream dropped; reconnecting…";
    if (state.live === "refused") return "The API closed the event stream; reload the page to follow the job again.";
    return "Connecting to the job's events…";
  }

  async function refreshJob() {
    try {
      const [job, traj] = await Promise.all([get(`/jobs/${jobId}`), get(`/jobs/${jobId}/trajectory`)]);
      state.job = job;
      state.traj = traj;
    } catch {
      return; // the events keep coming; the summary catches up on the next one
    }
    if (!closed) draw();
  }

  function follow() {
    // The browser resumes with Last-Event-ID after a drop; steps merge by index, so a replay is harmless.
    source = new EventSource(`${API}/jobs/${encodeURIComponent(jobId)}/events`, { withCredentials: true });
    source.addEventListener("open", () => {
      state.live = "open";
      replace(liveLine, liveText());
    });
    source.addEventListener("error", () => {
      if (closed) return;
      // CLOSED: the API refused the stream (a revoked key, a job gone); the browser will not retry.
      state.live = source.readyState === EventSource.CLOSED ? "refused" : "reconnecting";
      replace(liveLine, liveText());
    });
    source.addEventListener("step", (event) => {
      const data = JSON.parse(event.data);
      if (data.step) state.steps.set(data.step.index, data.step);
      plotBox.dataset.events = String(Number(plotBox.dataset.events || 0) + 1);
      refreshJob();
    });
    for (const kind of ["state", "cancel"]) {
      source.addEventListener(kind, (event) => {
        const data = JSON.parse(event.data);
        if (kind === "state") {
          Object.assign(state.job, { state: data.state, stop_reason: data.stop_reason, attempts: data.attempts, worker_id: data.worker_id });
          // The stream ends once the job has finished; without this the browser would reconnect forever.
          if (FINISHED.has(data.state)) stop();
        }
        draw();
        refreshJob();
      });
    }
  }

  function stop() {
    if (source) source.close();
    source = null;
  }

  async function cancel() {
    try {
      state.job = await post(`/jobs/${jobId}/cancel`);
    } catch (err) {
      replace(notice, errorBox(err));
      return;
    }
    draw();
  }

  await load();
  return () => {
    closed = true;
    stop();
  };
}

function stateNotice(job) {
  if (job.state === "failed") return h("div", { class: "error", role: "alert" }, h("p", {}, h("strong", {}, "This job failed: "), job.stop_reason || "no reason was recorded"));
  if (job.state === "stopped" || job.state === "cancelled") return h("div", { class: "notice" }, h("p", {}, h("strong", {}, `This job was ${job.state}: `), job.stop_reason));
  if (job.state === "succeeded") return h("p", { class: "muted" }, `Finished: ${job.stop_reason}.`);
  if (job.state === "queued" && job.waiting) return h("div", { class: "notice" }, h("p", {}, h("strong", {}, "Waiting: "), job.waiting));
  if (job.state === "queued") return h("p", { class: "muted" }, job.attempts ? "Queued again after its worker stopped; it resumes from its last step." : "Queued: waiting for a worker that serves this device kind.");
  return null;
}


/** What the job found: a measurable win (its speedup, the two times, the interval), or that the
 * reference stands. */
function outcome(job, steps) {
  const best = job.best_step_index;
  if (best === null || best === undefined) return FINISHED.has(job.state) ? "no correct kernel" : fmt.DASH;
  const st = steps.find((x) => x.index === best);
  if (!st) return `${fmt.speedup(job.best_speedup)} (step ${best})`;
  const link = (text) => h("a", { href: `#/jobs/${job.id}/steps/${best}` }, text);
  if (isWin(st)) return link(`faster kernel found: ${speedupText(st)}, step ${best}`);
  return h("span", {}, "no faster kernel found: the reference stands at 1.00× (best kernel ", link(`step ${best}: ${speedupText(st)}, ${st.verdict}`), ")");
}
