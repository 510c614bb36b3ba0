// Every /v1 operation of openapi.yaml is a method of the client: the README's table names
// one for each operation id, the method exists, and calling it sends that operation's
// method and path (to a recording fetch: no server).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { Client } from "hourglass-client";
import { matches, operations } from "./support/openapi.mjs";
import { PACKAGE } from "./support/server.mjs";

const MESSAGE = {
  queue: "q", key: "k", payload: 1, scheduled_at: "2031-01-01T00:00:00.000Z",
  scheduled_at_initially: "2031-01-01T00:00:00.000Z", created_at: "2031-01-01T00:00:00.000Z",
  state: "ready", deliveries: 0, dead_lettered_from: null, priority: 0, group: null,
  expires_at: null, expired: false,
};

// A call of each method, and an answer of the shape it reads.
const CALLS = {
  offer: [(c) => c.offer("q", "k", 1), { outcome: "created" }],
  update: [(c) => c.update("q", "k", 1), { outcome: "updated" }],
  create: [(c) => c.create("q", 1), { outcome: "created" }],
  offerMany: [(c) => c.offerMany("q", [{ key: "k", payload: 1 }]), { results: [], created: 0, updated: 0, ignored: 0 }],
  get: [(c) => c.get("q", "k"), MESSAGE],
  delete: [(c) => c.delete("q", "k"), null],
  listMessages: [(c) => c.listMessages("q"), { messages: [], next: null }],
  iterMessages: [async (c) => { for await (const _ of c.iterMessages("q")); }, { messages: [], next: null }],
  history: [(c) => c.history("q"), { entries: [], next: null }],
  iterHistory: [async (c) => { for await (const _ of c.iterHistory("q")); }, { entries: [], next: null }],
  poll: [(c) => c.poll("q"), { lock_id: null, messages: [] }],
  ack: [(c) => c.ack("q", "l"), null],
  ackKeys: [(c) => c.ackKeys("q", "l", ["k"]), { acknowledged: ["k"], missing: [] }],
  extend: [(c) => c.extend("q", "l", 30), { lease_expires_at: "2031-01-01T00:00:00.000Z" }],
  release: [(c) => c.release("q", "l"), null],
  releaseKeys: [(c) => c.releaseKeys("q", "l", ["k"]), { released: ["k"], missing: [] }],
  queues: [(c) => c.queues(), { queues: [] }],
  stats: [(c) => c.stats("q"), {}],
  pause: [(c) => c.pause("q"), {}],
  resume: [(c) => c.resume("q"), {}],
  purge: [(c) => c.purge("q"), { deleted: 0 }],
  getSettings: [(c) => c.getSettings("q"), {}],
  putSettings: [(c) => c.putSettings("q", {}), {}],
  redrive: [(c) => c.redrive("q"), { moved: 0, skipped: 0, forbidden: 0 }],
  installCron: [(c) => c.installCron("q", "n", 1, { every: 60 }), { outcome: "created" }],
  cronEntries: [(c) => c.cronEntries("q"), { entries: [] }],
  getCron: [(c) => c.getCron("q", "n"), {}],
  pauseCron: [(c) => c.pauseCron("q", "n"), {}],
  resumeCron: [(c) => c.resumeCron("q", "n"), {}],
  uninstallCron: [(c) => c.uninstallCron("q", "n"), null],
};

/** The README's table: operation id → the client methods it names. */
function readmeTable() {
  const table = new Map();
  const text = readFileSync(join(PACKAGE, "README.md"), "utf8");
  for (const match of text.matchAll(/^\| `(\w+)` \| (.+?) \|/gm)) {
    table.set(match[1], [...match[2].matchAll(/`(\w+)\(/g)].map((call) => call[1]));
  }
  return table;
}

async function requestOf(name) {
  const sent = [];
  const [call, answer] = CALLS[name];
  const fetch = async (url, init) => {
    sent.push({ method: init.method, pathname: new URL(url).pathname });
    return answer === null
      ? new Response(null, { status: 204 })
      : Response.json(answer, { status: 200 });
  };
  await call(new Client("http://hourglass.test", { fetch }));
  assert.equal(sent.length, 1, `${name} sent ${sent.length} requests`);
  return sent[0];
}

test("every /v1 operation of openapi.yaml has a client method that sends it", async () => {
  const table = readmeTable();
  const v1 = operations().filter((operation) => operation.path.startsWith("/v1/"));
  assert.equal(v1.length, 27);
  for (const { operationId, method, path } of v1) {
    const names = table.get(operationId);
    assert.ok(names?.length, `the README's table has no method for ${operationId}`);
    for (const name of names) {
      assert.equal(typeof Client.prototype[name], "function", `Client has no ${name}`);
      const request = await requestOf(name);
      assert.equal(request.method, method, `${name} for ${operationId}`);
      assert.ok(matches(path, request.pathname), `${name} sent ${request.pathname}, not ${path}`);
    }
  }
});

test("every method of the client is an operation of the table", () => {
  const named = new Set([...readmeTable().values()].flat());
  const methods = Object.getOwnPropertyNames(Client.prototype).filter(
    (name) => name !== "constructor" && name !== "send",
  );
  assert.deepEqual(methods.filter((name) => !named.has(name)), []);
  assert.deepEqual(Object.keys(CALLS).sort(), [...named].sort());
});
