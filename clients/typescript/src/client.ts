/** `Client`: every /v1 operation of operations/ over the platform's `fetch`, with retries. */

import {
  ConnectionFailed,
  HourglassError,
  Unavailable,
  errorFrom,
} from "./errors.js";
import type { Call } from "./operations/call.js";
import * as cron from "./operations/cron.js";
import * as locks from "./operations/locks.js";
import * as messages from "./operations/messages.js";
import * as queues from "./operations/queues.js";
import type {
  AckResult,
  BatchResult,
  CronEntry,
  CronInstallResult,
  CronOptions,
  CronReadOptions,
  HistoryEntry,
  HistoryOptions,
  IfExists,
  Lease,
  ListOptions,
  Message,
  Offer,
  OfferOptions,
  OfferResult,
  Page,
  PollOptions,
  QueueSettings,
  QueueStats,
  RedriveOptions,
  RedriveResult,
  ReleaseResult,
  SettingsOptions,
  TraceInput,
  UpdateOptions,
} from "./types.js";

export const VERSION = "0.1.0";
export const DEFAULT_URL = "http://127.0.0.1:8080";
/** The most one batch request may carry: the service refuses a larger one. */
export const MAX_BATCH = 1000;

/** Answers that say the request was not served: a proxy's 502 and 504 as well as a 503. */
const UNAVAILABLE = new Set([502, 503, 504]);
/** fetch's failures that happen before a request leaves: a retry cannot repeat anything. */
const NOT_SENT = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "UND_ERR_CONNECT_TIMEOUT",
]);

export interface ClientOptions {
  /** A bearer token (default: HOURGLASS_TOKEN). */
  token?: string | null;
  /** Seconds a request may take (a long poll's `wait` is added to it): 10. */
  timeout?: number;
  /** How many times a failed call that is safe to repeat is sent again: 3. */
  retries?: number;
  /** The longest pause between two tries, in seconds: 30. */
  maxRetryWait?: number;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** The `fetch` to send with (default: the platform's). */
  fetch?: typeof fetch;
}

/**
 * The pause before the `attempt`-th repeat (from 0) when the answer named none: 0.5 s
 * doubling, spread by ±25%.
 */
export function backoff(attempt: number): number {
  return 0.5 * 2 ** attempt * (0.75 + Math.random() * 0.5);
}

function environment(name: string): string | undefined {
  return typeof process === "undefined" ? undefined : process.env[name] || undefined;
}

/**
 * The Hourglass API over HTTP. `url` and `token` default to HOURGLASS_URL (else
 * http://127.0.0.1:8080) and HOURGLASS_TOKEN. Failed calls that are safe to repeat are
 * sent again up to `retries` times (README, "Retries"). Answers are the service's JSON.
 */
export class Client {
  readonly url: string;
  readonly timeout: number;
  readonly retries: number;
  readonly maxRetryWait: number;
  readonly #headers: Record<string, string>;
  readonly #fetch: typeof fetch;

  constructor(url?: string | null, options: ClientOptions = {}) {
    this.url = (url || environment("HOURGLASS_URL") || DEFAULT_URL).replace(/\/+$/, "");
    this.timeout = options.timeout ?? 10;
    this.retries = options.retries ?? 3;
    this.maxRetryWait = options.maxRetryWait ?? 30;
    const token = options.token === undefined ? environment("HOURGLASS_TOKEN") : options.token;
    this.#headers = {
      "User-Agent": `hourglass-client/${VERSION} (typescript)`,
      ...options.headers,
      ...(token ? { Authorization: `Bearer ${token}` } : {}),
    };
    this.#fetch = options.fetch ?? globalThis.fetch;
  }

  /** Send one operation, with the retries it allows; its result. */
  async send<T>(call: Call<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      let failure: HourglassError;
      try {
        return await this.#once(call);
      } catch (error) {
        if (!(error instanceof HourglassError)) throw error;
        failure = error;
      }
      await pause(this.#retryWait(call, failure, attempt), call.signal);
    }
  }

