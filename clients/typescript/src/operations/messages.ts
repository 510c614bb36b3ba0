/** Messages: offers (one, or a batch), updates, reads, deletes, lists and history. */

import type {
  BatchResult,
  HistoryEntry,
  HistoryOptions,
  IfExists,
  ListOptions,
  Message,
  Offer,
  OfferOptions,
  OfferResult,
  Page,
  TraceInput,
  UpdateOptions,
} from "../types.js";
import type { components } from "../schema.js";
import {
  type Call,
  offerBody,
  present,
  queuePath,
  readJson,
  readJsonAs,
  readNothing,
  segment,
  traceHeaders,
} from "./call.js";

type Schemas = components["schemas"];

/**
 * Offer a message under `key`, due at `scheduled_at` or after `delay` (neither: now); an
 * existing key is updated (`if_exists: "update"`, the default) or left as it is
 * (`"ignore"`). Repeated after a `503` or a lost answer only with `scheduled_at` (a
 * `delay` counts from each request, so a repeat would move the message).
 */
export function offer(
  queue: string,
  key: string,
  payload: unknown,
  options: OfferOptions = {},
): Call<OfferResult> {
  const { scheduled_at, delay, expires_at, ttl, trace, ...rest } = options;
  return {
    operation: "offerMessage",
    method: "PUT",
    path: queuePath(queue, "messages", segment(key)),
    body: offerBody(payload, { scheduled_at, delay, expires_at, ttl }, rest),
    ...withHeaders(traceHeaders(trace)),
    repeatable: scheduled_at != null,
    read: readJson<OfferResult>(),
  };
}

/**
 * Update an existing message: its payload, time, priority, group and expiry, as `offer`
 * takes them (an expiry left out is none); `NotFound` when the key does not exist.
 */
export function update(
  queue: string,
  key: string,
  payload: unknown,
  options: UpdateOptions = {},
): Call<OfferResult> {
  const { scheduled_at, delay, expires_at, ttl, trace, ...rest } = options;
  return {
    operation: "updateMessage",
    method: "POST",
    path: queuePath(queue, "messages", segment(key)),
    body: offerBody(payload, { scheduled_at, delay, expires_at, ttl }, rest),
    ...withHeaders(traceHeaders(trace)),
    repeatable: scheduled_at != null,
    read: readJson<OfferResult>(),
  };
}

/**
 * Create a message under a key the service makes up (never repeated: a repeat would
 * create a second message).
 */
export function create(queue: string, payload: unknown, options: UpdateOptions = {}): Call<OfferResult> {
  const { scheduled_at, delay, expires_at, ttl, trace, ...rest } = options;
  return {
    operation: "createMessage",
    method: "POST",
    path: queuePath(queue, "messages"),
    body: offerBody(payload, { scheduled_at, delay, expires_at, ttl }, rest),
    ...withHeaders(traceHeaders(trace)),
    repeatable: false,
    read: readJson<OfferResult>(),
  };
}

/** The message stored under `key`; `NotFound` when there is none. */
export function get(queue: string, key: string): Call<Message> {
  return {
    operation: "getMessage",
    method: "GET",
    path: queuePath(queue, "messages", segment(key)),
    repeatable: true,
    read: readJson<Message>(),
  };
}

/**
 * Delete the message under `key`; `NotFound` when there is none. Not repeated: a repeat
 * could delete a message offered under the same key in between.
 */
export function remove(queue: string, key: string): Call<void> {
  return {
    operation: "deleteMessage",
    method: "DELETE",
    path: queuePath(queue, "messages", segment(key)),
    repeatable: false,
    read: readNothing,
  };
}

/** Offer up to 1000 messages in one request (`Client.offerMany` takes any number). */
export function batch(
  queue: string,
  offers: readonly Offer[],
  ifExists: IfExists = "update",
  trace?: TraceInput | null,
): Call<BatchResult> {
  const messages = offers.map(({ key, payload, scheduled_at, delay, expires_at, ttl, ...rest }) =>
    offerBody(payload, { scheduled_at, delay, expires_at, ttl }, { key, ...rest }),
  );
  return {
    operation: "offerBatch",
    method: "POST",
    path: queuePath(queue, "batch"),
    body: { messages, if_exists: ifExists },
    ...withHeaders(traceHeaders(trace)),
    // Each key once: a key offered twice with two payloads is not a no-op again (the
    // repeat's first offer of it updates the stored second).
    repeatable:
      offers.every((item) => item.scheduled_at != null) &&
      new Set(offers.map((item) => item.key)).size === offers.length,
    read: readJson<BatchResult>(),
  };
}

/**
 * A page of the queue's messages: by due time, or by key with a key `prefix`; only those
 * of `group` if given. `state` is `ready`, `scheduled`, `leased` or `all` (default);
 * `limit` 1–500 (50). Pass the page's `next` as `cursor` for the following one.
 */
export function listMessages(queue: string, options: ListOptions = {}): Call<Page<Message>> {
  return {
    operation: "listMessages",
    method: "GET",
    path: queuePath(queue, "messages"),
    query: present({ ...options }) as Record<string, string | number>,
    repeatable: true,
    read: readJsonAs((data: Schemas["MessageListResponse"]) => ({
      items: data.messages,
      next: data.next,
    })),
  };
}

/** A page of the queue's delivery history, newest first, of one `key` or `outcome` if given. */
export function history(queue: string, options: HistoryOptions = {}): Call<Page<HistoryEntry>> {
  return {
    operation: "listHistory",
    method: "GET",
    path: queuePath(queue, "history"),
    query: present({ ...options }) as Record<string, string | number>,
    repeatable: true,
    read: readJsonAs((data: Schemas["HistoryResponse"]) => ({
      items: data.entries,
      next: data.next,
    })),
  };
}

function withHeaders(headers: Record<string, string> | undefined): { headers?: Record<string, string> } {
  return headers === undefined ? {} : { headers };
}
