// The two plots, drawn as SVG: a job's trajectory (speedup of every candidate by step, with the
// best-so-far step line, the baseline and the roofline floor) and a batch's fast_p curve.

import { h, s } from "./dom.js";
import * as fmt from "./format.js";
import { bestWin } from "./speedup.js";

const W = 960;

/** How a step's status is drawn: correct ones by speedup, the others in a strip under the axis. */
export const MARKS = {
  incorrect: { label: "incorrect", shape: "triangle" },
  crashed: { label: "crashed, runtime error or timeout", shape: "cross" },
  rejected: { label: "rejected or did not compile", shape: "diamond" },
  none: { label: "no candidate written", shape: "square" },
};

export function markOf(status) {
  if (status === "correct") return "correct";
  if (status === "incorrect") return "incorrect";
  if (["crashed", "runtime_error", "timeout", "workload_error"].includes(status)) return "crashed";
  if (["rejected", "compile_error"].includes(status)) return "rejected";
  return "none";
}

function shape(kind, x, y, props) {
  const r = 7;
  if (kind === "triangle") return s("path", { d: `M${x},${y - r} L${x + r},${y + r * 0.8} L${x - r},${y + r * 0.8} Z`, ...props });
  if (kind === "cross") return s("path", { d: `M${x - r},${y - r} L${x + r},${y + r} M${x - r},${y + r} L${x + r},${y - r}`, ...props });
  if (kind === "diamond") return s("path", { d: `M${x},${y - r} L${x + r},${y} L${x},${y + r} L${x - r},${y} Z`, ...props });
  if (kind === "square") return s("rect", { x: x - r + 1, y: y - r + 1, width: 2 * r - 2, height: 2 * r - 2, ...props });
  return s("circle", { cx: x, cy: y, r: 6, ...props });
}

/** Ticks of a log axis over [lo, hi]: the densest of these mantissa sets that gives at most ``max``. */
const MANTISSAS = [
  [1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8],
  [1, 1.5, 2, 3, 5, 7],
  [1, 2, 5],
  [1],
];

function logTicks(lo, hi, max = 9) {
  let ticks = [];
  for (const set of MANTISSAS) {
    ticks = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of set) {
        const v = m * 10 ** e;
        if (v >= lo && v <= hi) ticks.push(v);
      }
    }
    if (ticks.length <= max) return ticks;
  }
  return ticks.filter((_, i) => i % Math.ceil(ticks.length / max) === 0);
}

function tickLabel(v) {
  return v >= 1 ? `${Number(v.toPrecision(3))}×` : `${Number(v.toPrecision(2))}×`;
}

/**
 * The trajectory plot. ``steps``: [{index, status, speedup, strategy}]; ``floorSpeedup``: where
 * the roofline floor lies (reference_ms / floor_ms) or null; ``steps_planned``: the job's limit of
 * steps, so that the x axis does not jump as points arrive.
 */
