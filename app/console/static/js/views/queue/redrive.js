// Redriving a dead-letter queue: every message no worker holds goes back to the queue it
// was dead-lettered from, due now, and the page says how many moved and why some stayed.

import { call, paths } from "../../api.js";
import { confirmAction, fill, h, number } from "../../dom.js";
import { act, section } from "../parts.js";

/** The redrive section; after a redrive the page is drawn again with what it says. */
export function redriveSection(context) {
  const { queue } = context.params;
  const status = h("div", { role: "status" });
  async function redrive() {
    const confirmed = await confirmAction({
      title: "Redrive the dead letters?",
      text: `Every message of ${queue} that no worker holds goes back to the queue it was dead-lettered from, due now.`,
      action: "Redrive",
    });
    if (!confirmed) return;
    await act(context, status, async () => {
      const result = await call("POST", paths.redrive(queue), { body: {}, signal: context.signal });
      const left = [
        result.skipped ? `left ${number(result.skipped)} whose key the queue they would go back to holds` : null,
        result.forbidden ? `left ${number(result.forbidden)} bound for queues outside this token's` : null,
      ].filter(Boolean);
      // The page again, with the counts and the messages after the move.
      context.navigate(window.location.pathname + window.location.search, {
        replace: true,
        notice: `Redrive: moved ${number(result.moved)}${left.length ? `; ${left.join("; ")}` : ""}.`,
      });
    });
  }
  const part = section("Dead letters", "redrive");
  fill(
    part.body,
    h("p", {}, "This queue holds dead letters. A redrive moves each back to the queue it came from, due now, its deliveries counted from zero."),
    h("button", { type: "button", className: "primary", id: "redrive-button", onClick: redrive }, "Redrive dead letters"),
    status,
  );
  return part.element;
}
