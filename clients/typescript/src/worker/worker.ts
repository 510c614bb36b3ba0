/** `Worker`: what a user builds and runs; it runs an engine (engine.ts) with its settings
 * checked, stopped by SIGTERM and SIGINT. */

import { Client } from "../client.js";
import { Engine } from "./engine.js";
import type { Handler } from "./handlers.js";
import { type Logger, stderrLogger } from "./logger.js";

export interface WorkerOptions {
  /** Handlers running at once, 1–1000: 10. */
  concurrency?: number;
  /** The most messages one poll asks for, 1–concurrency: half of `concurrency`. */
  batch?: number;
  /** Seconds each poll leases its messages for, 1–43200 (extended while they run): 30. */
  lease?: number;
  /** Seconds a poll waits for a message to come due, 0–20: 20. */
  wait?: number;
  /** Where it reports, a line per event (default: stderr, from HOURGLASS_LOG_LEVEL or info). */
  logger?: Logger;
}

function checked(options: WorkerOptions): { concurrency: number; batch: number; lease: number; wait: number } {
  const { concurrency = 10, lease = 30, wait = 20 } = options;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 1000) {
    throw new RangeError(`concurrency must be 1–1000, not ${concurrency}`);
  }
  // Two polls share the slots by default: the service answers one while the handlers run
  // the other's messages.
  const batch = options.batch ?? Math.ceil(concurrency / 2);
  if (!Number.isInteger(batch) || batch < 1 || batch > concurrency) {
    throw new RangeError(`batch must be 1–concurrency (${concurrency}), not ${batch}`);
  }
  if (!(lease >= 1 && lease <= 43200)) throw new RangeError(`lease must be 1–43200 seconds, not ${lease}`);
  if (!(wait >= 0 && wait <= 20)) throw new RangeError(`wait must be 0–20 seconds, not ${wait}`);
  return { concurrency, batch, lease, wait };
}

/**
 * Runs `handler` on each message of `queue`, at most `concurrency` at a time.
 *
 * Polls ask for the free slots, at most `batch` messages each, leased for `lease` seconds
 * and extended while their handlers run. A handler that resolves acknowledges its message
 * (on the next poll, or by key); one that throws releases it: due again as the queue's
 * `retry` setting says, or after the delay of a `Retry` it threw. `run()` resolves after a
 * stop (`stop()`, SIGTERM or SIGINT): polling stops, running handlers finish, messages
 * held but not started are released. A second signal releases the running messages too
 * and resolves at once (`abandoned` is then true: exit the process without them).
 */
export class Worker {
  readonly client: Client;
  readonly queue: string;
  readonly handler: Handler;
  readonly concurrency: number;
  readonly batch: number;
  readonly lease: number;
  readonly wait: number;
  readonly logger: Logger;
  #engine: Engine | null = null;
  #stopAsked = false;

  /** `client` is a `Client`, a URL, or null for HOURGLASS_URL. */
  constructor(client: Client | string | null, queue: string, handler: Handler, options: WorkerOptions = {}) {
    if (typeof handler !== "function") throw new TypeError("a worker's handler is a function");
    this.client = client instanceof Client ? client : new Client(client);
    this.queue = queue;
    this.handler = handler;
    ({ concurrency: this.concurrency, batch: this.batch, lease: this.lease, wait: this.wait } = checked(options));
    this.logger = options.logger ?? stderrLogger();
  }

  /**
   * Work until stopped; rejects with the poll's error when the service refuses it for good
   * (a bad token or queue name: 400, 401, 403, 404, 422), after draining. With
   * `handleSignals` (the default), SIGTERM and SIGINT stop it while it runs.
   */
  async run(options: { handleSignals?: boolean } = {}): Promise<void> {
    const engine = new Engine(this.client, this.queue, this.handler, {
      concurrency: this.concurrency,
      batch: this.batch,
      lease: this.lease,
      wait: this.wait,
      log: this.logger,
    });
    this.#engine = engine;
    if (this.#stopAsked) engine.stop();
    const signals = options.handleSignals ?? true ? (["SIGTERM", "SIGINT"] as const) : [];
    const listeners = signals.map((name) => [name, () => engine.signalled(name)] as const);
    for (const [name, listener] of listeners) process.on(name, listener);
    try {
      await engine.run();
    } finally {
      for (const [name, listener] of listeners) process.off(name, listener);
    }
  }

  /** Whether a second signal stopped it without waiting for running handlers. */
  get abandoned(): boolean {
    return this.#engine?.abandoning ?? false;
  }

  /** How many handlers run now. */
  get running(): number {
    return this.#engine?.running ?? 0;
  }

  /** Stop, as SIGTERM does (before `run()`: it stops at once). */
  stop(): void {
    this.#stopAsked = true;
    this.#engine?.stop();
  }
}