  async #once<T>(call: Call<T>): Promise<T> {
    const url = new URL(this.url + call.path);
    for (const [name, value] of Object.entries(call.query ?? {})) {
      url.searchParams.set(name, String(value));
    }
    const headers: Record<string, string> = { ...this.#headers, ...call.headers };
    if (call.body !== undefined) headers["Content-Type"] = "application/json";
    const timeout = AbortSignal.timeout((this.timeout + (call.wait ?? 0)) * 1000);
    const { signal, release } = call.signal ? anySignal([call.signal, timeout]) : { signal: timeout, release() {} };
    try {
      let response: Response;
      try {
        response = await this.#fetch(url, {
          method: call.method,
          headers,
          signal,
          ...(call.body === undefined ? {} : { body: JSON.stringify(call.body) }),
        });
      } catch (error) {
        throw this.#unanswered(call, error, false);
      }
      // The caller's signal cuts a call short only until its answer begins: an answer under
      // way is read whole (a poll's messages are claimed by then, and a caller that let
      // go of them unread would leave them leased to a lock nobody knows).
      if (call.signal) release(call.signal);
      if (!response.ok && !call.accept?.includes(response.status)) {
        throw await errorFrom(response);
      }
      try {
        return await call.read(response);
      } catch (error) {
        // The answer broke off (or is not what its operation returns).
        throw this.#unanswered(call, error, true);
      }
    } finally {
      release();
    }
  }

  /** A request that got no answer, as a `ConnectionFailed`; a caller's abort as it is. */
  #unanswered(call: Call<unknown>, error: unknown, answered: boolean): unknown {
    if (call.signal?.aborted) return call.signal.reason ?? error;
    const cause = error instanceof Error ? (error.cause as { code?: string } | undefined) : undefined;
    const sent = answered || !(cause?.code !== undefined && NOT_SENT.has(cause.code));
    const what = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    const code = cause?.code ? ` (${cause.code})` : "";
    return new ConnectionFailed(`${call.method} ${call.path}: ${what}${code}`, { cause: error, sent });
  }

  /**
   * Seconds to wait before sending `call` again after `failure`, its `attempt`-th (from
   * 0); throws `failure` when it is not to be retried. A request that never left is
   * always sent again; one answered `503` (or a proxy's `502`/`504`), or whose answer
   * was lost, only when it is repeatable.
   */
  #retryWait(call: Call<unknown>, failure: HourglassError, attempt: number): number {
    const sent = !(failure instanceof ConnectionFailed) || failure.sent;
    const unavailable = failure instanceof Unavailable || UNAVAILABLE.has(failure.status);
    if (attempt >= this.retries || !unavailable || (sent && !call.repeatable)) throw failure;
    const after = failure instanceof Unavailable ? failure.retryAfter : null;
    return Math.min(after ?? backoff(attempt), this.maxRetryWait);
  }

  // Messages

  offer(queue: string, key: string, payload: unknown, options?: OfferOptions): Promise<OfferResult> {
    return this.send(messages.offer(queue, key, payload, options));
  }

  update(queue: string, key: string, payload: unknown, options?: UpdateOptions): Promise<OfferResult> {
    return this.send(messages.update(queue, key, payload, options));
  }

  create(queue: string, payload: unknown, options?: UpdateOptions): Promise<OfferResult> {
    return this.send(messages.create(queue, payload, options));
  }

  /**
   * Offer any number of messages, `batchSize` (≤ 1000) per request, one request at a
   * time; the outcomes in input order. Each batch is written whole or not at all; when
   * one fails, the batches before it stay written.
   */
  async offerMany(
    queue: string,
    offers: Iterable<Offer>,
    options: { ifExists?: IfExists; batchSize?: number; trace?: TraceInput | null } = {},
  ): Promise<BatchResult> {
    const size = options.batchSize ?? MAX_BATCH;
    if (!Number.isInteger(size) || size < 1 || size > MAX_BATCH) {
      throw new RangeError(`batchSize must be 1–${MAX_BATCH}, not ${size}`);
    }
    const total: BatchResult = { results: [], created: 0, updated: 0, ignored: 0 };
    let chunk: Offer[] = [];
    const flush = async () => {
      const part = await this.send(messages.batch(queue, chunk, options.ifExists, options.trace));
      total.results.push(...part.results);
      total.created += part.created;
      total.updated += part.updated;
      total.ignored += part.ignored;
      chunk = [];
    };
    for (const item of offers) {
      chunk.push(item);
      if (chunk.length === size) await flush();
    }
    if (chunk.length) await flush();
    return total;
  }

  get(queue: string, key: string): Promise<Message> {
    return this.send(messages.get(queue, key));
  }

  delete(queue: string, key: string): Promise<void> {
    return this.send(messages.remove(queue, key));
  }

  listMessages(queue: string, options?: ListOptions): Promise<Page<Message>> {
    return this.send(messages.listMessages(queue, options));
  }

  /** Every message of the queue (of `state`, under `prefix`, of `group`), a page at a time. */
  async *iterMessages(
    queue: string,
    options: Omit<ListOptions, "limit" | "cursor"> & { pageSize?: number } = {},
  ): AsyncGenerator<Message> {
    const { pageSize = 100, ...filters } = options;
    yield* pages((cursor) => this.listMessages(queue, { ...filters, limit: pageSize, ...cursor }));
  }

  history(queue: string, options?: HistoryOptions): Promise<Page<HistoryEntry>> {
    return this.send(messages.history(queue, options));
  }

  /** The queue's whole delivery history (of `key`, of `outcome`), newest first. */
  async *iterHistory(
    queue: string,
    options: Omit<HistoryOptions, "limit" | "cursor"> & { pageSize?: number } = {},
  ): AsyncGenerator<HistoryEntry> {
    const { pageSize = 100, ...filters } = options;
    yield* pages((cursor) => this.history(queue, { ...filters, limit: pageSize, ...cursor }));
  }

  // Polls and locks

  poll(queue: string, options?: PollOptions): Promise<Lease> {
    return this.send(locks.poll(queue, options));
  }

  ack(queue: string, lockId: string): Promise<boolean> {
    return this.send(locks.ack(queue, lockId));
  }

  ackKeys(queue: string, lockId: string, keys: readonly string[]): Promise<AckResult> {
    return this.send(locks.ackKeys(queue, lockId, keys));
  }

  extend(queue: string, lockId: string, lease: number): Promise<string> {
    return this.send(locks.extend(queue, lockId, lease));
  }

  release(queue: string, lockId: string, options?: { delay?: number }): Promise<boolean> {
    return this.send(locks.release(queue, lockId, options));
  }

  releaseKeys(
    queue: string,
    lockId: string,
    keys: readonly string[],
    options?: { delay?: number },
  ): Promise<ReleaseResult> {
    return this.send(locks.releaseKeys(queue, lockId, keys, options));
  }

  // Queues

  queues(): Promise<QueueStats[]> {
    return this.send(queues.queues());
  }

  stats(queue: string): Promise<QueueStats> {
    return this.send(queues.stats(queue));
  }

  pause(queue: string): Promise<QueueStats> {
    return this.send(queues.pause(queue));
  }

  resume(queue: string): Promise<QueueStats> {
    return this.send(queues.resume(queue));
  }

  purge(queue: string): Promise<number> {
    return this.send(queues.purge(queue));
  }

  getSettings(queue: string): Promise<QueueSettings> {
    return this.send(queues.getSettings(queue));
  }

  putSettings(queue: string, settings?: SettingsOptions): Promise<QueueSettings> {
    return this.send(queues.putSettings(queue, settings));
  }

  redrive(queue: string, options?: RedriveOptions): Promise<RedriveResult> {
    return this.send(queues.redrive(queue, options));
  }

  // Cron

  installCron(queue: string, name: string, payload: unknown, schedule: CronOptions): Promise<CronInstallResult> {
    return this.send(cron.installCron(queue, name, payload, schedule));
  }

  cronEntries(queue: string): Promise<CronEntry[]> {
    return this.send(cron.cronEntries(queue));
  }

  getCron(queue: string, name: string, options?: CronReadOptions): Promise<CronEntry> {
    return this.send(cron.getCron(queue, name, options));
  }

  pauseCron(queue: string, name: string): Promise<CronEntry> {
    return this.send(cron.pauseCron(queue, name));
  }

  resumeCron(queue: string, name: string): Promise<CronEntry> {
    return this.send(cron.resumeCron(queue, name));
  }

  uninstallCron(queue: string, name: string): Promise<void> {
    return this.send(cron.uninstallCron(queue, name));
  }
}

