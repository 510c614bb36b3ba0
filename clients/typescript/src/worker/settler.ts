/**
 * The engine's settling half: the locks a worker holds, their leases kept while it holds
 * any of their messages, and its acknowledgements and releases, batched per lock.
 */

import type { Client } from "../client.js";
import { NotFound } from "../errors.js";
import type { AckResult } from "../types.js";
import { type Logger, described } from "./logger.js";

/**
 * A lease is extended when a third of it has passed, so two extensions in a row may fail
 * (a slow answer, a 503) before it runs out.
 */
const EXTEND_EVERY = 1 / 3;

/** One poll's lock, while this worker holds any of its messages. */
export interface Held {
  lockId: string;
  /** Not yet acknowledged or released. */
  keys: Set<string>;
  /** Handlers still running. */
  running: Set<string>;
  /** The keeper's next extension, while it keeps the lease. */
  keeper: NodeJS.Timeout | null;
  kept: boolean;
}

/** What a worker did with its messages, for the summary it logs when it stops. */
export interface Counts {
  done: number;
  failed: number;
  retried: number;
  releasedUnstarted: number;
  lost: number;
}

/** Milliseconds on a clock that only goes forward. */
export function now(): number {
  return performance.now();
}

/**
 * What a worker holds and has to settle: its locks (each kept leased while any of its
 * messages is running or not yet settled), and the finished messages' acknowledgements
 * and releases, sent a request per lock (and delay).
 *
 * An acknowledgement goes out by key, or rides on the next poll (`Engine`'s loop decides
 * when): `riding` holds those until a poll takes them or `acknowledgeNow` sends them by
 * themselves (docs/decisions/0021-acknowledgement-on-the-next-poll.md).
 */
export class Settler {
  readonly counts: Counts = { done: 0, failed: 0, retried: 0, releasedUnstarted: 0, lost: 0 };
  protected readonly held = new Map<string, Held>();
  /** To acknowledge now, by lock. */
  protected acks = new Map<string, string[]>();
  /** Finished messages, by lock, that the next poll acknowledges on its way. */
  protected riding = new Map<string, string[]>();
  /** To release, by lock and delay (undefined: the queue's retry decides). */
  protected releases = new Map<string, { lockId: string; delay: number | undefined; keys: string[] }>();
  #scheduled = false;
  #settling: Promise<void> | null = null;

  constructor(
    readonly client: Client,
    readonly queue: string,
    readonly lease: number,
    readonly log: Logger,
  ) {}

  // Acknowledgements on polls

  /**
   * The finished messages of one lock (the one with most) for the poll being sent to
   * acknowledge on its way; null when none wait for a poll.
   */
  protected ride(): [string, string[]] | null {
    let chosen: [string, string[]] | null = null;
    for (const entry of this.riding) {
      if (chosen === null || entry[1].length > chosen[1].length) chosen = entry;
    }
    if (chosen !== null) this.riding.delete(chosen[0]);
    return chosen;
  }

  /** Send the acknowledgements no poll took along by themselves, at once. */
  protected acknowledgeNow(): void {
    if (this.riding.size === 0) return;
    for (const [lockId, keys] of this.riding) this.toAcknowledge(lockId, keys);
    this.riding.clear();
  }

  protected toAcknowledge(lockId: string, keys: string[]): void {
    const list = this.acks.get(lockId);
    if (list === undefined) this.acks.set(lockId, [...keys]);
    else list.push(...keys);
    this.requestSettle();
  }

  // Leases

  /** Extend the lock's lease every third of a lease while this worker holds any of its messages. */
  protected keep(held: Held, started: number): void {
    const every = this.lease * EXTEND_EVERY * 1000;
    const schedule = (at: number) => {
      if (held.kept) held.keeper = setTimeout(extend, Math.max(0, at - now()));
    };
    const extend = async () => {
      held.keeper = null;
      if (held.keys.size === 0 || !held.kept) return;
      const sent = now();
      try {
        await this.client.extend(this.queue, held.lockId, this.lease);
      } catch (error) {
        if (error instanceof NotFound) {
          held.kept = false;
          if (held.running.size) {
            this.counts.lost += held.running.size;
            this.log.warn(
              `lease lost: lock ${held.lockId} holds nothing any more; ${held.running.size} running ` +
                "message(s) will be delivered again",
            );
          }
          return;
        }
        this.log.warn(`could not extend lock ${held.lockId}: ${described(error)}`);
        schedule(now() + Math.min(1000, every));
        return;
      }
      schedule(sent + every);
    };
    held.kept = true;
    schedule(started + every);
  }

