/** Queues as a whole: the list of them, and a queue's stats, pause and resume, purge,
 * settings and redrive. */

import type { QueueSettings, QueueStats, RedriveOptions, RedriveResult, SettingsOptions } from "../types.js";
import type { components } from "../schema.js";
import { type Call, present, queuePath, readJson, readJsonAs } from "./call.js";

type Schemas = components["schemas"];

/** The stats of every queue that holds messages or cron entries (that the token may see). */
export function queues(): Call<QueueStats[]> {
  return {
    operation: "listQueues",
    method: "GET",
    path: "/v1/queues",
    repeatable: true,
    read: readJsonAs((data: Schemas["QueueListResponse"]) => data.queues),
  };
}

/** How many messages the queue holds, by state (zeros for an unknown queue). */
export function stats(queue: string): Call<QueueStats> {
  return {
    operation: "getQueueStats",
    method: "GET",
    path: queuePath(queue),
    repeatable: true,
    read: readJson<QueueStats>(),
  };
}

/**
 * Pause the queue: it delivers nothing until resumed; offers, acknowledgements and the
 * rest go on. Not repeated: a repeat would undo a resume made in between.
 */
export function pause(queue: string): Call<QueueStats> {
  return {
    operation: "pauseQueue",
    method: "POST",
    path: queuePath(queue, "pause"),
    repeatable: false,
    read: readJson<QueueStats>(),
  };
}

/** Resume a paused queue (no error when it is not paused); polls waiting on it wake. */
export function resume(queue: string): Call<QueueStats> {
  return {
    operation: "resumeQueue",
    method: "POST",
    path: queuePath(queue, "resume"),
    repeatable: false,
    read: readJson<QueueStats>(),
  };
}

/** Delete every message of the queue; how many. Never repeated. */
export function purge(queue: string): Call<number> {
  return {
    operation: "purgeQueue",
    method: "DELETE",
    path: queuePath(queue),
    query: { confirm: queue },
    repeatable: false,
    read: readJsonAs((data: Schemas["PurgeResponse"]) => data.deleted),
  };
}

/** The queue's settings as they apply, defaults filled in. */
export function getSettings(queue: string): Call<QueueSettings> {
  return {
    operation: "getQueueSettings",
    method: "GET",
    path: queuePath(queue, "settings"),
    repeatable: true,
    read: readJson<QueueSettings>(),
  };
}

/**
 * Replace the queue's settings whole: what is left out goes back to its default (no retry
 * policy, no push, one message of a group leased at once, no bound on leases or rate).
 */
export function putSettings(queue: string, settings: SettingsOptions = {}): Call<QueueSettings> {
  return {
    operation: "replaceQueueSettings",
    method: "PUT",
    path: queuePath(queue, "settings"),
    body: present({ ...settings }),
    repeatable: true,
    read: readJson<QueueSettings>(),
  };
}

/**
 * Move the dead letters of `queue` back, due now: each to the queue it came from, or all
 * `to` one queue; at most `max`. Never repeated.
 */
export function redrive(queue: string, options: RedriveOptions = {}): Call<RedriveResult> {
  return {
    operation: "redriveQueue",
    method: "POST",
    path: queuePath(queue, "redrive"),
    body: present({ ...options }),
    repeatable: false,
    read: readJson<RedriveResult>(),
  };
}
