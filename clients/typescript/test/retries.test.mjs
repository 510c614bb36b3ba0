// What the client sends again and what it throws: against scripted answers (a fetch that
// answers in turn), through a real proxy that answers 503 before a real server, and to a
// port where nothing listens. A repeat only where it cannot change what a first success did.
import assert from "node:assert/strict";
import { createServer, request as forward } from "node:http";
import { after, before, describe, test } from "node:test";
import {
  BadRequest, Client, Conflict, ConnectionFailed, Forbidden, HourglassError, Invalid, NotFound,
  RequestTimeout, ServerError, TooLarge, Unauthorized, Unavailable, backoff,
} from "hourglass-client";
import { freePort, startServer } from "./support/server.mjs";

const WHEN = new Date("2031-01-01T00:00:00.000Z");
const OFFERED = { queue: "q", key: "k", outcome: "created", scheduled_at: "2031-01-01T00:00:00.000Z" };
const PROBLEM = {
  type: "urn:hourglass:problem:database-unavailable",
  title: "Service Unavailable",
  status: 503,
  detail: "the database is unavailable",
};

function unavailable() {
  return new Response(JSON.stringify(PROBLEM), {
    status: 503,
    headers: { "Retry-After": "0", "Content-Type": "application/problem+json" },
  });
}

/** A fetch that answers with `answers` in turn (the last one again and again). */
function script(...answers) {
  const requests = [];
  const fetch = async (url, init) => {
    requests.push({ url: String(url), ...init });
    const answer = answers.length > 1 ? answers.shift() : answers[0];
    if (answer instanceof Error) throw answer;
    return answer();
  };
  return { fetch, requests };
}

const ok = (body, status = 200) => () => Response.json(body, { status });

/** A connection error as fetch throws it (undici's TypeError with the socket's cause). */
function fetchFailed(code) {
  return new TypeError("fetch failed", { cause: Object.assign(new Error(code), { code }) });
}

test("a 503 is waited out for a call safe to repeat", async () => {
  const { fetch, requests } = script(unavailable, unavailable, ok(OFFERED, 201));
  const result = await new Client("http://hourglass.test", { fetch }).offer("q", "k", 1, { scheduled_at: WHEN });
  assert.equal(result.outcome, "created");
  assert.equal(requests.length, 3);
});

const UNSAFE = {
  "an offer with a delay (a repeat would move the due time)": (c) => c.offer("q", "k", 1, { delay: 5 }),
  "an offer for now (now is a new time at each request)": (c) => c.offer("q", "k", 1),
  "create (a repeat would create a second message)": (c) => c.create("q", 1),
  "delete (a repeat could delete what was offered since)": (c) => c.delete("q", "k"),
  purge: (c) => c.purge("q"),
  redrive: (c) => c.redrive("q.dead"),
  uninstallCron: (c) => c.uninstallCron("q", "n"),
  pause: (c) => c.pause("q"),
  resumeCron: (c) => c.resumeCron("q", "n"),
  "offerMany with an offer for now": (c) =>
    c.offerMany("q", [{ key: "a", payload: 1, scheduled_at: WHEN }, { key: "b", payload: 1 }]),
  "offerMany with a key twice": (c) =>
    c.offerMany("q", [{ key: "a", payload: 1, scheduled_at: WHEN }, { key: "a", payload: 2, scheduled_at: WHEN }]),
  "a poll (a lost answer's claim stands)": (c) => c.poll("q", { max: 5 }),
};

for (const [what, call] of Object.entries(UNSAFE)) {
  test(`a 503 is thrown at once: ${what}`, async () => {
    const { fetch, requests } = script(unavailable, ok(OFFERED));
    const error = await call(new Client("http://hourglass.test", { fetch })).catch((caught) => caught);
    assert.ok(error instanceof Unavailable, String(error));
    assert.equal(requests.length, 1);
    assert.equal(error.retryAfter, 0);
    assert.equal(error.status, 503);
    assert.equal(error.type, PROBLEM.type);
    assert.equal(error.detail, PROBLEM.detail);
  });
}

const SAFE = {
  get: [(c) => c.get("q", "k"), {}],
  "offerMany, every offer timed and each key once": [
    (c) => c.offerMany("q", [{ key: "a", payload: 1, scheduled_at: WHEN }]),
    { results: [], created: 0, updated: 0, ignored: 0 },
  ],
  ackKeys: [(c) => c.ackKeys("q", "l", ["k"]), { acknowledged: [], missing: ["k"] }],
  extend: [(c) => c.extend("q", "l", 30), { lease_expires_at: "2031-01-01T00:00:00.000Z" }],
  releaseKeys: [(c) => c.releaseKeys("q", "l", ["k"]), { released: [], missing: ["k"] }],
  putSettings: [(c) => c.putSettings("q", { max_deliveries: 3 }), {}],
  installCron: [(c) => c.installCron("q", "n", 1, { every: 60 }), {}],
};

for (const [what, [call, answer]] of Object.entries(SAFE)) {
  test(`a 502, 503 or 504 is waited out: ${what}`, async () => {
    const gateway = (status) => () => new Response("bad gateway", { status, headers: { "Retry-After": "0" } });
    const { fetch, requests } = script(gateway(502), unavailable, gateway(504), ok(answer));
    await call(new Client("http://hourglass.test", { fetch }));
    assert.equal(requests.length, 4);
  });
}

test("retries stop after `retries`", async () => {
  const { fetch, requests } = script(unavailable);
  await assert.rejects(new Client("http://hourglass.test", { fetch, retries: 2 }).get("q", "k"), Unavailable);
  assert.equal(requests.length, 3);
});