  protected stopKeeping(held: Held): void {
    held.kept = false;
    if (held.keeper !== null) clearTimeout(held.keeper);
    held.keeper = null;
  }

  // Settling: acknowledgements and releases, batched per lock

  protected settle(held: Held, keys: string[], delay: number | undefined): void {
    const slot = `${held.lockId}\u0000${delay}`;
    const release = this.releases.get(slot);
    if (release === undefined) this.releases.set(slot, { lockId: held.lockId, delay, keys: [...keys] });
    else release.keys.push(...keys);
    this.requestSettle();
  }

  /**
   * Send what finished handlers left to settle, a request per lock (and delay), once the
   * handlers finishing in this turn of the event loop have left theirs; what finishes
   * while one is sent goes in the next (so busy workers send fewer).
   */
  protected requestSettle(): void {
    if (this.#scheduled || this.#settling !== null) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#settling = this.#settleAll().finally(() => {
        this.#settling = null;
        if (this.acks.size || this.releases.size) this.requestSettle();
      });
    });
  }

  async #settleAll(): Promise<void> {
    while (this.acks.size || this.releases.size) {
      const acks = this.acks;
      const releases = this.releases;
      this.acks = new Map();
      this.releases = new Map();
      await Promise.all([
        ...[...acks].map(([lockId, keys]) => this.#acknowledge(lockId, keys)),
        ...[...releases.values()].map(({ lockId, delay, keys }) => this.#release(lockId, keys, delay)),
      ]);
    }
  }

  /** Resolves once nothing is left to settle (nor on its way). */
  protected async settled(): Promise<void> {
    while (this.#scheduled || this.#settling !== null) {
      await (this.#settling ?? new Promise((resolve) => setImmediate(resolve)));
    }
  }

  async #acknowledge(lockId: string, keys: string[]): Promise<void> {
    let result: AckResult;
    try {
      result = await this.client.ackKeys(this.queue, lockId, keys);
    } catch (error) {
      this.log.error(
        `could not acknowledge ${keys.length} message(s) of lock ${lockId}: ${described(error)}; ` +
          "they will be delivered again",
      );
      this.doneWith(lockId, keys);
      return;
    }
    this.acknowledged(lockId, keys, result, "by key");
  }

  /** `keys` of the lock were acknowledged (`how`: by key, or on a poll) as `result` says. */
  protected acknowledged(lockId: string, keys: string[], result: AckResult, how: string): void {
    this.log.debug(`acknowledged ${result.acknowledged.length} message(s) of lock ${lockId} ${how}`);
    for (const key of result.missing) {
      this.log.warn(
        `acknowledged ${JSON.stringify(key)}, but lock ${lockId} no longer held it: its lease was ` +
          "lost (taken by another poll, or the message was updated) and it may be delivered " +
          "again, unless an earlier attempt of this acknowledgement deleted it and its answer was lost",
      );
    }
    this.doneWith(lockId, keys);
  }

  async #release(lockId: string, keys: string[], delay: number | undefined): Promise<void> {
    try {
      await this.client.releaseKeys(this.queue, lockId, keys, delay === undefined ? {} : { delay });
    } catch (error) {
      this.log.error(
        `could not release ${keys.length} message(s) of lock ${lockId}: ${described(error)}; ` +
          "they come back when the lease ends",
      );
    }
    this.doneWith(lockId, keys);
  }

  protected doneWith(lockId: string, keys: string[]): void {
    const held = this.held.get(lockId);
    if (held === undefined) return;
    for (const key of keys) held.keys.delete(key);
    if (held.keys.size === 0) {
      this.held.delete(lockId);
      this.stopKeeping(held);
    }
  }
}
