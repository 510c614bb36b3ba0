// Helpers of the worker tests: a fetch that records what the worker sends, a logger whose
// lines a test can wait for, and a worker running until the test stops it.
import { Client, Worker } from "hourglass-client";
import { WAIT, deferred, within } from "./helpers.mjs";

/**
 * A client whose requests are recorded: `requests` holds each one's method, route (the
 * last segment of its path: "poll", "ack", "release", a lock id…) and JSON body.
 * `onRequest` is told of each; `refuse` may answer one instead of the service (a
 * Response), `onAnswer` is told of each answer as it begins (its headers in, its body
 * not yet read) and may hand the worker another Response instead, and `answer` may
 * rewrite an answer's JSON before the worker reads it.
 */
export function recordingClient(url, { answer, refuse, onRequest, onAnswer } = {}) {
  const requests = [];
  const fetch = async (target, init) => {
    const path = new URL(target).pathname;
    const body = init.body === undefined ? null : JSON.parse(init.body);
    const route = path.split("/").at(-1);
    const request = { method: init.method, route, path, body };
    requests.push(request);
    onRequest?.(request);
    const refusal = refuse?.(request);
    if (refusal !== undefined) return refusal;
    const fetched = await globalThis.fetch(target, init);
    const response = onAnswer?.(request, fetched) ?? fetched;
    if (answer === undefined || !response.ok || response.status === 204) return response;
    const rewritten = answer(route, await response.json());
    return Response.json(rewritten, { status: response.status, headers: response.headers });
  };
  const bodies = (method, route) =>
    requests.filter((request) => request.method === method && request.route === route).map((request) => request.body);
  return {
    client: new Client(url, { fetch }),
    requests,
    bodies,
    polls: () => bodies("POST", "poll"),
    acksOnPolls: () => bodies("POST", "poll").filter((body) => body.ack).map((body) => body.ack),
    acksByKey: () => bodies("POST", "ack"),
    extensions: () => requests.filter((request) => request.method === "PATCH"),
  };
}

/**
 * A logger that keeps its lines and resolves `until(pattern, count)` once `count` lines
 * match `pattern`.
 */
export function watchingLogger() {
  const lines = [];
  const watchers = [];
  const note = (level) => (message) => {
    lines.push(`${level} ${message}`);
    for (const watcher of watchers) {
      if (lines.filter((line) => watcher.pattern.test(line)).length >= watcher.count) watcher.done.resolve();
    }
  };
  return {
    lines,
    logger: { debug: note("debug"), info: note("info"), warn: note("warn"), error: note("error") },
    until(pattern, count = 1) {
      const done = deferred();
      watchers.push({ pattern, count, done });
      if (lines.filter((line) => pattern.test(line)).length >= count) done.resolve();
      return within(done.promise, `${count} log line(s) matching ${pattern}`);
    },
    matching(pattern) {
      return lines.filter((line) => pattern.test(line));
    },
  };
}

/** A worker of `handler` on `queue`, running; `stop()` stops it and waits for `run()`. */
export function running(client, queue, handler, options = {}) {
  const worker = new Worker(client, queue, handler, options);
  const finished = worker.run({ handleSignals: false });
  finished.catch(() => {}); // read by stop()
  return {
    worker,
    finished,
    async stop() {
      worker.stop();
      await within(finished, "the worker to stop", WAIT);
    },
  };
}
