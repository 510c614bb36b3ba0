// Purging the queue: every message deleted, once the queue's name is typed to confirm.

import { call, paths } from "../../api.js";
import { fill, h, number } from "../../dom.js";
import { act, section } from "../parts.js";

/** The purge section; `purged()` after a purge. */
export function purgeSection(context, purged) {
  const { queue } = context.params;
  const status = h("div", { role: "status", id: "purge-status" });
  const typed = h("input", {
    type: "text",
    name: "confirm",
    placeholder: queue,
    spellcheck: false,
    autocomplete: "off",
    "aria-label": "The queue's name, to confirm",
    onInput: () => {
      button.disabled = typed.value !== queue;
    },
  });
  const button = h("button", { type: "submit", className: "danger", id: "purge-button", disabled: true }, "Purge queue");
  async function purge(event) {
    event.preventDefault();
    if (typed.value !== queue) return; // Enter in the field must not pass where the button may not
    await act(context, status, async () => {
      const result = await call("DELETE", paths.queue(queue), { query: { confirm: typed.value }, signal: context.signal });
      typed.value = "";
      button.disabled = true;
      fill(status, h("p", { className: "notice" }, `Purged: ${number(result.deleted)} messages deleted.`));
      await purged();
    });
  }
  const part = section("Purge", "purge");
  part.element.classList.add("danger-zone");
  fill(
    part.body,
    h(
      "p",
      {},
      "Deletes every message of this queue, ready, scheduled and leased alike. Its cron entries stay, and the cron manager installs their next runs again (a paused entry's once resumed). Type the queue's name to confirm.",
    ),
    h("form", { className: "purge", onSubmit: purge }, typed, button),
    status,
  );
  return part.element;
}
