// The console's one way to the service: the public /v1 API, with the bearer token the
// person gave (kept in this tab's session storage) and problem+json errors as ApiError.

const TOKEN_KEY = "hourglass.token";

export function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function keepToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}

/** The service answered with an error (problem+json: type, title, status, detail). */
export class ApiError extends Error {
  constructor(status, problem, retryAfter) {
    super(problem?.detail || problem?.title || `HTTP ${status}`);
    this.status = status;
    this.problem = problem || {};
    this.retryAfter = retryAfter;
  }

  get databaseUnavailable() {
    return this.status === 503;
  }
}

/** No answer at all: the service is down, or the network between. */
export class Unreachable extends Error {}

/**
 * Tell the page how the service is doing after every answer (or none): "ok",
 * "database-unavailable" (503) or "unreachable". The banner listens.
 */
function reportHealth(health) {
  window.dispatchEvent(new CustomEvent("hourglass:health", { detail: health }));
}

/** One path segment: a queue name or a key (which may hold `/`, spaces, `%`, `?`, `#`). */
export function segment(text) {
  const encoded = encodeURIComponent(text);
  // "." and ".." alone would be read as "this folder" and "the folder above".
  return encoded === "." || encoded === ".." ? encoded.replaceAll(".", "%2E") : encoded;
}

/** The /v1 paths the console uses, each part encoded. */
export const paths = {
  queues: () => "/v1/queues",
  queue: (queue) => `/v1/queues/${segment(queue)}`,
  settings: (queue) => `/v1/queues/${segment(queue)}/settings`,
  messages: (queue) => `/v1/queues/${segment(queue)}/messages`,
  message: (queue, key) => `/v1/queues/${segment(queue)}/messages/${segment(key)}`,
  history: (queue) => `/v1/queues/${segment(queue)}/history`,
  cron: (queue) => `/v1/queues/${segment(queue)}/cron`,
  redrive: (queue) => `/v1/queues/${segment(queue)}/redrive`,
  // action: "pause" or "resume"
  pause: (queue, action) => `/v1/queues/${segment(queue)}/${action}`,
  cronPause: (queue, name, action) => `/v1/queues/${segment(queue)}/cron/${segment(name)}/${action}`,
};

/**
 * `method path` with `query` (null and "" left out) and a JSON `body`: the answer's
 * JSON (null for 204), or an ApiError, or Unreachable.
 */
export async function call(method, path, { query = {}, body, signal } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query)) {
    if (value !== null && value !== undefined && value !== "") {
      url.searchParams.set(name, String(value));
    }
  }
  const headers = { Accept: "application/json" };
  const token = storedToken();
  if (token) {
    headers.Authorization = `Bearer ${token}`;
  }
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: "no-store",
    });
  } catch (error) {
    if (error.name === "AbortError") {
      throw error;
    }
    reportHealth("unreachable");
    throw new Unreachable("the service does not answer");
  }
  reportHealth(response.status === 503 ? "database-unavailable" : "ok");
  if (response.status === 204) {
    return null;
  }
  const answer = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, answer, Number(response.headers.get("Retry-After")) || 0);
  }
  return answer;
}

export const get = (path, options) => call("GET", path, options);