export function trajectoryPlot({ steps, jobId, floorSpeedup, stepsPlanned = 1, emptyText = "No candidate evaluated yet" }) {
  const H = 380;
  // The lines are named in the right margin, where no point can hide their names.
  const m = { left: 100, right: 112, top: 24, bottom: 104 };
  const stripY = H - 58;
  const plotBottom = H - m.bottom;
  const n = Math.max(stepsPlanned, ...steps.map((st) => st.index + 1), 1);
  const x = (i) => m.left + ((i + 0.5) / n) * (W - m.left - m.right);

  const values = steps.filter((st) => st.speedup > 0).map((st) => st.speedup);
  const shown = [1, ...values];
  // A floor far above every candidate (CPU runs, latency-bound steps) would squash the points
  // into the bottom of the plot: it is then named at the top edge instead of drawn to scale.
  const floorOnScale = floorSpeedup > 0 && floorSpeedup <= 30 * Math.max(...shown);
  if (floorOnScale) shown.push(floorSpeedup);
  const lo = Math.min(...shown) / 1.4;
  const hi = Math.max(...shown) * 1.4;
  const y = (v) => plotBottom - ((Math.log10(v) - Math.log10(lo)) / (Math.log10(hi) - Math.log10(lo))) * (plotBottom - m.top);

  const svg = s("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "plot trajectory",
    role: "group",
    "aria-label": `Speedup of each candidate by step: ${steps.length} step(s)`,
  });
  const grid = s("g", { class: "grid" });
  for (const v of logTicks(lo, hi)) {
    grid.append(s("line", { x1: m.left, x2: W - m.right, y1: y(v), y2: y(v) }));
    grid.append(s("text", { x: m.left - 8, y: y(v) + 4, class: "tick", "text-anchor": "end" }, tickLabel(v)));
  }
  const every = Math.ceil(n / 20);
  for (let i = 0; i < n; i += every) grid.append(s("text", { x: x(i), y: H - 22, class: "tick", "text-anchor": "middle" }, String(i)));
  svg.append(grid);
  svg.append(s("line", { x1: m.left, x2: m.left, y1: m.top, y2: plotBottom, class: "axis" }));
  svg.append(s("line", { x1: m.left, x2: W - m.right, y1: plotBottom, y2: plotBottom, class: "axis" }));
  svg.append(s("text", { x: (W + m.left) / 2, y: H - 4, class: "axis-label", "text-anchor": "middle" }, "step"));
  svg.append(s("text", { x: 18, y: (m.top + plotBottom) / 2, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 18 ${(m.top + plotBottom) / 2})` }, "speedup (log scale)"));
  svg.append(s("rect", { x: m.left, y: stripY - 16, width: W - m.left - m.right, height: 32, class: "strip" }));
  svg.append(s("text", { x: m.left - 8, y: stripY + 4, class: "tick", "text-anchor": "end" }, "not correct"));

  svg.append(s("line", { x1: m.left, x2: W - m.right, y1: y(1), y2: y(1), class: "baseline" }));
  svg.append(s("text", { x: W - m.right + 8, y: y(1) + 4, class: "line-label baseline-label" }, "baseline 1×"));
  if (floorOnScale) {
    svg.append(s("line", { x1: m.left, x2: W - m.right, y1: y(floorSpeedup), y2: y(floorSpeedup), class: "floor" }));
    svg.append(
      s("text", { x: W - m.right + 8, y: y(floorSpeedup) - 4, class: "line-label floor-label" }, s("tspan", {}, "roofline floor "), s("tspan", { x: W - m.right + 8, dy: 16 }, fmt.speedup(floorSpeedup))),
    );
  } else if (floorSpeedup > 0) {
    svg.append(
      s("text", { x: W - m.right - 6, y: m.top + 12, class: "line-label floor-label halo", "text-anchor": "end" }, `↑ roofline floor ${fmt.speedup(floorSpeedup)} (off the scale)`),
    );
  }

  // The best-so-far step line: flat until a correct candidate beats it. Only measurable wins
  // count, ranked as the job ranks its steps (bestWin: speedup.js), so the line ends at the step the
  // job reports; a later step can re-rank an earlier one (the pooled reference moves).
  const ordered = [...steps].sort((a, b) => a.index - b.index);
  const bestAt = ordered.map((st, i) => bestWin(ordered.slice(0, i + 1)));
  let best = null;
  const path = [];
  ordered.forEach((st, i) => {
    const now = bestAt[i];
    if (now && now !== best) {
      if (best !== null) path.push(`L${x(st.index)},${y(best.speedup)}`);
      best = now;
      path.push(`${path.length ? "L" : "M"}${x(st.index)},${y(best.speedup)}`);
    }
  });
  if (best !== null) {
    path.push(`L${W - m.right},${y(best.speedup)}`);
    svg.append(s("path", { d: path.join(" "), class: "best-line" }));
  }

  const points = s("g", { class: "points" });
  ordered.forEach((st, i) => {
    const kind = markOf(st.status);
    const isCorrect = kind === "correct" && st.speedup > 0;
    const newBest = isCorrect && bestAt[i] === st;
    const cy = isCorrect ? y(st.speedup) : stripY;
    const verdict = isCorrect && st.verdict && st.verdict !== "faster" ? ` (${st.verdict})` : "";
    const label = `step ${st.index}: ${st.strategy || "?"}, ${st.status.replace(/_/g, " ")}${isCorrect ? `, ${fmt.speedup(st.speedup)}${verdict}` : ""}`;
    const mark = shape(isCorrect ? "circle" : MARKS[kind].shape, x(st.index), cy, {
      class: `mark mark-${isCorrect ? (newBest ? "best" : "correct") : kind}`,
    });
    points.append(
      s("a", { href: `#/jobs/${jobId}/steps/${st.index}`, "aria-label": label, class: "point", "data-status": st.status, "data-index": st.index }, s("title", {}, label), mark),
    );
  });
  svg.append(points);
  if (!steps.length) {
    svg.append(s("text", { x: (W + m.left) / 2, y: m.top + (plotBottom - m.top) * 0.3, class: "plot-empty", "text-anchor": "middle" }, emptyText));
  }
  return svg;
}

