// The queue's pause control: a banner while the queue is paused (since when, and
// Resume), else a Pause button, each asking before it pauses.

import { call, paths } from "../../api.js";
import { confirmAction, fill, h, utc } from "../../dom.js";
import { act } from "../parts.js";

/**
 * Whether the queue delivers: a banner while it is paused (since when, and Resume), else a
 * Pause button. `changed(stats)` gets the queue's stats after either.
 */
export function pauseBanner(context, changed) {
  const { queue } = context.params;
  const element = h("div", { id: "pause" });
  const status = h("div", { role: "status", id: "pause-status" });
  async function toggle(action) {
    if (action === "pause") {
      const confirmed = await confirmAction({
        title: "Pause this queue?",
        text: `Queue ${queue} delivers nothing until resumed: polls answer empty and push sends nothing, on every replica within a second. Offers, acknowledgements and the rest go on.`,
        action: "Pause queue",
      });
      if (!confirmed) return;
    }
    await act(context, status, async () => {
      fill(status);
      changed(await call("POST", paths.pause(queue, action), { signal: context.signal }));
    });
  }
  let shown; // the paused_at drawn (null: not paused): redrawn only when it changes
  function draw(stats) {
    if (shown === stats.paused_at) return; // keeps the button and its focus
    shown = stats.paused_at;
    if (stats.paused) {
      element.className = "banner paused";
      fill(
        element,
        h("p", {}, h("strong", {}, "Paused"), ` since ${utc(stats.paused_at)}: this queue delivers nothing. Offers, acknowledgements and the rest go on.`),
        h("button", { type: "button", className: "primary", id: "resume-button", onClick: () => toggle("resume") }, "Resume"),
        status,
      );
    } else {
      element.className = "pause-control";
      fill(
        element,
        h("button", { type: "button", id: "pause-button", onClick: () => toggle("pause") }, "Pause queue"),
        status,
      );
    }
  }
  return { element, draw };
}
