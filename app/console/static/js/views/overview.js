// The queues: every queue the token may see, with its counts, the age of its oldest
// ready message and its dead letters, refreshed every few seconds.

import { ApiError, get, paths, storedToken } from "../api.js";
import { countCell, fill, h, link, number, queueHref, span, table, utc } from "../dom.js";

export const REFRESH_MILLISECONDS = 2000;
// Settings change rarely; each queue's are read again after this long.
const SETTINGS_MILLISECONDS = 60_000;
// Requests for settings at once, so a service with many queues is asked gently.
const AT_ONCE = 6;

const COLUMNS = [
  { label: "Queue", name: "queue", className: "name" },
  { label: "Messages", name: "messages", className: "number" },
  { label: "Ready", name: "ready", className: "number" },
  { label: "Scheduled", name: "scheduled", className: "number" },
  { label: "Leased", name: "leased", className: "number" },
  { label: "Oldest ready", name: "oldest-ready", className: "number" },
  { label: "Dead letters", name: "dead-letters", className: "number" },
];

export async function overviewPage(context) {
  context.title("Queues");
  context.crumbs([["Queues"]]);
  const updated = h("span", { className: "muted", id: "updated" });
  const body = h("div", { id: "queues" });
  fill(
    context.root,
    context.notice,
    h("div", { className: "heading" }, h("h1", {}, "Queues"), updated),
    body,
  );
  const settings = new SettingsCache(context.signal);
  let shown = null; // what the table shows, to leave it be (and a selection in it) when unchanged

  async function refresh() {
    const { queues } = await get(paths.queues(), { signal: context.signal });
    const deadLetters = await deadLetterCounts(queues, settings);
    const latest = JSON.stringify([queues, [...deadLetters]]);
    if (latest !== shown) {
      fill(body, queueTable(queues, deadLetters));
      shown = latest;
    } else {
      for (const age of body.querySelectorAll("time[datetime]")) {
        age.textContent = ageOf(age.dateTime);
      }
    }
    fill(updated, `Updated ${new Date().toLocaleTimeString()} · refreshes every ${REFRESH_MILLISECONDS / 1000} s`);
  }

  await refresh();
  context.every(REFRESH_MILLISECONDS, refresh);
}

function queueTable(queues, deadLetters) {
  const rows = queues.map((stats) => {
    const dead = deadLetters.get(stats.queue);
    return {
      properties: { "data-queue": stats.queue },
      cells: [
        [
          link(queueHref(stats.queue), stats.queue),
          stats.paused ? h("span", { className: "badge paused", title: `paused since ${utc(stats.paused_at)}` }, "paused") : null,
          dead.deadLettersOf.length ? h("span", { className: "tag" }, `dead letters of ${dead.deadLettersOf.join(", ")}`) : null,
        ],
        countCell(stats.messages),
        countCell(stats.ready),
        countCell(stats.scheduled),
        countCell(stats.leased),
        stats.oldest_ready_at
          ? h("time", { dateTime: stats.oldest_ready_at, title: stats.oldest_ready_at }, ageOf(stats.oldest_ready_at))
          : h("span", { className: "muted" }, "—"),
        deadLetterCell(dead),
      ],
    };
  });
  const empty = storedToken()
    ? "No queues this token may use hold messages or cron entries."
    : "No queues yet: a queue shows here once it holds messages or cron entries.";
  return table(COLUMNS, rows, empty, "queues");
}

/** How long ago `time` was: `45 s`, `12 min`. */
function ageOf(time) {
  return span(Date.now() - Date.parse(time));
}

function deadLetterCell({ queue, count }) {
  if (queue === null) {
    return h("span", { className: "muted", title: "the queue's settings could not be read" }, "—");
  }
  if (count === null) {
    return h("span", { className: "muted", title: `${queue} is outside this token's queues` }, "—");
  }
  if (count === 0) {
    return h("span", { className: "count zero", title: `in ${queue}` }, "0");
  }
  return link(queueHref(queue), h("span", { className: "count dead", title: `in ${queue}` }, number(count)));
}

/**
 * What the overview reads about queues beyond the list, again after SETTINGS_MILLISECONDS
 * only: each queue's settings, and whether the token may see a dead-letter queue.
 */
class SettingsCache {
  constructor(signal) {
    this.signal = signal;
    this.entries = new Map(); // "settings queue" or "visible queue" → {value, readAt}
  }

  async read(name, load) {
    const entry = this.entries.get(name);
    if (entry && Date.now() - entry.readAt < SETTINGS_MILLISECONDS) {
      return entry.value;
    }
    const value = await load();
    this.entries.set(name, { value, readAt: Date.now() });
    return value;
  }

  of(queue) {
    return this.read(`settings ${queue}`, () => get(paths.settings(queue), { signal: this.signal }));
  }

  /** Whether the token may see `queue` (its stats answer, or are a 403). */
  visible(queue) {
    if (!storedToken()) return true;
    return this.read(`visible ${queue}`, async () => {
      try {
        await get(paths.queue(queue), { signal: this.signal });
        return true;
      } catch (error) {
        if (error instanceof ApiError && error.status === 403) return false;
        throw error;
      }
    });
  }
}

/**
 * For each queue: its dead-letter queue (from its settings), how many messages that
 * holds, and which queues send their dead letters to it. A dead-letter queue missing
 * from the list holds none, unless the token may not see it (then null: unknown).
 */
async function deadLetterCounts(queues, settings) {
  const listed = new Map(queues.map((stats) => [stats.queue, stats.messages]));
  const counts = new Map(queues.map((stats) => [stats.queue, { queue: null, count: null, deadLettersOf: [] }]));
  await eachAtMost(AT_ONCE, queues, async (stats) => {
    const entry = counts.get(stats.queue);
    try {
      entry.queue = (await settings.of(stats.queue)).dead_letter_queue;
    } catch (error) {
      if (error instanceof ApiError && error.status === 403) {
        return; // its settings are not for this token: its cell says so
      }
      throw error;
    }
    if (listed.has(entry.queue)) {
      entry.count = listed.get(entry.queue);
      counts.get(entry.queue).deadLettersOf.push(stats.queue);
    } else if (await settings.visible(entry.queue)) {
      entry.count = 0;
    }
  });
  for (const entry of counts.values()) {
    entry.deadLettersOf.sort();
  }
  return counts;
}

/** Run `work` on every item, at most `limit` at once. */
async function eachAtMost(limit, items, work) {
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      await work(items[next++]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}
