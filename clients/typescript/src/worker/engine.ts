/**
 * The engine a worker runs: polls for the free slots, a handler per message, and a drain
 * on a stop; the leases and settling are `Settler`'s (settler.ts).
 */

import type { Client } from "../client.js";
import { BadRequest, Forbidden, Invalid, NotFound, Unauthorized } from "../errors.js";
import type { DeliveredMessage, Lease } from "../types.js";
import { type Handler, Retry } from "./handlers.js";
import { type Logger, described, oneLine } from "./logger.js";
import { type Held, Settler, now } from "./settler.js";

/** A poll failing with these will fail again the same way: the worker stops. */
const FATAL = [BadRequest, Unauthorized, Forbidden, NotFound, Invalid];
/** The longest pause between polls after failures, in seconds (they double from 1 s). */
const MAX_POLL_BACKOFF = 30;
/** The most polls a worker has out at once, whatever its `batch`: each holds a connection. */
const MOST_POLLS = 4;
/** Polls that wait less than this (seconds) for a message come this far apart while nothing is due. */
const IDLE_PAUSE = 1;

/** A message on its way through a handler. */
interface Job {
  message: DeliveredMessage;
  held: Held;
  /** Aborted when the message is given back before its handler ends. */
  abandoned: AbortController;
}

/**
 * A poll on its way: how many messages it asks for, whether it may wait for them, when it
 * was sent, the finished messages of one lock it acknowledges on its way, and its outcome
 * once it has one.
 */
interface Poll {
  asked: number;
  waits: boolean;
  started: number;
  ack: [string, string[]] | null;
  cut: AbortController;
  answer: Promise<void>;
  outcome: { lease: Lease } | { error: unknown } | null;
}

/** A handler's outcome: returned, or threw `error`. */
type Ending = { ok: true } | { ok: false; error: unknown };

export interface EngineSettings {
  concurrency: number;
  batch: number;
  lease: number;
  wait: number;
  log: Logger;
}

class Stopped extends Error {
  override name = "Stopped";
}

/** The loop a worker runs: poll for free slots, handle, keep leases, settle, drain. */
export class Engine extends Settler {
  readonly concurrency: number;
  readonly batch: number;
  readonly wait: number;
  /** The poll's error that stopped the worker, if one did. */
  fatal: unknown = null;
  stopping = false;
  abandoning = false;
  readonly #handler: Handler;
  /** Polls out together: enough to ask for every slot (at most MOST_POLLS), and at least two. */
  readonly #inFlight: number;
  /** Handlers started and not finished (nor given back). */
  readonly #jobs = new Set<Job>();
  /** Finished messages acknowledge on the next poll (`riding`) only while this is set. */
  #acksRide = false;
  /** Until the service refuses acknowledgements on polls. */
  #acksOnPolls = true;
  #wakeOnFreedSlot = false;
  #wake: (() => void) | null = null;
  #idle: (() => void) | null = null;
  #endPause: (() => void) | null = null;

  constructor(client: Client, queue: string, handler: Handler, settings: EngineSettings) {
    super(client, queue, settings.lease, settings.log);
    this.#handler = handler;
    this.concurrency = settings.concurrency;
    this.batch = settings.batch;
    this.wait = settings.wait;
    this.#inFlight = Math.max(2, Math.min(Math.ceil(settings.concurrency / settings.batch), MOST_POLLS));
  }

  /** How many handlers run now. */
  get running(): number {
    return this.#jobs.size;
  }

  /** Stop polling and drain (again: nothing more). */
  stop(why = "asked to"): void {
    if (this.stopping) return;
    const running = this.#jobs.size;
    const waiting = running ? `waiting for ${running} running handler(s) to finish` : "none running";
    this.log.info(`stopping (${why}): no more polls; ${waiting}`);
    this.stopping = true;
    this.#nudge();
    this.#endPause?.();
  }