test("a request that never left is sent again, whatever it is", async () => {
  const { fetch, requests } = script(fetchFailed("ECONNREFUSED"), ok(OFFERED, 201));
  const client = new Client("http://hourglass.test", { fetch, maxRetryWait: 0 });
  assert.equal((await client.create("q", 1)).outcome, "created");
  assert.equal(requests.length, 2);
});

test("a lost answer is sent again only when safe", async () => {
  const reset = script(fetchFailed("ECONNRESET"), ok(OFFERED, 201));
  const error = await new Client("http://hourglass.test", { fetch: reset.fetch }).create("q", 1).catch((e) => e);
  assert.ok(error instanceof ConnectionFailed);
  assert.ok(error instanceof Unavailable);
  assert.equal(error.status, 0);
  assert.equal(error.sent, true);
  assert.equal(error.cause.cause.code, "ECONNRESET");
  assert.equal(reset.requests.length, 1);
  const safe = script(fetchFailed("ECONNRESET"), ok(OFFERED, 201));
  const client = new Client("http://hourglass.test", { fetch: safe.fetch, maxRetryWait: 0 });
  await client.offer("q", "k", 1, { scheduled_at: WHEN });
  assert.equal(safe.requests.length, 2);
});

test("other refusals are thrown at once, as their class", async () => {
  const cases = [
    [400, BadRequest], [401, Unauthorized], [403, Forbidden], [404, NotFound], [408, RequestTimeout],
    [409, Conflict], [413, TooLarge], [422, Invalid], [500, ServerError], [418, HourglassError],
  ];
  for (const [status, kind] of cases) {
    const body = { type: `urn:test:${status}`, title: "Title", status, detail: "what went wrong", extra: 1 };
    const { fetch, requests } = script(() => Response.json(body, { status }));
    const error = await new Client("http://hourglass.test", { fetch }).get("q", "k").catch((e) => e);
    assert.equal(error.constructor, kind, `${status}`);
    assert.equal(error.name, kind.name);
    assert.deepEqual([error.status, error.type, error.title, error.detail], [status, `urn:test:${status}`, "Title", "what went wrong"]);
    assert.deepEqual(error.problem, body);
    assert.equal(requests.length, 1);
  }
  const { fetch } = script(() => new Response("<html>Bad Gateway</html>", { status: 502, statusText: "Bad Gateway" }));
  const proxy = await new Client("http://hourglass.test", { fetch, retries: 0 }).get("q", "k").catch((e) => e);
  assert.ok(proxy instanceof ServerError);
  assert.deepEqual([proxy.status, proxy.type, proxy.title, proxy.detail], [502, "about:blank", "Bad Gateway", "<html>Bad Gateway</html>"]);
});

test("the pause between tries doubles from half a second, ±25%, bounded", async () => {
  for (let attempt = 0; attempt < 4; attempt++) {
    const wait = backoff(attempt);
    assert.ok(wait >= 0.5 * 2 ** attempt * 0.75 && wait <= 0.5 * 2 ** attempt * 1.25, `${wait}`);
  }
  // Three pauses of 0.05 s at most (`maxRetryWait`), where they would take 2.6 s at least.
  const refused = () => new Response(null, { status: 503 });
  const { fetch, requests } = script(refused, refused, refused, ok({}));
  const started = performance.now();
  await new Client("http://hourglass.test", { fetch, maxRetryWait: 0.05 }).get("q", "k");
  assert.equal(requests.length, 4);
  assert.ok(performance.now() - started < 2000);
});

test("nothing listening: ConnectionFailed after the retries, for any call", async () => {
  const port = await freePort();
  const client = new Client(`http://127.0.0.1:${port}`, { retries: 1, maxRetryWait: 0 });
  const error = await client.create("q", 1).catch((e) => e);
  assert.ok(error instanceof ConnectionFailed, String(error));
  assert.equal(error.sent, false);
  assert.match(error.message, /ECONNREFUSED/);
});

describe("a real 503 before a real server", () => {
  let server;
  let proxy;
  let refusals = 0;
  before(async () => {
    server = await startServer("sqlite");
    const target = new URL(server.url);
    // Answers the first `refusals` requests with the service's own 503, then forwards.
    proxy = createServer((incoming, outgoing) => {
      if (refusals > 0) {
        refusals -= 1;
        outgoing.writeHead(503, { "Content-Type": "application/problem+json", "Retry-After": "0" });
        outgoing.end(JSON.stringify(PROBLEM));
        return;
      }
      const onward = forward(
        { host: target.hostname, port: target.port, path: incoming.url, method: incoming.method, headers: incoming.headers },
        (answer) => {
          outgoing.writeHead(answer.statusCode, answer.headers);
          answer.pipe(outgoing);
        },
      );
      incoming.pipe(onward);
    });
    await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
  });
  after(async () => {
    proxy?.closeAllConnections();
    await new Promise((resolve) => (proxy ? proxy.close(resolve) : resolve()));
    await server?.stop();
  });

  test("an offer with a time goes through; one for now is refused; nothing written twice", async () => {
    const client = new Client(`http://127.0.0.1:${proxy.address().port}`);
    refusals = 2;
    assert.equal((await client.offer("real", "timed", 1, { scheduled_at: WHEN })).outcome, "created");
    assert.equal(refusals, 0);
    refusals = 1;
    await assert.rejects(client.offer("real", "now", 1), Unavailable);
    await assert.rejects(client.get("real", "now"), NotFound);
    assert.equal((await client.stats("real")).messages, 1);
  });
});
