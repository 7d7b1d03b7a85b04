// How numbers and times read on the dashboard; a missing value is a dash, never "null" or "NaN".

export const DASH = "–";

function missing(v) {
  return v === null || v === undefined || (typeof v === "number" && !Number.isFinite(v));
}

export function speedup(v) {
  return missing(v) ? DASH : `${v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2)}×`;
}

export function percent(fraction, digits = 1) {
  if (missing(fraction)) return DASH;
  const p = 100 * fraction;
  return `${p !== 0 && Math.abs(p) < 0.1 ? p.toPrecision(2) : p.toFixed(digits)}%`;
}

export function ms(v) {
  if (missing(v)) return DASH;
  if (v >= 100) return `${v.toFixed(0)} ms`;
  if (v >= 0.1) return `${v.toPrecision(3)} ms`;
  return `${(v * 1000).toPrecision(3)} µs`;
}

export function us(v) {
  return missing(v) ? DASH : v >= 1000 ? `${(v / 1000).toPrecision(3)} ms` : `${v.toPrecision(3)} µs`;
}

export function usd(v) {
  if (v === null) return "unknown";
  if (missing(v)) return DASH;
  return v === 0 ? "$0" : v < 0.01 ? `$${v.toFixed(4)}` : `$${v.toFixed(2)}`;
}

export function number(v, digits = 3) {
  return missing(v) ? DASH : Number(v).toPrecision(digits);
}

export function bytes(v) {
  if (missing(v)) return DASH;
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i ? v.toPrecision(3) : v} ${units[i]}`;
}

export function fixed(v, digits = 2) {
  return missing(v) ? DASH : Number(v).toFixed(digits);
}

export function integer(v) {
  return missing(v) ? DASH : Math.round(v).toLocaleString("en-US");
}

export function seconds(v) {
  if (missing(v)) return DASH;
  return v < 1 ? `${(v * 1000).toFixed(0)} ms` : v < 120 ? `${v.toFixed(1)} s` : `${(v / 60).toFixed(1)} min`;
}

/** How long ago an ISO time was, in a few words ("12 s ago", "3 h ago"). */
export function age(iso, now = Date.now()) {
  if (!iso) return DASH;
  const s = Math.max(0, (now - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

/** A <time> element: the age as text, the exact time on hover. */
export function when(iso) {
  const el = document.createElement("time");
  if (!iso) {
    el.textContent = DASH;
    return el;
  }
  el.dateTime = iso;
  el.title = new Date(iso).toLocaleString();
  el.textContent = age(iso);
  return el;
}

export function duration(startIso, endIso) {
  if (!startIso) return DASH;
  return seconds(((endIso ? Date.parse(endIso) : Date.now()) - Date.parse(startIso)) / 1000);
}

export function shortId(id) {
  return id ? id.slice(0, 8) : DASH;
}
