/**
 * The shapes the client sends and returns, named from the types openapi-typescript
 * generates from openapi.yaml (schema.ts): answers are the service's JSON as it comes
 * (times are RFC 3339 strings in UTC, durations seconds); the options of each method are
 * its request body's fields, named as on the wire, with `Date`s taken for times.
 */

import type { components, operations } from "./schema.js";

type Schemas = components["schemas"];

/** The id of an operation of openapi.yaml (`offerMessage`, `pollQueue`, …). */
export type OperationId = keyof operations;

export type Message = Schemas["MessageResponse"];
export type State = Schemas["State"];
export type ListState = Schemas["ListState"];
export type Outcome = Schemas["Outcome"];
export type IfExists = Schemas["IfExists"];
export type Finish = Schemas["Finish"];
export type OfferResult = Schemas["OfferResponse"];
export type BatchResult = Schemas["BatchResponse"];
export type HistoryEntry = Schemas["HistoryEntryResponse"];
export type AckResult = Schemas["AcknowledgeResponse"];
export type ReleaseResult = Schemas["ReleaseResponse"];
export type QueueStats = Schemas["QueueStatsResponse"];
export type QueueSettings = Schemas["QueueSettingsResponse"];
export type RedriveResult = Schemas["RedriveResponse"];
export type CronEntry = Schemas["CronEntryResponse"];
export type CronInstallResult = Schemas["CronInstallResponse"];
export type Problem = Schemas["Problem"];

/** W3C trace context, as an offer's `traceparent` and `tracestate` headers carry it. */
export interface TraceContext {
  traceparent: string;
  tracestate?: string | null;
}

/**
 * A message as a poll hands it out, under its lease. `trace` is the producer's trace
 * context, when the service stores one (absent from services that do not).
 */
export type DeliveredMessage = Schemas["DeliveredMessage"] & {
  trace?: { traceparent: string; tracestate: string | null } | null;
};

/**
 * A poll's answer: the messages leased under `lock_id` (null and none when nothing was
 * due); with an `ack`, `acknowledged` and `missing` say what it acknowledged first.
 */
export type Lease = Omit<Schemas["PollResponse"], "messages"> & { messages: DeliveredMessage[] };

/** A page of a list; pass `next` as `cursor` for the following one (null: the last). */
export interface Page<T> {
  items: T[];
  next: string | null;
}

/** A time as a `Date` or an RFC 3339 string with a zone. */
export type Time = Date | string;

type Timed<T> = Omit<T, "payload" | "scheduled_at" | "expires_at"> & {
  scheduled_at?: Time;
  expires_at?: Time;
};

/** When and how a message is offered (`Client.offer`): a `PUT …/messages/{key}` body. */
export type OfferOptions = Timed<Schemas["PutMessage"]> & {
  /** Sent as the `traceparent` and `tracestate` headers: stored with the message. */
  trace?: TraceContext;
};

/** An update's fields (`Client.update`, `Client.create`): as an offer's, without `if_exists`. */
export type UpdateOptions = Timed<Schemas["UpdateMessage"]> & { trace?: TraceContext };

/** One offer of `Client.offerMany`: a key, its payload, and an offer's fields. */
export type Offer = Timed<Omit<Schemas["BatchItem"], "key">> & { key: string; payload: unknown };

export interface ListOptions {
  state?: ListState;
  prefix?: string;
  group?: string;
  limit?: number;
  cursor?: string;
}

export interface HistoryOptions {
  key?: string;
  outcome?: Finish;
  limit?: number;
  cursor?: string;
}

/** What a poll acknowledges before it claims: all a lock still holds, or some of its keys. */
export interface Ack {
  lock_id: string;
  keys?: string[];
}

export interface PollOptions {
  /** 1–1000 messages at most (1). */
  max?: number;
  /** Seconds to wait for one to come due, 0–20 (0). */
  wait?: number;
  /** Seconds to lease them for (the queue's default lease). */
  lease?: number;
  /** Acknowledge first, in the same request: a lock id (all it holds) or an `Ack`. */
  ack?: string | Ack;
  /** Aborts the poll: the service gives back what it claimed for a caller that hung up. */
  signal?: AbortSignal;
}

export type SettingsOptions = Schemas["QueueSettingsRequest"];
export type RedriveOptions = Schemas["RedriveRequest"];

/** A cron entry's schedule: exactly one of `cron`, `every` and `daily`, and its runs' fields. */
export type CronOptions = Omit<Schemas["CronInstallRequest"], "payload">;

export interface CronReadOptions {
  after?: Time;
  count?: number;
}
