/** Polls and the locks they lease under: acknowledgements, extensions and releases. */

import type { AckResult, Lease, PollOptions, ReleaseResult } from "../types.js";
import type { components } from "../schema.js";
import { type Call, queuePath, readJson, readJsonAs, readFound, segment } from "./call.js";

/**
 * Lease up to `max` (1–1000) due messages for `lease` seconds (default: the queue's),
 * waiting up to `wait` seconds (0–20) for one to come due.
 *
 * With `ack` (a lock id for all that lock still holds, or `{lock_id, keys}`), the poll
 * first acknowledges an earlier poll's messages, in the same request; that stands whatever
 * the poll then finds, and the answer's `acknowledged` and `missing` say what it deleted.
 * A lock that holds nothing any more acknowledges nothing: no error.
 */
export function poll(queue: string, options: PollOptions = {}): Call<Lease> {
  const { max = 1, wait = 0, lease, ack, signal } = options;
  const body: Record<string, unknown> = { max, wait };
  if (lease !== undefined) body["lease"] = lease;
  if (ack !== undefined) body["ack"] = typeof ack === "string" ? { lock_id: ack } : ack;
  return {
    operation: "pollQueue",
    method: "POST",
    path: queuePath(queue, "poll"),
    body,
    // Never repeated once sent: a lost answer's claim stands (its messages leased to
    // nobody until the lease ends, their deliveries counted), and a repeat would claim
    // more on top of it.
    repeatable: false,
    wait,
    ...(signal === undefined ? {} : { signal }),
    read: readJson<Lease>(),
  };
}

/**
 * Acknowledge (delete) every message the lock still holds: true, or false when it held
 * none (acknowledged already, its lease taken by another poll, or updated since).
 */
export function ack(queue: string, lockId: string): Call<boolean> {
  return {
    operation: "acknowledgeLock",
    method: "DELETE",
    path: queuePath(queue, "locks", segment(lockId)),
    repeatable: true,
    accept: [404],
    read: readFound,
  };
}

/**
 * Acknowledge only these messages (1–1000 keys) of the lock; the others stay leased. Keys
 * the lock no longer holds come back as `missing`.
 */
export function ackKeys(queue: string, lockId: string, keys: readonly string[]): Call<AckResult> {
  return {
    operation: "acknowledgeKeys",
    method: "POST",
    path: queuePath(queue, "locks", segment(lockId), "ack"),
    body: { keys: [...keys] },
    repeatable: true,
    read: readJson<AckResult>(),
  };
}

/**
 * Lease what the lock holds for `lease` more seconds from now; the new end of the lease.
 * `NotFound` when the lock holds nothing any more.
 */
export function extend(queue: string, lockId: string, lease: number): Call<string> {
  return {
    operation: "extendLock",
    method: "PATCH",
    path: queuePath(queue, "locks", segment(lockId)),
    body: { lease },
    repeatable: true,
    read: readJsonAs((data: components["schemas"]["ExtendResponse"]) => data.lease_expires_at),
  };
}

/**
 * Give back every message the lock holds, due after `delay` seconds (undefined: as the
 * queue's `retry` setting says, or at once): true, or false when it held none.
 */
export function release(queue: string, lockId: string, options: { delay?: number } = {}): Call<boolean> {
  return {
    operation: "releaseLock",
    method: "POST",
    path: queuePath(queue, "locks", segment(lockId), "release"),
    body: options.delay === undefined ? {} : { delay: options.delay },
    repeatable: true,
    accept: [404],
    read: readFound,
  };
}

/**
 * Give back only these messages (1–1000 keys) of the lock, due after `delay` (undefined:
 * as the queue's `retry` setting says); keys it no longer holds come back as `missing`.
 */
export function releaseKeys(
  queue: string,
  lockId: string,
  keys: readonly string[],
  options: { delay?: number } = {},
): Call<ReleaseResult> {
  const body: Record<string, unknown> = { keys: [...keys] };
  if (options.delay !== undefined) body["delay"] = options.delay;
  return {
    operation: "releaseLock",
    method: "POST",
    path: queuePath(queue, "locks", segment(lockId), "release"),
    body,
    repeatable: true,
    read: readJson<ReleaseResult>(),
  };
}
