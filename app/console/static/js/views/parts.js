// What the queue and message pages share: titled sections that load on their own and
// say why when they cannot, actions that report their failure beside their button,
// deleting a message, and the history table.

import { ApiError, Unreachable, call, get, paths } from "../api.js";
import { confirmAction, fill, h, link, messageHref, number, table, when } from "../dom.js";

/** A titled part of a page; `body` is where its content goes, `extra` beside the title. */
export function section(title, id, ...extra) {
  const body = h("div", { className: "section-body" });
  const element = h(
    "section",
    { className: "part", id },
    h("div", { className: "part-head" }, h("h2", {}, title), extra),
    body,
  );
  return { element, body };
}

/** Why a request failed, in a sentence; a fault of the console's own is thrown on. */
export function failure(error) {
  if (error instanceof Unreachable) return "The service does not answer.";
  if (error instanceof ApiError) {
    if (error.databaseUnavailable) return "Database unavailable (503): try again in a moment.";
    return `${error.status} ${error.problem.title || "Error"}: ${error.message}`;
  }
  throw error;
}

/**
 * Run `work`; if it fails, say why in `where` (the rest of the page stays). A 401 goes
 * to the page, which asks for a token; leaving the page (an abort) is no failure.
 */
export async function act(context, where, work) {
  try {
    await work();
  } catch (error) {
    if (error?.name === "AbortError") return;
    if (error instanceof ApiError && error.status === 401) {
      context.failed(error);
      return;
    }
    fill(where, h("p", { className: "error" }, failure(error)));
  }
}

/** Put what `load` builds into `body`, or why it could not be loaded. */
export function loadInto(context, body, load) {
  return act(context, body, async () => fill(body, await load()));
}

/** Ask, then delete `key` from `queue`; true when it is gone (or was already). */
export async function deleteMessage(context, queue, key) {
  const confirmed = await confirmAction({
    title: "Delete this message?",
    text: `The message “${key}” leaves queue ${queue} for good; a worker holding it can no longer acknowledge it.`,
    action: "Delete message",
  });
  if (!confirmed) return false;
  try {
    await call("DELETE", paths.message(queue, key), { signal: context.signal });
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error; // 404: gone already
  }
  return true;
}

const HISTORY_SIZE = 20;
const OUTCOMES = ["all", "acknowledged", "dead_lettered", "dropped", "expired"];

/** The queue's delivery history (one key's, with `key`), newest first, older on request. */
export function historySection(context, key = null) {
  const { queue } = context.params;
  let outcome = "all";
  let entries = [];
  const select = h(
    "select",
    {
      "aria-label": "Outcome",
      onChange: () => {
        outcome = select.value;
        load(null);
      },
    },
    OUTCOMES.map((name) => h("option", { value: name }, name.replace("_", " "))),
  );
  const part = section(key === null ? "Recent history" : "History", "history", select);

  function load(cursor) {
    return loadInto(context, part.body, async () => {
      const page = await get(paths.history(queue), {
        query: { key, outcome: outcome === "all" ? null : outcome, limit: HISTORY_SIZE, cursor },
        signal: context.signal,
      });
      entries = cursor === null ? page.entries : [...entries, ...page.entries];
      return [
        historyTable(queue, entries, key),
        page.next
          ? h("div", { className: "pager" }, h("button", { type: "button", onClick: () => load(page.next) }, "Older entries"))
          : null,
      ];
    });
  }

  load(null);
  return part.element;
}

function historyTable(queue, entries, key) {
  const rows = entries.map((entry) => ({
    properties: { "data-key": entry.key },
    cells: [
      link(messageHref(queue, entry.key), h("span", { className: "key" }, entry.key)),
      h("span", { className: `badge outcome-${entry.outcome}` }, entry.outcome.replace("_", " ")),
      number(entry.deliveries),
      when(entry.scheduled_at),
      when(entry.first_delivered_at),
      when(entry.finished_at),
    ],
  }));
  const empty =
    key === null
      ? "No history yet: no message has left this queue lately."
      : "No history for this key: no message under it has left the queue lately.";
  return table(
    [
      { label: "Key", name: "key", className: "name" },
      { label: "Outcome", name: "outcome" },
      { label: "Deliveries", name: "deliveries", className: "number" },
      { label: "Asked for", name: "scheduled" },
      { label: "First delivered", name: "first-delivered" },
      { label: "Finished", name: "finished" },
    ],
    rows,
    empty,
    "history",
  );
}