/**
 * A signal that aborts when any of `signals` does (with that one's reason), and `release`,
 * which stops listening to them (to `only` that one, when given). Joined by hand, not by
 * `AbortSignal.any` (Node 20.3 and later): a caller's long-lived signal is let go of when
 * each call ends, on every Node.
 */
function anySignal(signals: readonly AbortSignal[]): {
  signal: AbortSignal;
  release(only?: AbortSignal): void;
} {
  const joined = new AbortController();
  const first = signals.find((signal) => signal.aborted);
  if (first !== undefined) {
    joined.abort(first.reason);
    return { signal: joined.signal, release() {} };
  }
  const release = (only?: AbortSignal) => {
    for (const signal of only === undefined ? signals : [only]) signal.removeEventListener("abort", aborted);
  };
  function aborted(this: AbortSignal) {
    release();
    joined.abort(this.reason);
  }
  for (const signal of signals) signal.addEventListener("abort", aborted);
  return { signal: joined.signal, release };
}

/** Wait `seconds`, or less if `signal` aborts (then throw its reason). */
function pause(seconds: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const aborted = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", aborted);
      resolve();
    }, seconds * 1000);
    signal?.addEventListener("abort", aborted, { once: true });
  });
}

/** Every item of a paged list: `read` asked for each page, with the last page's cursor. */
async function* pages<Item>(
  read: (cursor: { cursor?: string }) => Promise<Page<Item>>,
): AsyncGenerator<Item> {
  let cursor: string | null = null;
  do {
    const page: Page<Item> = await read(cursor === null ? {} : { cursor });
    yield* page.items;
    cursor = page.next;
  } while (cursor !== null);
}
