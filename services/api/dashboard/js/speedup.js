// What a measured speedup means (kloom/speedup.py, the same rules): its 95% interval (the one the
// evaluator computed from the interleaved samples, else one from the per-rank statistics) and its
// verdict; a speedup whose interval, widened by the noise between evaluations (noiseFloor), includes
// 1 is "no measurable change", and a job whose best
// kernel is not a measurable win found no faster kernel: the reference stands at 1.00×.

const Z95 = 1.959964;
// kloom.speedup.noise_floor: 1% plus 20 us over the call's time.
const NOISE_FLOOR_REL = 0.01;
const NOISE_FLOOR_MS = 0.02;

function noiseFloor(callMs) {
  return NOISE_FLOOR_REL + NOISE_FLOOR_MS / Math.max(callMs, 1e-3);
}

function statsInterval(reference, candidate) {
  if (!reference?.length || !candidate?.length) return null;
  const slowest = (list) => list.reduce((a, b) => (b.median_ms > a.median_ms ? b : a));
  const ref = slowest(reference);
  const cand = slowest(candidate);
  if (!(ref.median_ms > 0 && cand.median_ms > 0 && ref.iters >= 2 && cand.iters >= 2)) return null;
  const rel = (s) => (1.2533 * s.stdev_ms) / Math.sqrt(s.iters) / s.median_ms;
  const ratio = ref.median_ms / cand.median_ms;
  const half = Z95 * Math.hypot(rel(ref), rel(cand));
  return [ratio * Math.exp(-half), ratio * Math.exp(half)];
}

/**
 * The side bias a job's timing showed (kloom.speedup.self_timing_bias over agents.records
 * steps_self_bias): how far the reference's own copy, where a step ran it correctly, read from 1.0x.
 * `steps`: the job's step records.
 */
export function selfBias(steps) {
  const copies = steps.filter((st) => st.status === "correct" && st.plan?.strategy === "reference_copy" && st.evaluation?.timing?.speedup > 0);
  return Math.max(0, ...copies.map((st) => Math.max(st.evaluation.timing.speedup, 1 / st.evaluation.timing.speedup) - 1));
}

/**
 * {speedup, reference_ms, candidate_ms, low, high, verdict} of a step's timing record, or null;
 * `bias`: the job's side bias (selfBias), which widens the verdict's floor.
 */
export function measured(timing, bias = 0) {
  if (!timing || timing.speedup === null || timing.speedup === undefined) return null;
  let ci = timing.speedup_ci_low != null && timing.speedup_ci_high != null ? [timing.speedup_ci_low, timing.speedup_ci_high] : null;
  if (!ci) ci = statsInterval(timing.reference, timing.candidate);
  const [low, high] = ci || [null, null];
  const referenceMs = timing.reference_ms != null ? timing.reference_ms : timing.speedup * timing.candidate_ms;
  const floor = (1 + noiseFloor(Math.min(referenceMs, timing.candidate_ms))) * (1 + bias) - 1;
  const verdict = low === null ? "unmeasured" : low / (1 + floor) > 1 ? "faster" : high * (1 + floor) < 1 ? "slower" : "no measurable change";
  return { speedup: timing.speedup, reference_ms: timing.reference_ms, candidate_ms: timing.candidate_ms, low, high, verdict };
}

/** Whether a step is a measurable win over the reference (the reference's own copy never is). */
export function isWin(step) {
  return step.status === "correct" && step.strategy !== "reference_copy" && step.verdict === "faster";
}

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/**
 * The measurable win a job ranks first among `steps` (agents/records.py, best_of, the same rule),
 * or null: each step is ranked by the lower of its own speedup and the pooled reference (the median
 * of the correct steps' reference times) over its candidate's time, so that a reference that ran
 * slow in one evaluation does not choose the step; ties go to the earliest.
 */
export function bestWin(steps) {
  const timed = steps.filter((st) => st.status === "correct" && st.speedup > 0 && st.reference_ms > 0);
  const pooled = timed.length >= 2 ? median(timed.map((st) => st.reference_ms)) : null;
  const rank = (st) => (pooled !== null && st.candidate_ms > 0 ? Math.min(st.speedup, pooled / st.candidate_ms) : st.speedup);
  let best = null;
  for (const st of [...steps].sort((a, b) => a.index - b.index)) {
    if (isWin(st) && st.speedup > 0 && (best === null || rank(st) > rank(best))) best = st;
  }
  return best;
}
