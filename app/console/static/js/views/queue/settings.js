// The queue's settings form: lease, deliveries and dead letters, groups, retry delays,
// push delivery and limits, shown as they are and saved after a confirmation.

import { call, paths } from "../../api.js";
import { confirmAction, fill, h, utc } from "../../dom.js";
import { act, section } from "../parts.js";

/** The settings form, showing `initial`; `saved()` after a change. `current()` is what the queue has now. */
export function settingsSection(context, initial, saved) {
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
