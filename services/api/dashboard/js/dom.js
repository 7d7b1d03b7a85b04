// Building the page from data without innerHTML: every text a server sends (workload names, code,
// error messages) becomes a text node, never markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

function setProps(el, props) {
  for (const [name, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on") && typeof value === "function") el.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(el.dataset, value);
    else if (value === true) el.setAttribute(name, "");
    else el.setAttribute(name, value);
  }
  return el;
}

/** An HTML element: h("a", {href: "#/jobs"}, "Jobs"). */
export function h(tag, props, ...children) {
  return append(setProps(document.createElement(tag), props), children);
}

/** An SVG element, with the same calling convention as h(). */
export function s(tag, props, ...children) {
  return append(setProps(document.createElementNS(SVG_NS, tag), props), children);
}

/** Replace everything in ``el`` with ``children``. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** Redraw ``container`` with ``draw()``, keeping keyboard focus on the same link or control. */
export function keepFocus(container, draw) {
  const active = document.activeElement;
  const key = active && container.contains(active) ? active.getAttribute("href") || active.id : null;
  draw();
  if (!key) return;
  const again = [...container.querySelectorAll("a[href], [id]")].find((el) => el.getAttribute("href") === key || el.id === key);
  again?.focus({ preventScroll: true });
}

/** A loading line that screen readers announce. */
export function loading(what = "Loading…") {
  return h("p", { class: "loading", role: "status" }, what);
}

/** An empty state: what is missing and what to do about it. */
export function empty(text, ...more) {
  return h("div", { class: "empty" }, h("p", {}, text), ...more);
}

/** An error box with the API's message and, where given, a way to try again. */
export function errorBox(error, retry) {
  return h(
    "div",
    { class: "error", role: "alert" },
    h("p", {}, h("strong", {}, error.status ? `Error ${error.status}: ` : "Error: "), error.message || String(error)),
    retry ? h("button", { type: "button", onclick: retry }, "Try again") : null,
  );
}

/** A table: ``columns`` are [header, (row) => cell, {numeric}] triples. */
export function table(columns, rows, { caption, rowProps } = {}) {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      {},
      caption ? h("caption", {}, caption) : null,
      h("thead", {}, h("tr", {}, columns.map(([head, , opts]) => h("th", { scope: "col", class: opts?.numeric ? "num" : null, title: opts?.title ?? null }, head)))),
      h(
        "tbody",
        {},
        rows.map((row) =>
          h("tr", rowProps ? rowProps(row) : {}, columns.map(([, cell, opts]) => h("td", { class: opts?.numeric ? "num" : null }, cell(row)))),
        ),
      ),
    ),
  );
}

/** A definition list from [term, value] pairs (pairs whose value is null are left out). */
export function facts(pairs, cls = "facts") {
  return h(
    "dl",
    { class: cls },
    pairs.filter(([, v]) => v !== null && v !== undefined && v !== "").map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value))),
  );
}

/** A state or status badge, coloured by its meaning. */
export function badge(text) {
  return h("span", { class: `badge badge-${String(text).replace(/[^a-z_]/gi, "")}` }, String(text).replace(/_/g, " "));
}
