// A line diff (longest common subsequence) and its hunks with context, for candidate code against
// the previous best. Candidates are a few hundred lines; the common prefix and suffix (the
// reference's own source, mostly) are trimmed first, so the table covers only what changed.

const MAX_CELLS = 4_000_000;

/**
 * The edit script from ``a`` to ``b`` (arrays of lines): entries {op: " " | "-" | "+", line,
 * a: line number in a or null, b: line number in b or null}, numbered from 1.
 */
export function diffLines(a, b) {
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && a[endA - 1] === b[endB - 1]) {
    endA--;
    endB--;
  }
  const out = [];
  for (let i = 0; i < start; i++) out.push({ op: " ", line: a[i], a: i + 1, b: i + 1 });
  out.push(...middle(a, b, start, endA, endB));
  for (let i = endA, j = endB; i < a.length; i++, j++) out.push({ op: " ", line: a[i], a: i + 1, b: j + 1 });
  return out;
}

function middle(a, b, start, endA, endB) {
  const n = endA - start;
  const m = endB - start;
  if (n * m > MAX_CELLS) {
    // Too large to align line by line in a browser tab: show it as a replacement.
    return [
      ...a.slice(start, endA).map((line, i) => ({ op: "-", line, a: start + i + 1, b: null })),
      ...b.slice(start, endB).map((line, j) => ({ op: "+", line, a: null, b: start + j + 1 })),
    ];
  }
  // lcs[i][j]: length of the LCS of a[start+i..endA) and b[start+j..endB).
  const width = m + 1;
  const lcs = new Uint32Array((n + 1) * width);
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      lcs[i * width + j] = a[start + i] === b[start + j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[start + i] === b[start + j]) {
      out.push({ op: " ", line: a[start + i], a: start + i + 1, b: start + j + 1 });
      i++;
      j++;
    } else if (j < m && (i === n || lcs[i * width + j + 1] >= lcs[(i + 1) * width + j])) {
      out.push({ op: "+", line: b[start + j], a: null, b: start + j + 1 });
      j++;
    } else {
      out.push({ op: "-", line: a[start + i], a: start + i + 1, b: null });
      i++;
    }
  }
  return out;
}

/** The changed regions of an edit script, each with ``context`` unchanged lines around it. */
export function hunks(edits, context = 3) {
  const changed = edits.map((e, k) => (e.op !== " " ? k : -1)).filter((k) => k >= 0);
  const out = [];
  for (const k of changed) {
    const from = Math.max(0, k - context);
    const to = Math.min(edits.length, k + context + 1);
    const last = out[out.length - 1];
    if (last && from <= last.to) last.to = Math.max(last.to, to);
    else out.push({ from, to });
  }
  return out.map(({ from, to }) => edits.slice(from, to));
}

/** Lines added and removed. */
export function stats(edits) {
  return {
    added: edits.filter((e) => e.op === "+").length,
    removed: edits.filter((e) => e.op === "-").length,
  };
}
