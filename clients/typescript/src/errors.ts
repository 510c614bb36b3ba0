/**
 * Errors: every answer that is not a success becomes an error carrying its problem+json
 * fields, of a class per status (the Python client's names and hierarchy).
 */

/** Fields of a problem+json answer (RFC 9457), as an error carries them. */
export interface ProblemFields {
  status?: number;
  type?: string;
  title?: string;
  problem?: Record<string, unknown>;
  cause?: unknown;
}

/**
 * An answer that was not a success, with the fields of its problem+json body: `type`,
 * `title`, `status`, `detail`, and `problem`, the whole body as sent (a `422` adds
 * `errors`, the fields at fault). A failure without an answer (`ConnectionFailed`) has
 * `status` 0.
 */
export class HourglassError extends Error {
  readonly status: number;
  readonly type: string;
  readonly title: string;
  readonly detail: string;
  readonly problem: Record<string, unknown>;

  constructor(detail: string, fields: ProblemFields = {}) {
    const status = fields.status ?? 0;
    const title = fields.title ?? "";
    super(status ? `${status} ${title}: ${detail}` : detail, { cause: fields.cause });
    this.name = new.target.name;
    this.status = status;
    this.type = fields.type ?? "about:blank";
    this.title = title;
    this.detail = detail;
    this.problem = fields.problem ?? {};
  }
}

/** 400: the request is malformed (a purge whose `confirm` is not the queue's name). */
export class BadRequest extends HourglassError {}

/** 401: no valid bearer token. */
export class Unauthorized extends HourglassError {}

/** 403: the token may not use this queue. */
export class Forbidden extends HourglassError {}

/** 404: no such message, cron entry or lock (`type` says which). */
export class NotFound extends HourglassError {}

/** 408: the request's body did not reach the service in time. */
export class RequestTimeout extends HourglassError {}

/** 409: the request conflicts with the state of what it names. */
export class Conflict extends HourglassError {}

/** 413: the payload or the whole request is over the service's limit. */
export class TooLarge extends HourglassError {}

/** 422: a name, field or value breaks the API's rules; nothing was written. */
export class Invalid extends HourglassError {}

/** 5xx other than 503: the service (or a proxy before it) failed. */
export class ServerError extends HourglassError {}

/**
 * 503: the service cannot serve now (its database is unreachable); try again after
 * `retryAfter` seconds (null when the answer did not say).
 */
export class Unavailable extends HourglassError {
  readonly retryAfter: number | null;

  constructor(detail: string, fields: ProblemFields & { retryAfter?: number | null } = {}) {
    super(detail, fields);
    this.retryAfter = fields.retryAfter ?? null;
  }
}

/**
 * No answer: the service could not be reached, or the connection broke or timed out
 * before its answer arrived (`status` 0; `cause` is fetch's error). `sent` says whether
 * the request may have reached the service (false: the connection was never made).
 */
export class ConnectionFailed extends Unavailable {
  readonly sent: boolean;

  constructor(detail: string, fields: ProblemFields & { sent: boolean }) {
    super(detail, fields);
    this.sent = fields.sent;
  }
}

const BY_STATUS: Record<number, typeof HourglassError> = {
  400: BadRequest,
  401: Unauthorized,
  403: Forbidden,
  404: NotFound,
  408: RequestTimeout,
  409: Conflict,
  413: TooLarge,
  422: Invalid,
};

/** The answer's `Retry-After` in seconds (the delay form; a date is not used here). */
export function retryAfter(headers: Headers): number | null {
  const value = headers.get("Retry-After");
  if (value === null || value.trim() === "") return null;
  const seconds = Number(value);
  return Number.isFinite(seconds) ? Math.max(0, seconds) : null;
}

/** The error an answer that is not a success is, from its status and body. */
export async function errorFrom(response: Response): Promise<HourglassError> {
  const text = await response.text().catch(() => "");
  let body: unknown = null;
  try {
    body = JSON.parse(text);
  } catch {
    // Not JSON (a proxy's page, say): read below.
  }
  const problem =
    body !== null && typeof body === "object" && !Array.isArray(body)
      ? (body as Record<string, unknown>)
      : {};
  const status = response.status;
  const title = stringOr(problem["title"], response.statusText);
  // Not problem+json: keep the start of what came.
  const detail =
    typeof problem["detail"] === "string" ? problem["detail"] : text.slice(0, 200).trim() || title;
  const fields = { status, type: stringOr(problem["type"], "about:blank"), title, problem };
  if (status === 503) {
    return new Unavailable(detail, { ...fields, retryAfter: retryAfter(response.headers) });
  }
  const kind = BY_STATUS[status] ?? (status >= 500 ? ServerError : HourglassError);
  return new kind(detail, fields);
}

function stringOr(value: unknown, fallback: string): string {
  return typeof value === "string" && value !== "" ? value : fallback;
}
