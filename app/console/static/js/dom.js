// Building the page: elements whose text is always text (keys, payloads and names are
// user data and never pass through innerHTML), tables with their empty states, times
// as people read them, and the confirmation dialog.

import { segment } from "./api.js";

/**
 * An element: `h("a", {href, className, onClick}, "text", child, …)`. A string child
 * becomes a text node; null, undefined and false children are left out; arrays are
 * spread. A property left null or undefined is not set.
 */
export function h(tag, properties = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(properties)) {
    if (value === null || value === undefined) {
      continue;
    }
    if (name.startsWith("on")) {
      element.addEventListener(name.slice(2).toLowerCase(), value);
    } else if (name === "className") {
      element.className = value;
    } else if (name in element && typeof element[name] !== "function") {
      element[name] = value; // a property: `disabled`, `spellcheck`, `href`, `value`…
    } else if (value !== false) {
      element.setAttribute(name, value === true ? "" : String(value)); // data-*, aria-*
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children) {
    if (child === null || child === undefined || child === false) {
      continue;
    }
    if (Array.isArray(child)) {
      append(element, child);
    } else if (child instanceof Node) {
      element.append(child);
    } else {
      element.append(document.createTextNode(String(child)));
    }
  }
}

/** Empty `element` and put `children` in it. */
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

/**
 * A table of `rows` under `columns`, or `empty` (a sentence) in its place when there are
 * none. A column is {label, name, className}: `name` becomes each cell's data-column. A
 * row is an array of cells (text or nodes), or {cells, properties} for the row's own.
 */
export function table(columns, rows, empty, className = "") {
  if (rows.length === 0) {
    return h("p", { className: "empty" }, empty);
  }
  return h(
    "table",
    { className: `grid ${className}`.trim() },
    h("thead", {}, h("tr", {}, columns.map((column) => h("th", { className: column.className, scope: "col" }, column.label)))),
    h(
      "tbody",
      {},
      rows.map((row) => {
        const { cells, properties } = Array.isArray(row) ? { cells: row, properties: {} } : row;
        return h(
          "tr",
          properties,
          cells.map((cell, index) =>
            h("td", { className: columns[index].className, "data-column": columns[index].name }, cell),
          ),
        );
      }),
    ),
  );
}

/** A link inside the console, followed without reloading the page. */
export function link(href, ...children) {
  return h("a", { href, "data-link": true }, ...children);
}

/** The console's address of a queue, and of one of its messages. */
export function queueHref(queue) {
  return `/console/queues/${segment(queue)}`;
}

export function messageHref(queue, key) {
  return `${queueHref(queue)}/messages/${segment(key)}`;
}

const count = new Intl.NumberFormat("en");

/** A count as people read it: 12,345. */
export function number(value) {
  return count.format(value);
}

/** An RFC 3339 time from the API as `2026-11-26 09:00:00 UTC` (seconds; the title has ms). */
export function utc(time) {
  return `${time.slice(0, 10)} ${time.slice(11, 19)} UTC`;
}

/** A span of milliseconds in the largest unit that fits: `45 s`, `12 min`, `3 h`, `2 d`. */
export function span(milliseconds) {
  const seconds = Math.round(Math.abs(milliseconds) / 1000);
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${hours} h ${minutes % 60 ? `${minutes % 60} min` : ""}`.trim();
  return `${Math.floor(hours / 24)} d`;
}

/** `in 5 min`, `3 h ago` or `now`, from `time` (RFC 3339) to the browser's clock. */
export function relative(time) {
  const difference = Date.parse(time) - Date.now();
  if (Math.abs(difference) < 1000) return "now";
  return difference > 0 ? `in ${span(difference)}` : `${span(difference)} ago`;
}

/** A time relative to now, its exact value in the title: `<time>in 5 min</time>`. */
export function when(time) {
  if (!time) return h("span", { className: "muted" }, "—");
  return h("time", { dateTime: time, title: time }, relative(time));
}

/** A time in full, then relative: `2026-11-26 09:00:00 UTC (in 5 min)`. */
export function fullTime(time) {
  if (!time) return h("span", { className: "muted" }, "—");
  return h("time", { dateTime: time, title: time }, utc(time), h("span", { className: "muted" }, ` (${relative(time)})`));
}

/** A message's state as a coloured word. */
export function stateBadge(state) {
  return h("span", { className: `badge state-${state}` }, state);
}

/** The mark of a dead letter moved because its expiry passed (not because of its deliveries). */
export function expiredBadge() {
  return h("span", { className: "badge outcome-expired", title: "Moved here because its expiry passed" }, "expired");
}

/** A number, muted when zero. */
export function countCell(value) {
  return h("span", { className: value ? "count" : "count zero" }, number(value));
}

/**
 * Ask before acting: resolves true when the person confirms. `text` is text (it may
 * quote a key); the confirm button says what will happen.
 */
export function confirmAction({ title, text, action }) {
  const dialog = document.getElementById("confirm");
  fill(document.getElementById("confirm-title"), title);
  fill(document.getElementById("confirm-text"), text);
  fill(document.getElementById("confirm-ok"), action);
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), { once: true });
    dialog.showModal();
    document.getElementById("confirm-cancel").focus();
  });
}
