/**
 * The shapes the client sends and returns, named from the types openapi-typescript
 * generates from openapi.yaml (schema.ts), so that `npm run check:types` catches their
 * drift: answers are the service's JSON as it comes (times are RFC 3339 strings in UTC,
 * durations seconds); the options of each method are its request body's (or query's)
 * fields, named as on the wire, with `Date`s taken for times.
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

/**
 * W3C trace context: an offer's `traceparent` and `tracestate` headers, as the service
 * stores them with the message and hands them to a worker (`DeliveredMessage.trace`).
 */
export type Trace = Schemas["Trace"];
/** A trace context to send with an offer: a `Trace`, whose `tracestate` may be left out. */
export type TraceInput = Omit<Trace, "tracestate"> & { tracestate?: Trace["tracestate"] };

/** A message as a poll hands it out, under its lease, with its producer's `trace` (or null). */
export type DeliveredMessage = Schemas["DeliveredMessage"];

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

/** `T`'s fields, each optional and not null (a field left out says what null would). */
type Given<T> = { [Field in keyof T]?: Exclude<T[Field], null> };

/** The query parameters of an operation of openapi.yaml. */
type Query<Id extends OperationId> = Given<NonNullable<operations[Id]["parameters"]["query"]>>;

/**
 * When and how a message is offered (`Client.offer`): a `PUT …/messages/{key}` body, and
 * its `trace`, sent as the `traceparent` and `tracestate` headers and stored with the
 * message (null or none: no trace; a handler's `context.trace` passes on as it is).
 */
export type OfferOptions = Timed<Schemas["PutMessage"]> & { trace?: TraceInput | null };

/** An update's fields (`Client.update`, `Client.create`): as an offer's, without `if_exists`. */
export type UpdateOptions = Timed<Schemas["UpdateMessage"]> & { trace?: TraceInput | null };

/** One offer of `Client.offerMany`: a key, its payload, and an offer's fields. */
export type Offer = Timed<Omit<Schemas["BatchItem"], "key">> & { key: string; payload: unknown };

/** A page of `Client.listMessages`: a `GET …/messages` query. */
export type ListOptions = Query<"listMessages">;

/** A page of `Client.history`: a `GET …/history` query. */
export type HistoryOptions = Query<"listHistory">;

/** What a poll acknowledges before it claims: all a lock still holds, or some of its keys. */
export type Ack = Schemas["PollAcknowledgement"];

/**
 * A poll's fields (`Client.poll`): a `POST …/poll` body, its `ack` a lock id (all it
 * holds) or an `Ack`; `signal` aborts the poll while it waits (the service gives back
 * what it claimed for a caller that hung up), not once its answer has begun: that is
 * read whole.
 */
export type PollOptions = Given<Omit<Schemas["PollRequest"], "ack">> & {
  ack?: string | Ack;
  signal?: AbortSignal;
};

export type SettingsOptions = Schemas["QueueSettingsRequest"];
export type RedriveOptions = Schemas["RedriveRequest"];

/** A cron entry's schedule: exactly one of `cron`, `every` and `daily`, and its runs' fields. */
export type CronOptions = Omit<Schemas["CronInstallRequest"], "payload">;

/** What `Client.getCron` shows: the runs `after` a time (now), `count` of them. */
export type CronReadOptions = Omit<Query<"getCronEntry">, "after"> & { after?: Time };