  /**
   * A SIGTERM or SIGINT: the first stops, the second gives the running messages back now,
   * for another worker, and stops without waiting for them.
   */
  signalled(name: string): void {
    if (!this.stopping) {
      this.stop(name);
    } else if (!this.abandoning) {
      this.log.warn(
        `stopping now (${name} again): releasing ${this.#jobs.size} running message(s) for another worker`,
      );
      this.abandoning = true;
      for (const job of [...this.#jobs]) {
        job.abandoned.abort(new Stopped("given back by a second signal"));
        this.#giveBack(job);
      }
    }
  }

  async run(): Promise<void> {
    this.log.info(
      `worker started: queue ${JSON.stringify(this.queue)} at ${this.client.url}, concurrency ` +
        `${this.concurrency}, polls of up to ${this.batch}, lease ${this.lease} s`,
    );
    try {
      await this.#pollLoop();
      if (this.#jobs.size) await new Promise<void>((resolve) => (this.#idle = resolve));
    } finally {
      await this.settled();
      for (const held of this.held.values()) this.stopKeeping(held);
    }
    const { done, failed, retried, releasedUnstarted, lost } = this.counts;
    this.log.info(
      `worker stopped: ${done} done, ${failed} failed, ${retried} retried, ${releasedUnstarted} ` +
        `released unstarted, ${lost} leases lost`,
    );
    if (this.fatal !== null) throw this.fatal;
  }

  #nudge(): void {
    const wake = this.#wake;
    this.#wake = null;
    wake?.();
  }

  // Polling

  /**
   * Poll for the free slots until a stop, in polls of at most `batch` messages.
   *
   * One poll at a time may wait for messages (`wait`); the others ask for free slots at
   * once and do not wait, up to #inFlight polls out together, so neither a poll waiting
   * on an empty queue nor a slow answer keeps freed slots idle while messages are due.
   * Those polls go out only while the queue seems to have more due than was asked for:
   * after a poll comes back short, only the waiting one goes out until a poll comes back
   * with all it asked for.
   */
  async #pollLoop(): Promise<void> {
    const polls = new Set<Poll>();
    let hungry = true; // the last poll back brought all it asked for
    let failures = 0;
    try {
      while (!this.stopping) {
        let asked = 0;
        for (const poll of polls) asked += poll.asked;
        const free = Math.min(this.concurrency - this.#jobs.size - asked, this.batch);
        const waiting = [...polls].some((poll) => poll.waits);
        const maySend = polls.size === 0 || (polls.size < this.#inFlight && (!waiting || hungry));
        if (free > 0 && maySend) {
          const waits = !waiting;
          // Acknowledgements ride only on a poll that answers at once: one that may wait
          // would hold back their answer (and the end of their leases' extensions).
          const rides = this.#acksOnPolls && !(waits && this.wait);
          polls.add(this.#send(free, waits, rides ? this.ride() : null));
          continue;
        }
        this.acknowledgeNow(); // what no poll took along goes out at once
        // The message whose end frees a slot is acknowledged by the poll that asks for the
        // slot, when that poll answers at once; a freed slot matters only when it would send one.
        this.#acksRide = this.#acksOnPolls && maySend && (waiting || !this.wait);
        this.#wakeOnFreedSlot = maySend;
        try {
          if (![...polls].some((poll) => poll.outcome !== null)) {
            await new Promise<void>((resolve) => (this.#wake = resolve));
          }
        } finally {
          this.#acksRide = false;
          this.#wakeOnFreedSlot = false;
          this.#wake = null;
        }
        let pause = 0; // seconds before the next poll; what came back is taken first
        for (const poll of [...polls].filter((poll) => poll.outcome !== null)) {
          polls.delete(poll);
          let lease: Lease;
          try {
            lease = this.#answered(poll);
          } catch (error) {
            if (error instanceof Invalid && poll.ack !== null && this.#acksOnPolls) {
              // A service from before acknowledgements on polls refuses the field (its
              // acknowledgements went out by key): poll without it.
              this.#acksOnPolls = false;
              this.log.warn(
                `the service refused a poll that acknowledged (${described(error)}): ` +
                  "acknowledging by key from now on",
              );
            } else if (FATAL.some((kind) => error instanceof kind)) {
              this.log.error(`poll failed: ${described(error)}; stopping`);
              this.fatal = error;
              this.stopping = true; // the others' messages are taken (and, stopping, given back)
            } else {
              // Polled again after a pause: leaving the loop would stop the worker without
              // settling what its handlers are running.
              failures += 1;
              const backoff = Math.min(2 ** (failures - 1), MAX_POLL_BACKOFF);
              pause = Math.max(pause, backoff);
              this.log.warn(`poll failed: ${described(error)}; polling again in ${backoff} s`);
            }
            continue;
          }
          failures = 0;
          hungry = lease.messages.length >= poll.asked;
          if (poll.waits && lease.messages.length === 0 && this.wait < IDLE_PAUSE) {
            // Nothing due and a poll that does not wait: do not ask again at once.
            pause = Math.max(pause, IDLE_PAUSE - this.wait);
          }
          this.#take(lease, poll.started, poll.asked);
        }
        if (pause && !this.stopping) {
          this.acknowledgeNow(); // nothing waits for the pause
          await this.#pauseUnlessStopped(pause);
        }
      }
    } finally {
      this.acknowledgeNow();
      // Stopping: the waiting poll is cut short (the service, seeing its caller gone, gives
      // back what it claimed meanwhile) unless its answer has begun, which is read whole;
      // the others answer at once and are waited for (a poll that acknowledges answers at
      // once). What they bring is given back, unstarted.
      for (const poll of polls) {
        if (poll.waits && poll.ack === null) poll.cut.abort(new Stopped("the worker stopped"));
      }
      for (const poll of polls) {
        await poll.answer;
        let lease: Lease;
        try {
          lease = this.#answered(poll);
        } catch (error) {
          this.log.debug(`a poll failed as the worker stopped: ${described(error)}`);
          continue;
        }
        this.#take(lease, poll.started, poll.asked);
      }
    }
  }

  #send(asked: number, waits: boolean, ack: [string, string[]] | null): Poll {
    const cut = new AbortController();
    const started = now();
    const request = this.client.poll(this.queue, {
      max: asked,
      wait: waits ? this.wait : 0,
      lease: this.lease,
      signal: cut.signal,
      ...(ack === null ? {} : { ack: { lock_id: ack[0], keys: ack[1] } }),
    });
    const poll: Poll = { asked, waits, started, ack, cut, outcome: null, answer: Promise.resolve() };
    poll.answer = request.then(
      (lease) => {
        poll.outcome = { lease };
      },
      (error: unknown) => {
        poll.outcome = { error };
      },
    );
    void poll.answer.then(() => this.#nudge());
    return poll;
  }

  /**
   * The lease a finished poll brought (or its error, thrown), its acknowledgement settled:
   * a poll that failed may or may not have acknowledged, so those go out again by
   * themselves (a repeat is safe: what the first did comes back `missing`).
   */
  #answered(poll: Poll): Lease {
    const outcome = poll.outcome;
    if (outcome === null) throw new Error("a poll without an answer yet");
    if ("error" in outcome) {
      if (poll.ack !== null) this.toAcknowledge(...poll.ack);
      throw outcome.error;
    }
    const lease = outcome.lease;
    if (poll.ack !== null) {
      const [lockId, keys] = poll.ack;
      if (lease.acknowledged === undefined) {
        this.toAcknowledge(lockId, keys); // a service that does not acknowledge on polls
      } else {
        const result = { acknowledged: lease.acknowledged, missing: lease.missing ?? [] };
        this.acknowledged(lockId, keys, result, "on a poll");
      }
    }
    return lease;
  }

  #pauseUnlessStopped(seconds: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(done, seconds * 1000);
      const self = this;
      function done() {
        clearTimeout(timer);
        self.#endPause = null;
        resolve();
      }
      this.#endPause = done;
    });
  }

  /** Start a handler for each message of `lease` (or, when stopping, give them back). */
  #take(lease: Lease, started: number, asked: number): void {
    if (lease.lock_id === null || lease.messages.length === 0) return;
    const lockId = lease.lock_id;
    const keys = lease.messages.map((message) => message.key);
    this.log.debug(`polled ${keys.length} message(s) under lock ${lockId} (asked for ${asked})`);
    const held: Held = { lockId, keys: new Set(keys), running: new Set(), keeper: null, kept: false };
    this.held.set(lockId, held);
    this.keep(held, started);
    if (this.stopping) {
      this.counts.releasedUnstarted += keys.length;
      this.log.info(`released ${keys.length} message(s) polled as the worker stopped, unstarted`);
      this.settle(held, keys, 0);
      return;
    }
    for (const message of lease.messages) {
      held.running.add(message.key);
      const job: Job = { message, held, abandoned: new AbortController() };
      this.#jobs.add(job);
      this.#start(job);
    }
  }

