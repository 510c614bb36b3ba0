/**
 * A call: one request and how its answer is read, and the pieces the operations build it
 * from. Operations are pure (no I/O); `Client` sends them, with the retries they allow.
 */

import type { OperationId, Time, TraceInput } from "../types.js";

export type Method = "GET" | "PUT" | "POST" | "PATCH" | "DELETE";

export interface Call<T> {
  /** The operation of openapi.yaml this call is. */
  operation: OperationId;
  method: Method;
  path: string;
  query?: Record<string, string | number>;
  /** The JSON body; none when undefined. */
  body?: unknown;
  headers?: Record<string, string>;
  /**
   * Safe to send again when a `503` says it was not done, or its answer was lost:
   * repeating it changes nothing a first success would not have (README, "Retries").
   */
  repeatable: boolean;
  /** Statuses besides 2xx that `read` reads (an acknowledgement's 404: nothing held). */
  accept?: readonly number[];
  /** Seconds the service may hold the request before answering (a long poll's wait). */
  wait?: number;
  signal?: AbortSignal;
  read(response: Response): Promise<T>;
}

/**
 * `value` as one path segment: `/`, `%`, `?`… encoded. A key of `.` or `..` cannot be sent
 * at all: fetch reads the URL as WHATWG's URL standard says, where a segment `.` or `..`,
 * or an encoding of one (`%2E`), is a directory, resolved away before the request leaves
 * (another route would be asked); such a name is refused before anything is sent.
 */
export function segment(value: string): string {
  if (value === "." || value === "..") {
    throw new TypeError(`${JSON.stringify(value)} cannot be sent as a name in a URL through fetch`);
  }
  return encodeURIComponent(value);
}

export function queuePath(queue: string, ...parts: string[]): string {
  return ["/v1/queues", segment(queue), ...parts].join("/");
}

export function readJson<T>(): (response: Response) => Promise<T> {
  return async (response) => (await response.json()) as T;
}

export function readJsonAs<J, T>(convert: (data: J) => T): (response: Response) => Promise<T> {
  return async (response) => convert((await response.json()) as J);
}

export async function readNothing(response: Response): Promise<void> {
  await response.body?.cancel();
}

export async function readFound(response: Response): Promise<boolean> {
  await response.body?.cancel();
  return response.status !== 404;
}

/** A time as the API takes it: a `Date` in UTC with milliseconds, a string as given. */
export function formatTime(value: Time): string {
  if (value instanceof Date) {
    if (Number.isNaN(value.getTime())) throw new RangeError("an invalid Date");
    return value.toISOString();
  }
  return value;
}

/**
 * An offer's body fields (payload first), with `scheduled_at` and `expires_at` formatted;
 * `scheduled_at` with `delay`, or `expires_at` with `ttl`, is refused before anything is
 * sent. Fields left undefined are left out.
 */
export function offerBody(
  payload: unknown,
  fields: {
    scheduled_at?: Time | null | undefined;
    delay?: number | null | undefined;
    expires_at?: Time | null | undefined;
    ttl?: number | null | undefined;
  },
  rest: Record<string, unknown>,
): Record<string, unknown> {
  if (fields.scheduled_at != null && fields.delay != null) {
    throw new TypeError("give scheduled_at or delay, not both");
  }
  if (fields.expires_at != null && fields.ttl != null) {
    throw new TypeError("give expires_at or ttl, not both");
  }
  return present({
    payload,
    ...rest,
    scheduled_at: fields.scheduled_at == null ? undefined : formatTime(fields.scheduled_at),
    delay: fields.delay ?? undefined,
    expires_at: fields.expires_at == null ? undefined : formatTime(fields.expires_at),
    ttl: fields.ttl ?? undefined,
  });
}

/** The fields that were given (not undefined). */
export function present<T extends Record<string, unknown>>(fields: T): Record<string, unknown> {
  return Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));
}

/** The `traceparent` and `tracestate` headers of a trace context, if one is given. */
export function traceHeaders(trace: TraceInput | null | undefined): Record<string, string> | undefined {
  if (trace == null) return undefined;
  const headers: Record<string, string> = { traceparent: trace.traceparent };
  if (trace.tracestate) headers["tracestate"] = trace.tracestate;
  return headers;
}
