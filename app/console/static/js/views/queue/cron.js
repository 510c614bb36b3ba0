// The queue's cron entries: each one's schedule, its next runs (or since when it is
// paused), a glance at its payload, and Pause or Resume.

import { call, get, paths } from "../../api.js";
import { confirmAction, h, number, table, utc } from "../../dom.js";
import { act, loadInto, section } from "../parts.js";

/** The cron entries section, loaded on its own. */
export function cronSection(context) {
  const { queue } = context.params;
  const part = section("Cron entries", "cron");
  async function load() {
    const { entries } = await get(paths.cron(queue), { signal: context.signal });
    const rows = entries.map((entry) => ({
      properties: { "data-name": entry.name },
      cells: [
        h("span", { className: "key" }, entry.name),
        schedule(entry),
        entry.paused
          ? h("span", { className: "badge paused", title: `since ${utc(entry.paused_at)}` }, "paused")
          : h("ul", { className: "runs" }, entry.next_runs.slice(0, 3).map((run) => h("li", {}, h("time", { dateTime: run, title: run }, utc(run))))),
        h("code", { className: "payload-preview", title: JSON.stringify(entry.payload) }, preview(entry.payload)),
        cronToggle(context, entry, reload),
      ],
    }));
    return table(
      [
        { label: "Name", name: "name", className: "name" },
        { label: "Schedule", name: "schedule" },
        { label: "Next runs", name: "next-runs" },
        { label: "Payload", name: "payload" },
        { label: "", name: "actions" },
      ],
      rows,
      "No cron entries.",
      "cron",
    );
  }
  const reload = () => loadInto(context, part.body, load);
  reload();
  return part.element;
}

/** Pause or Resume for one cron entry; `done()` once it changed. */
function cronToggle(context, entry, done) {
  const action = entry.paused ? "resume" : "pause";
  async function toggle() {
    if (action === "pause") {
      const confirmed = await confirmAction({
        title: "Pause this cron entry?",
        text: `“${entry.name}” installs no runs until resumed, and its runs not yet delivered are deleted. Resumed, it runs from then on, with none of the runs it missed.`,
        action: "Pause entry",
      });
      if (!confirmed) return;
    }
    await act(context, status, async () => {
      await call("POST", paths.cronPause(entry.queue, entry.name, action), { signal: context.signal });
      await done();
    });
  }
  const status = h("span", { role: "status" });
  return [h("button", { type: "button", className: "small", "data-action": action, onClick: toggle }, entry.paused ? "Resume" : "Pause"), status];
}

function schedule(entry) {
  let text;
  if (entry.cron !== null) text = `cron ${entry.cron}`;
  else if (entry.every !== null) text = `every ${number(entry.every)} s`;
  else text = `daily at ${entry.daily.join(", ")}`;
  return [h("code", {}, text), h("span", { className: "muted" }, ` ${entry.timezone}`)];
}

/** A payload on one line, cut to a glance. */
function preview(payload) {
  const text = JSON.stringify(payload);
  return text.length > 80 ? `${text.slice(0, 79)}…` : text;
}