  // Handling

  #start(job: Job): void {
    const began = now();
    const { message, held } = job;
    const context = { lockId: held.lockId, trace: message.trace ?? null, signal: job.abandoned.signal };
    let handled: Promise<unknown>;
    try {
      handled = Promise.resolve(this.#handler(message, context));
    } catch (error) {
      handled = Promise.reject(error);
    }
    handled.then(
      () => this.#ended(job, { ok: true }, now() - began),
      (error: unknown) => this.#ended(job, { ok: false, error }, now() - began),
    );
  }

  /**
   * The job's handler returned or threw after `took` milliseconds: settle its message,
   * unless a second signal gave it back meanwhile.
   */
  #ended(job: Job, ending: Ending, took: number): void {
    if (!this.#jobs.has(job)) return;
    this.#free(job);
    this.#finish(job.message, job.held, ending, took);
  }

  #free(job: Job): void {
    this.#jobs.delete(job);
    job.held.running.delete(job.message.key);
    if (this.#jobs.size === 0) {
      const idle = this.#idle;
      this.#idle = null;
      idle?.();
    }
    if (this.#wakeOnFreedSlot) this.#nudge();
  }

  /** Release the job's message at once, due now, for another worker. */
  #giveBack(job: Job): void {
    this.#free(job);
    this.settle(job.held, [job.message.key], 0);
  }

  /** Count, log and settle a message whose handler returned or threw. */
  #finish(message: DeliveredMessage, held: Held, ending: Ending, took: number): void {
    const key = JSON.stringify(message.key);
    const delivery = `(delivery ${message.deliveries})`;
    if (ending.ok) {
      this.counts.done += 1;
      this.log.info(`done ${key} ${delivery} in ${Math.round(took)} ms`);
      if (this.#acksRide && !this.stopping) {
        // The poll for its slot will acknowledge it.
        const riding = this.riding.get(held.lockId);
        if (riding === undefined) this.riding.set(held.lockId, [message.key]);
        else riding.push(message.key);
        return;
      }
      this.toAcknowledge(held.lockId, [message.key]);
    } else if (ending.error instanceof Retry) {
      const { delay, reason } = ending.error;
      this.counts.retried += 1;
      const when = delay === null ? "when the queue's retry says" : `in ${delay} s`;
      this.log.info(`retry ${key} ${delivery}${reason ? `: ${oneLine(reason)}` : ""}; due again ${when}`);
      this.settle(held, [message.key], delay ?? undefined);
    } else {
      this.counts.failed += 1;
      this.log.warn(
        `failed ${key} ${delivery} after ${Math.round(took)} ms: ${described(ending.error)}; ` +
          "released, due again when the queue's retry says",
      );
      if (ending.error instanceof Error && ending.error.stack) {
        this.log.debug(`stack of ${key} ${delivery}: ${oneLine(ending.error.stack)}`);
      }
      this.settle(held, [message.key], undefined);
    }
  }
}
