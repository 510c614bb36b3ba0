// A queue: its counts (refreshed), its messages by state (with their expiry) with
// key-prefix search, a group filter and paging, its cron entries with their next runs,
// its recent history, its settings (editable), and its actions: pause and resume it or a
// cron entry, delete a message, redrive dead letters, purge.

import { call, get, paths } from "../../api.js";
import {
  confirmAction,
  countCell,
  expiredBadge,
  fill,
  h,
  link,
  messageHref,
  number,
  queueHref,
  stateBadge,
  table,
  utc,
  when,
} from "../../dom.js";
import { act, deleteMessage, historySection, loadInto, section } from "../parts.js";

const PAGE_SIZE = 25;
const COUNTS_MILLISECONDS = 5000;
const STATES = ["all", "ready", "scheduled", "leased"];

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

/**
 * Whether the queue delivers: a banner while it is paused (since when, and Resume), else a
 * Pause button. `changed(stats)` gets the queue's stats after either.
 */
function pauseBanner(context, changed) {
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

function messagesSection(context, refreshCounts, sawDeadLetters) {
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

function cronSection(context) {
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

function settingsSection(context, initial, saved) {
  const { queue } = context.params;
  let current = initial;
  const lease = h("input", { type: "number", name: "default_lease", min: 1, max: 43200, step: "any", required: true });
  const deliveries = h("input", { type: "number", name: "max_deliveries", min: 1, max: 1000, step: 1, placeholder: "no limit" });
  const deadLetterQueue = h("input", { type: "text", name: "dead_letter_queue", placeholder: `${queue}.dead`, spellcheck: false });
  // Groups (docs/guide/flow-control.md): empty takes the API's default, 1.
  const groupConcurrency = h("input", { type: "number", name: "group_concurrency", min: 1, max: 1000, step: 1, placeholder: "1" });
  // The retry delays: both delays empty means no policy (a release without a delay is due at once).
  const initialDelay = h("input", { type: "number", name: "retry_initial_delay", min: 0.001, step: "any", placeholder: "none" });
  const maxDelay = h("input", { type: "number", name: "retry_max_delay", min: 0.001, step: "any", placeholder: "none" });
  const multiplier = h("input", { type: "number", name: "retry_multiplier", min: 1, max: 100, step: "any", placeholder: "2" });
  const jitter = h("input", { type: "number", name: "retry_jitter", min: 0, max: 1, step: "any", placeholder: "0" });
  // Push delivery: an empty URL means none (workers poll).
  const pushUrl = h("input", { type: "url", name: "push_url", placeholder: "none: workers poll", spellcheck: false });
  const pushTimeout = h("input", { type: "number", name: "push_timeout", min: 0.001, max: 300, step: "any", placeholder: "10" });
  const pushConcurrency = h("input", { type: "number", name: "push_concurrency", min: 1, max: 100, step: 1, placeholder: "4" });
  // The limits (docs/guide/flow-control.md): empty means no bound; the rate needs both of its fields.
  const maxLeased = h("input", { type: "number", name: "max_leased", min: 1, max: 100000, step: 1, placeholder: "no limit" });
  const rateLimit = h("input", { type: "number", name: "rate_limit", min: 1, max: 100000, step: 1, placeholder: "no limit" });
  const ratePeriod = h("input", { type: "number", name: "rate_period", min: 0.001, max: 86400, step: "any", placeholder: "1" });
  const status = h("div", { className: "muted", role: "status", id: "settings-status" });
  const field = (label, input, hint) =>
    h("label", { className: "field" }, h("span", {}, label), input, h("small", { className: "muted" }, hint));

  function show(settings) {
    lease.value = String(settings.default_lease);
    deliveries.value = settings.max_deliveries === null ? "" : String(settings.max_deliveries);
    deadLetterQueue.value = settings.dead_letter_queue === `${queue}.dead` ? "" : settings.dead_letter_queue;
    groupConcurrency.value = String(settings.group_concurrency);
    const retry = settings.retry;
    initialDelay.value = retry ? String(retry.initial_delay) : "";
    maxDelay.value = retry ? String(retry.max_delay) : "";
    multiplier.value = retry ? String(retry.multiplier) : "";
    jitter.value = retry ? String(retry.jitter) : "";
    const push = settings.push;
    pushUrl.value = push ? push.url : "";
    pushTimeout.value = push ? String(push.timeout) : "";
    pushConcurrency.value = push ? String(push.concurrency) : "";
    maxLeased.value = settings.max_leased === null ? "" : String(settings.max_leased);
    const rate = settings.rate;
    rateLimit.value = rate ? String(rate.limit) : "";
    ratePeriod.value = rate ? String(rate.period) : "";
  }

  // A limit, or no rate; the period left empty is a second.
  function rateBody() {
    if (rateLimit.value === "") return null;
    return { limit: Number(rateLimit.value), period: ratePeriod.value === "" ? 1 : Number(ratePeriod.value) };
  }

  // Both delays, or neither (no policy); the multiplier and jitter left empty take the API's defaults.
  function retryBody() {
    if (initialDelay.value === "" && maxDelay.value === "") return null;
    const retry = { initial_delay: Number(initialDelay.value), max_delay: Number(maxDelay.value || initialDelay.value) };
    if (multiplier.value !== "") retry.multiplier = Number(multiplier.value);
    if (jitter.value !== "") retry.jitter = Number(jitter.value);
    return retry;
  }

  // A URL, or no push; the timeout and concurrency left empty take the API's defaults.
  function pushBody() {
    if (pushUrl.value.trim() === "") return null;
    const push = { url: pushUrl.value.trim() };
    if (pushTimeout.value !== "") push.timeout = Number(pushTimeout.value);
    if (pushConcurrency.value !== "") push.concurrency = Number(pushConcurrency.value);
    return push;
  }

  async function save(event) {
    event.preventDefault();
    const confirmed = await confirmAction({
      title: "Change the settings?",
      text: `Queue ${queue} gets these settings; a field left empty goes back to its default. Other replicas apply them within 5 seconds.`,
      action: "Save settings",
    });
    if (!confirmed) return;
    const body = {
      default_lease: Number(lease.value),
      max_deliveries: deliveries.value === "" ? null : Number(deliveries.value),
      dead_letter_queue: deadLetterQueue.value.trim() || null,
      group_concurrency: groupConcurrency.value === "" ? null : Number(groupConcurrency.value),
      retry: retryBody(),
      push: pushBody(),
      max_leased: maxLeased.value === "" ? null : Number(maxLeased.value),
      rate: rateBody(),
    };
    await act(context, status, async () => {
      current = await call("PUT", paths.settings(queue), { body, signal: context.signal });
      show(current);
      fill(status, `Saved at ${new Date().toLocaleTimeString()}.`);
      await saved();
    });
  }

  const form = h(
    "form",
    { className: "settings", onSubmit: save },
    field("Default lease (seconds)", lease, "how long a poll that names no lease holds its messages"),
    field("Max deliveries", deliveries, "after this many, a message due again moves to the dead-letter queue"),
    field("Dead-letter queue", deadLetterQueue, `empty: ${queue}.dead`),
    field("Group concurrency", groupConcurrency, "messages of one group leased at once, in due order; empty: 1"),
    field("Retry: first delay (seconds)", initialDelay, "a message released without a delay waits this after its first delivery; empty: due at once"),
    field("Retry: longest delay (seconds)", maxDelay, "the delay grows up to this; empty: the first delay"),
    field("Retry: multiplier", multiplier, "growth per delivery; empty: 2"),
    field("Retry: jitter (0 to 1)", jitter, "spread either way, as a fraction of the delay; empty: 0"),
    field("Push to (URL)", pushUrl, "the service POSTs each due message here (a prefix of HOURGLASS_PUSH_ALLOWED); empty: none"),
    field("Push: timeout (seconds)", pushTimeout, "a request not answered by then is released for retry; empty: 10"),
    field("Push: concurrency", pushConcurrency, "requests in flight at once per replica; empty: 4"),
    field("Max leased", maxLeased, "messages leased at once across every replica, pushes too; empty: no limit"),
    field("Rate: deliveries", rateLimit, "deliveries begun per window across every replica; empty: no limit"),
    field("Rate: window (seconds)", ratePeriod, "the window's length; empty: 1"),
    h("div", { className: "actions" }, h("button", { type: "submit", className: "primary" }, "Save settings")),
  );
  show(initial);
  fill(status, initial.updated_at ? `Last changed ${utc(initial.updated_at)}.` : "Never changed: the defaults apply.");
  const part = section("Settings", "settings");
  fill(part.body, form, status);
  return { element: part.element, current: () => current };
}

function redriveSection(context) {
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

function purgeSection(context, purged) {
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
