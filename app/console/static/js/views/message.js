// A message: its payload as formatted JSON, every time field (its expiry too), its
// deliveries and state, its group, its trace context, its history rows, and deleting it.

import { ApiError, get, paths } from "../api.js";
import { expiredBadge, fill, fullTime, h, link, number, queueHref, stateBadge } from "../dom.js";
import { act, deleteMessage, historySection } from "./parts.js";

export async function messagePage(context) {
  const { queue, key } = context.params;
  context.title(`${key} · ${queue}`);
  context.crumbs([["Queues", "/console/"], [queue, queueHref(queue)], [key]]);

  let message = null;
  try {
    message = await get(paths.message(queue, key), { signal: context.signal });
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 404)) throw error;
  }
  const heading = [
    context.notice,
    h("p", { className: "eyebrow" }, `Message in ${queue}`),
    h("div", { className: "heading" }, h("h1", { className: "key", id: "message-key" }, key)),
  ];
  // The history says where a message went, so a missing one shows it too.
  const history = historySection(context, key);
  if (message === null) {
    fill(
      context.root,
      heading,
      h(
        "section",
        { className: "state", id: "missing" },
        h("h2", {}, "No such message"),
        h(
          "p",
          {},
          `Queue ${queue} holds no message with this key: it was acknowledged, deleted, dead-lettered or expired (the history below says which), or never offered.`,
        ),
        h("p", {}, link(queueHref(queue), `← Queue ${queue}`)),
      ),
      history,
    );
    return;
  }

  const status = h("div", { role: "status" });
  const remove = () =>
    act(context, status, async () => {
      if (await deleteMessage(context, queue, key)) {
        context.navigate(queueHref(queue), { notice: `Deleted the message “${key}”.` });
      }
    });
  const fact = (label, value, name) => [h("dt", {}, label), h("dd", { "data-fact": name }, value)];
  fill(
    context.root,
    heading,
    h(
      "dl",
      { className: "facts" },
      fact("Queue", link(queueHref(message.queue), message.queue), "queue"),
      fact("State", stateBadge(message.state), "state"),
      fact("Priority", number(message.priority), "priority"),
      fact("Group", groupFact(queue, message.group), "group"),
      fact("Deliveries", number(message.deliveries), "deliveries"),
      fact(message.state === "leased" ? "Lease ends" : "Due", fullTime(message.scheduled_at), "scheduled-at"),
      fact("Asked for", fullTime(message.scheduled_at_initially), "scheduled-at-initially"),
      fact("Expires", message.expires_at ? fullTime(message.expires_at) : h("span", { className: "muted" }, "never"), "expires-at"),
      fact("Created", fullTime(message.created_at), "created-at"),
      fact("Trace", message.trace ? h("span", { className: "key" }, message.trace.traceparent) : h("span", { className: "muted" }, "—"), "trace"),
      message.dead_lettered_from
        ? fact(
            "Dead-lettered from",
            [link(queueHref(message.dead_lettered_from), message.dead_lettered_from), message.expired ? [" ", expiredBadge()] : null],
            "dead-lettered-from",
          )
        : null,
    ),
    h(
      "section",
      { className: "part", id: "payload" },
      h("div", { className: "part-head" }, h("h2", {}, "Payload")),
      h("pre", { className: "payload", id: "payload-json" }, JSON.stringify(message.payload, null, 2)),
    ),
    history,
    h(
      "section",
      { className: "part danger-zone", id: "delete" },
      h("div", { className: "part-head" }, h("h2", {}, "Delete")),
      h("p", {}, "Deleting a message removes it whatever its state; its history keeps a row saying it was dropped."),
      h("button", { type: "button", className: "danger", id: "delete-message", onClick: remove }, "Delete message"),
      status,
    ),
  );
}

/** A message's group, linked to the queue's list of that group's messages; a dash for none. */
function groupFact(queue, group) {
  if (group === null) return h("span", { className: "muted" }, "—");
  const only = new URLSearchParams({ group });
  return link(`${queueHref(queue)}?${only}`, h("span", { className: "key" }, group));
}
