/**
 * What a handler is: the async function a worker runs on each message, what it is handed
 * besides the message, and `Retry`, which a handler throws to give its message back.
 */

import type { DeliveredMessage, Trace } from "../types.js";

/** What a handler is handed besides its message. */
export interface HandlerContext {
  /** The lock the message is leased under. */
  lockId: string;
  /** The producer's trace context (the offer's `traceparent`, `tracestate`), or null. */
  trace: Trace | null;
  /**
   * Aborted when the worker gives the message back before the handler ends (a second
   * SIGTERM or SIGINT): what the handler does after that is ignored.
   */
  signal: AbortSignal;
}

/**
 * A handler: resolving acknowledges its message; throwing (or rejecting) releases it, due
 * again as the queue's `retry` setting says, or after the delay of a `Retry` it threw.
 */
export type Handler = (message: DeliveredMessage, context: HandlerContext) => unknown;

/**
 * Throw from a handler to give its message back without an error being logged as one:
 * due again after `delay` seconds, or, without a delay, when the queue's `retry` setting
 * says (at once when it has none).
 */
export class Retry extends Error {
  readonly delay: number | null;
  readonly reason: string;

  constructor(delay: number | null = null, reason = "") {
    super(reason || "retry");
    this.name = "Retry";
    if (delay !== null && !(delay >= 0)) throw new RangeError(`a retry's delay must be ≥ 0, not ${delay}`);
    this.delay = delay;
    this.reason = reason;
  }
}
