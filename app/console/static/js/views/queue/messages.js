// The queue's messages: by state (tabs), key prefix and group (in the address too, so a
// search can be shared), a page at a time, each with its group, due time, expiry and a
// Delete button.

import { get, paths } from "../../api.js";
import { expiredBadge, fill, h, link, messageHref, number, queueHref, stateBadge, table, when } from "../../dom.js";
import { act, deleteMessage, loadInto, section } from "../parts.js";

const PAGE_SIZE = 25;
const STATES = ["all", "ready", "scheduled", "leased"];

/**
 * The messages section; `refreshCounts()` after a delete, `sawDeadLetters(true)` once a
 * page lists a dead letter. `reload()` draws the page shown again.
 */
export function messagesSection(context, refreshCounts, sawDeadLetters) {
  const { queue } = context.params;
  let state = STATES.includes(context.query.get("state")) ? context.query.get("state") : "all";
  let prefix = context.query.get("prefix") || "";
  let group = context.query.get("group") || "";
  let cursors = [null]; // the cursor of each page walked so far; the last is the one shown

  const tabs = h(
    "div",
    { className: "tabs", role: "tablist", "aria-label": "Messages by state" },
    STATES.map((name) =>
      // The prefix and group in the boxes apply, as they read, whether or not they were searched for.
      h("button", { type: "button", role: "tab", "data-state": name, onClick: () => show(name, search.value, groupSearch.value) }, name),
    ),
  );
  const search = h("input", {
    type: "search",
    name: "prefix",
    placeholder: "Key prefix, e.g. user/42/",
    value: prefix,
    spellcheck: false,
    "aria-label": "Key prefix",
  });
  // One group's messages only (docs/guide/flow-control.md); empty: every message.
  const groupSearch = h("input", {
    type: "search",
    name: "group",
    placeholder: "Group, e.g. customer/42",
    value: group,
    spellcheck: false,
    "aria-label": "Group",
  });
  const form = h(
    "form",
    {
      className: "search",
      role: "search",
      onSubmit: (event) => {
        event.preventDefault();
        show(state, search.value, groupSearch.value);
      },
    },
    search,
    groupSearch,
    h("button", { type: "submit" }, "Search"),
  );
  const part = section("Messages", "messages", tabs, form);
  const status = h("div", { role: "status" });
  const list = h("div");
  fill(part.body, status, list);

  /** The first page of `newState` messages with keys starting with `newPrefix`, of group `newGroup` if any. */
  function show(newState, newPrefix, newGroup) {
    state = newState;
    prefix = newPrefix;
    group = newGroup.trim();
    cursors = [null];
    // The state, the prefix and the group are in the address, so a search can be shared.
    const query = new URLSearchParams();
    if (state !== "all") query.set("state", state);
    if (prefix) query.set("prefix", prefix);
    if (group) query.set("group", group);
    const rest = query.toString();
    window.history.replaceState(window.history.state, "", `${queueHref(queue)}${rest ? `?${rest}` : ""}`);
    return load();
  }

  function load() {
    for (const button of tabs.children) {
      button.setAttribute("aria-selected", String(button.dataset.state === state));
    }
    return loadInto(context, list, async () => {
      const page = await get(paths.messages(queue), {
        query: { state: state === "all" ? null : state, prefix, group, limit: PAGE_SIZE, cursor: cursors.at(-1) },
        signal: context.signal,
      });
      sawDeadLetters(page.messages.some((message) => message.dead_lettered_from));
      return [messageTable(page.messages), pager(page.next)];
    });
  }

  function pager(next) {
    const walk = (change) => () => {
      change();
      fill(status);
      load();
    };
    return h(
      "div",
      { className: "pager" },
      h("button", { type: "button", disabled: cursors.length === 1, onClick: walk(() => cursors.pop()) }, "← Previous"),
      h("span", { className: "muted", id: "page-number" }, `Page ${cursors.length}`),
      h("button", { type: "button", disabled: !next, onClick: walk(() => cursors.push(next)) }, "Next →"),
    );
  }

  function remove(key) {
    return act(context, status, async () => {
      if (await deleteMessage(context, queue, key)) {
        fill(status, h("p", { className: "notice" }, `Deleted the message “${key}”.`));
        await Promise.all([load(), refreshCounts()]);
      }
    });
  }

  function messageTable(messages) {
    const rows = messages.map((message) => ({
      properties: { "data-key": message.key },
      cells: [
        link(messageHref(queue, message.key), h("span", { className: "key" }, message.key)),
        groupCell(message.group),
        stateBadge(message.state),
        message.state === "leased" ? ["lease ends ", when(message.scheduled_at)] : when(message.scheduled_at),
        expiryCell(message),
        number(message.priority),
        number(message.deliveries),
        when(message.created_at),
        h("button", { type: "button", className: "small danger-text", onClick: () => remove(message.key) }, "Delete"),
      ],
    }));
    const which = state === "all" ? "messages" : `${state} messages`;
    const where = [group ? `in group “${group}”` : null, prefix ? `with keys starting with “${prefix}”` : null].filter(Boolean);
    const empty = where.length ? `No ${which} ${where.join(" ")}.` : `No ${which} in this queue.`;
    return table(
      [
        { label: "Key", name: "key", className: "name" },
        { label: "Group", name: "group" },
        { label: "State", name: "state" },
        { label: "Due", name: "due" },
        { label: "Expires", name: "expires" },
        { label: "Priority", name: "priority", className: "number" },
        { label: "Deliveries", name: "deliveries", className: "number" },
        { label: "Created", name: "created" },
        { label: "", name: "actions", className: "actions" },
      ],
      rows,
      empty,
      "messages",
    );
  }

  /** When a message expires (a dash: never); a dead letter moved because it expired is marked. */
  function expiryCell(message) {
    if (!message.expired) return when(message.expires_at);
    return [expiredBadge(), message.expires_at ? [" ", when(message.expires_at)] : null];
  }

  /** A message's group, which filters the list by it when clicked; a dash for none. */
  function groupCell(name) {
    if (name === null) return h("span", { className: "muted" }, "—");
    const only = () => {
      groupSearch.value = name;
      fill(status);
      show(state, search.value, name);
    };
    return h("button", { type: "button", className: "group", title: `Only group ${name}`, onClick: only }, name);
  }

  load();
  return { element: part.element, reload: load };
}