/** The legend of the trajectory plot, as HTML. */
export function trajectoryLegend() {
  const item = (cls, kind, text) =>
    h("li", {}, s("svg", { viewBox: "0 0 20 20", width: 20, height: 20, "aria-hidden": "true" }, kind === "line" ? s("line", { x1: 1, x2: 19, y1: 10, y2: 10, class: cls }) : shape(kind, 10, 10, { class: cls })), text);
  return h(
    "ul",
    { class: "legend", "aria-label": "Legend" },
    item("mark mark-best", "circle", "new best (a measurable win)"),
    item("mark mark-correct", "circle", "correct"),
    ...Object.entries(MARKS).map(([kind, { label, shape: sh }]) => item(`mark mark-${kind}`, sh, label)),
    item("best-line", "line", "best so far"),
    item("baseline", "line", "baseline (1×)"),
    item("floor", "line", "roofline floor"),
  );
}

/** KernelBench's fast_p over ``rows`` (share of all workloads correct and faster than p × baseline). */
export function fastP(rows, p) {
  if (!rows.length) return 0;
  return rows.filter((r) => r.correct && (r.speedup || 0) > p).length / rows.length;
}

/** fast_p for p from 0 to 3, one curve per series [{label, rows, cls}]. */
export function fastPPlot(series) {
  const H = 360;
  const m = { left: 64, right: 24, top: 20, bottom: 52 };
  const x = (p) => m.left + (p / 3) * (W - m.left - m.right);
  const y = (f) => H - m.bottom - f * (H - m.top - m.bottom);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "plot fastp", role: "img", "aria-label": "fast_p curve for p from 0 to 3" });
  const grid = s("g", { class: "grid" });
  for (let f = 0; f <= 1.0001; f += 0.25) {
    grid.append(s("line", { x1: m.left, x2: W - m.right, y1: y(f), y2: y(f) }));
    grid.append(s("text", { x: m.left - 8, y: y(f) + 4, class: "tick", "text-anchor": "end" }, f.toFixed(2)));
  }
  for (let p = 0; p <= 3; p += 0.5) grid.append(s("text", { x: x(p), y: H - m.bottom + 20, class: "tick", "text-anchor": "middle" }, p.toFixed(1)));
  svg.append(grid);
  svg.append(s("line", { x1: x(1), x2: x(1), y1: m.top, y2: H - m.bottom, class: "baseline" }));
  svg.append(s("line", { x1: m.left, x2: m.left, y1: m.top, y2: H - m.bottom, class: "axis" }));
  svg.append(s("line", { x1: m.left, x2: W - m.right, y1: H - m.bottom, y2: H - m.bottom, class: "axis" }));
  svg.append(s("text", { x: (W + m.left) / 2, y: H - 8, class: "axis-label", "text-anchor": "middle" }, "p (speedup threshold over the reference)"));
  svg.append(s("text", { x: 16, y: (H - m.bottom + m.top) / 2, class: "axis-label", "text-anchor": "middle", transform: `rotate(-90 16 ${(H - m.bottom + m.top) / 2})` }, "fast_p"));
  for (const { rows, cls, label } of series) {
    // A step function: it drops at each correct workload's speedup (fast_p counts speedup > p).
    const drops = [...new Set(rows.filter((r) => r.correct && r.speedup > 0 && r.speedup < 3).map((r) => r.speedup))].sort((a, b) => a - b);
    const pts = [`M${x(0)},${y(fastP(rows, 0))}`];
    for (const at of drops) pts.push(`L${x(at).toFixed(1)},${y(fastP(rows, at - 1e-12)).toFixed(1)}`, `L${x(at).toFixed(1)},${y(fastP(rows, at)).toFixed(1)}`);
    pts.push(`L${x(3)},${y(fastP(rows, 3))}`);
    svg.append(s("path", { d: pts.join(" "), class: `curve ${cls}` }, s("title", {}, label)));
    for (const p of [1.0, 1.2, 1.5, 2.0]) svg.append(s("circle", { cx: x(p), cy: y(fastP(rows, p)), r: 4, class: `curve-dot ${cls}` }, s("title", {}, `${label}: fast_${p} = ${fastP(rows, p).toFixed(2)}`)));
  }
  return svg;
}
