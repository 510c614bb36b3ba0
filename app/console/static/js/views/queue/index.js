// A queue: its counts (refreshed), its messages by state (with their expiry) with
// key-prefix search, a group filter and paging, its cron entries with their next runs,
// its recent history, its settings (editable), and its actions: pause and resume it or a
// cron entry, delete a message, redrive dead letters, purge. This module draws the
// heading and the counts and composes the page from a module per section.

import { get, paths } from "../../api.js";
import { countCell, fill, h, link, number, queueHref, when } from "../../dom.js";
import { historySection } from "../parts.js";
import { cronSection } from "./cron.js";
import { messagesSection } from "./messages.js";
import { pauseBanner } from "./pause.js";
import { purgeSection } from "./purge.js";
import { redriveSection } from "./redrive.js";
import { settingsSection } from "./settings.js";

const COUNTS_MILLISECONDS = 5000;

export async function queuePage(context) {
  const { queue } = context.params;
  const { signal } = context;
  context.title(queue);
  context.crumbs([["Queues", "/console/"], [queue]]);

  // The counts and the settings come first: a queue the token may not use is a 403 here,
  // and the page says so instead of drawing empty sections.
  const [stats, settings] = await Promise.all([
    get(paths.queue(queue), { signal }),
    get(paths.settings(queue), { signal }),
  ]);

  const counts = h("div", { className: "cards", id: "counts" });
  const pause = pauseBanner(context, (latest) => drawCounts(latest));
  const deadLetterLine = h("span", { className: "muted", id: "dead-letter-queue" });
  const pushLine = h("span", { className: "muted", id: "push-target" });
  // A redrive is offered where dead letters are: in a queue named as one, or once a
  // message listed here says which queue it was dead-lettered from.
  const redrive = redriveSection(context);
  redrive.hidden = !queue.endsWith(".dead");
  const messages = messagesSection(context, refreshCounts, (deadLetters) => {
    if (deadLetters) redrive.hidden = false;
  });
  const settingsPart = settingsSection(context, settings, refreshCounts);

  function drawCounts(latest) {
    fill(counts, countCards(latest));
    pause.draw(latest);
    const current = settingsPart.current();
    const deadLetterQueue = current.dead_letter_queue;
    fill(deadLetterLine, "dead letters go to ", link(queueHref(deadLetterQueue), deadLetterQueue));
    // Where the service pushes the queue's messages, if it does (docs/guide/push.md).
    fill(
      pushLine,
      current.push ? ["pushed to ", h("code", {}, current.push.url), ` (${current.push.concurrency} at once, ${number(current.push.timeout)} s timeout)`] : [],
    );
  }

  async function refreshCounts() {
    drawCounts(await get(paths.queue(queue), { signal }));
  }

  fill(
    context.root,
    context.notice,
    h("div", { className: "heading" }, h("h1", { className: "queue-name" }, queue), deadLetterLine, pushLine),
    pause.element,
    counts,
    redrive,
    messages.element,
    cronSection(context),
    historySection(context),
    settingsPart.element,
    purgeSection(context, () => Promise.all([refreshCounts(), messages.reload()])),
  );
  drawCounts(stats);
  context.every(COUNTS_MILLISECONDS, refreshCounts);
}

function countCards(stats) {
  const card = (label, value, name) =>
    h(
      "div",
      { className: "card", "data-count": name },
      h("div", { className: "label" }, label),
      h("div", { className: "value" }, value),
    );
  return [
    card("Messages", countCell(stats.messages), "messages"),
    card("Ready", countCell(stats.ready), "ready"),
    card("Scheduled", countCell(stats.scheduled), "scheduled"),
    card("Leased", countCell(stats.leased), "leased"),
    card("Oldest ready", when(stats.oldest_ready_at), "oldest-ready"),
    card("Next scheduled", when(stats.next_scheduled_at), "next-scheduled"),
  ];
}
