// Helpers of the tests: queues of their own, promises to wait on (with a bound), and the
// message-keyed offers the worker tests make.
import { randomBytes } from "node:crypto";

/** How long any wait on an event may take before the test fails (milliseconds). */
export const WAIT = 30_000;

/** A queue of the test's own (tests share their file's server). */
export function uniqueQueue() {
  return `q-${randomBytes(6).toString("hex")}`;
}

/** A promise with its resolve and reject at hand. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((yes, no) => {
    resolve = yes;
    reject = no;
  });
  return { promise, resolve, reject };
}

/** `promise`, or a failure naming `what` when it takes longer than `ms`. */
export async function within(promise, what, ms = WAIT) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** Resolves once `tick()` has been called `count` times. */
export function countdown(count) {
  const done = deferred();
  let left = count;
  if (left <= 0) done.resolve();
  return {
    promise: done.promise,
    tick() {
      left -= 1;
      if (left === 0) done.resolve();
    },
  };
}

/** Offers whose payload is their key. */
export function keyed(keys) {
  return keys.map((key) => ({ key, payload: key }));
}

/** A logger that keeps its lines (level and text) for the test to read. */
export function recordingLogger() {
  const lines = [];
  const at = (level) => (message) => lines.push(`${level} ${message}`);
  return { lines, logger: { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") } };
}

/** The history of one key: its outcomes and deliveries, newest first. */
export async function historyOf(client, queue, key) {
  const page = await client.history(queue, { key });
  return page.items.map((entry) => [entry.outcome, entry.deliveries]);
}
