// Every operation of the client against a real `hourglass serve`, on SQLite and PostgreSQL:
// messages, batches (and their trace context), lists, polls and locks, queues, settings,
// redrive and cron; and the service's refusals as the client's errors.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, Forbidden, Invalid, NotFound, TooLarge, Unauthorized, BadRequest } from "hourglass-client";
import { uniqueQueue } from "./support/helpers.mjs";
import { databases, served } from "./support/server.mjs";

const FRIDAY = new Date("2031-11-28T07:00:00.000Z");

/** The keys k<from>…k<to - 1>, five digits each. */
function keys(from, to) {
  return Array.from({ length: to - from }, (_, index) => `k${String(from + index).padStart(5, "0")}`);
}

for (const database of databases()) {
  describe(`the client on ${database.name}`, { skip: database.skip }, () => {
    const live = served(database.name);

    test("offer, ignore, update, get and delete", async () => {
      const queue = uniqueQueue();
      const created = await live.hourglass.offer(queue, "user-42/friday", { text: "hi" }, { scheduled_at: FRIDAY });
      assert.deepEqual(created, {
        queue, key: "user-42/friday", outcome: "created", scheduled_at: "2031-11-28T07:00:00.000Z",
      });
      const again = await live.hourglass.offer(queue, "user-42/friday", { text: "hi" }, { scheduled_at: "2031-11-28T09:00:00+02:00" });
      assert.equal(again.outcome, "ignored");
      const kept = await live.hourglass.offer(queue, "user-42/friday", { text: "new" }, { delay: 60, if_exists: "ignore" });
      assert.equal(kept.outcome, "ignored");
      assert.equal(kept.scheduled_at, "2031-11-28T07:00:00.000Z");
      const updated = await live.hourglass.update(queue, "user-42/friday", { text: "new" }, { delay: 3600, priority: 7, group: "g" });
      assert.equal(updated.outcome, "updated");

      const message = await live.hourglass.get(queue, "user-42/friday");
      assert.deepEqual([message.queue, message.key, message.payload], [queue, "user-42/friday", { text: "new" }]);
      assert.equal(message.state, "scheduled");
      assert.equal(message.priority, 7);
      assert.equal(message.group, "g");
      const due = Date.parse(message.scheduled_at) - Date.now();
      assert.ok(due > 3500_000 && due <= 3600_000, `due in ${due} ms`);

      await live.hourglass.delete(queue, "user-42/friday");
      const missing = await live.hourglass.get(queue, "user-42/friday").catch((error) => error);
      assert.ok(missing instanceof NotFound);
      assert.equal(missing.status, 404);
      assert.equal(missing.type, "urn:hourglass:problem:message-not-found");
      assert.equal(missing.title, "Not Found");
      assert.ok(missing.detail);
      assert.equal(missing.problem.status, 404);
      await assert.rejects(live.hourglass.delete(queue, "user-42/friday"), NotFound);
      await assert.rejects(live.hourglass.update(queue, "user-42/friday", 1), NotFound);
    });

    test("create makes up a key; expiry goes with the message", async () => {
      const queue = uniqueQueue();
      const result = await live.hourglass.create(queue, [1, 2, 3], { ttl: 3600 });
      assert.equal(result.outcome, "created");
      const message = await live.hourglass.get(queue, result.key);
      assert.deepEqual(message.payload, [1, 2, 3]);
      assert.ok(message.expires_at);
      await live.hourglass.offer(queue, "later", 1, { expires_at: new Date(Date.now() + 3600_000) });
      assert.ok((await live.hourglass.get(queue, "later")).expires_at);
    });

    test("keys reach the service as they are", async () => {
      const queue = uniqueQueue();
      for (const key of ["a/b/c", "100%", "a?b#c", "with space", "...", ".a", "ü/€", "%2F", "a//b", "%2e"]) {
        await live.hourglass.offer(queue, key, key);
        assert.equal((await live.hourglass.get(queue, key)).payload, key);
        const keys = [];
        for await (const message of live.hourglass.iterMessages(queue)) keys.push(message.key);
        assert.deepEqual(keys, [key]);
        await live.hourglass.delete(queue, key);
      }
      // Resolved as directories by fetch's URL parser: refused before anything is sent.
      for (const key of [".", ".."]) {
        assert.throws(() => live.hourglass.offer(queue, key, 1), TypeError);
      }
    });

    test("refusals are errors with the problem; nothing is written", async () => {
      const queue = uniqueQueue();
      const invalid = await live.hourglass.offer("not a queue!", "k", 1).catch((error) => error);
      assert.ok(invalid instanceof Invalid);
      assert.equal(invalid.status, 422);
      assert.ok(Array.isArray(invalid.problem.errors) && invalid.problem.errors.length);
      const tooLarge = await live.hourglass.offer(queue, "k", "x".repeat(300_000)).catch((error) => error);
      assert.ok(tooLarge instanceof TooLarge);
      assert.equal(tooLarge.status, 413);
      await assert.rejects(live.hourglass.offer(queue, "k", 1, { scheduled_at: "2030-01-01T00:00:00" }), Invalid);
      assert.throws(() => live.hourglass.offer(queue, "k", 1, { scheduled_at: FRIDAY, delay: 5 }), /not both/);
      assert.throws(() => live.hourglass.offer(queue, "k", 1, { expires_at: FRIDAY, ttl: 5 }), /not both/);
      const purge = await live.hourglass.send({
        operation: "purgeQueue", method: "DELETE", path: `/v1/queues/${queue}`, query: { confirm: "other" },
        repeatable: false, read: async () => 0,
      }).catch((error) => error);
      assert.ok(purge instanceof BadRequest);
      assert.equal(purge.status, 400);
      assert.equal((await live.hourglass.stats(queue)).messages, 0);
    });

    test("offerMany sends batches of a thousand, outcomes in input order", async () => {
      const queue = uniqueQueue();
      const offers = keys(0, 2500).map((key, index) => ({ key, payload: index, scheduled_at: FRIDAY }));
      const result = await live.hourglass.offerMany(queue, offers);
      assert.equal(result.created, 2500);
      assert.deepEqual(result.results.map((item) => item.key), offers.map((item) => item.key));
      const again = await live.hourglass.offerMany(queue, offers.slice(0, 3), { ifExists: "ignore", batchSize: 2 });
      assert.deepEqual([again.created, again.updated, again.ignored], [0, 0, 3]);
      assert.equal((await live.hourglass.stats(queue)).scheduled, 2500);
      const page = await live.hourglass.listMessages(queue, { limit: 10, prefix: "k001" });
      assert.deepEqual(page.items.map((message) => message.key), keys(100, 110));
      assert.ok(page.next);
      const next = await live.hourglass.listMessages(queue, { limit: 10, prefix: "k001", cursor: page.next });
      assert.deepEqual(next.items.map((message) => message.key), keys(110, 120));
      assert.equal(await live.hourglass.purge(queue), 2500);
      await assert.rejects(live.hourglass.offerMany(queue, [], { batchSize: 1001 }), RangeError);
    });

    test("a batch's trace context goes with every message of it, in every batch", async () => {
      const queue = uniqueQueue();
      const trace = { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: "a=1" };
      await live.hourglass.offerMany(queue, keys(0, 3).map((key) => ({ key, payload: key })), { trace, batchSize: 2 });
      for (const key of keys(0, 3)) assert.deepEqual((await live.hourglass.get(queue, key)).trace, trace, key);
    });

    test("poll, extend, acknowledge by key, release and acknowledge a lock", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offerMany(queue, ["a", "b", "c", "d"].map((key) => ({ key, payload: key })));
      const lease = await live.hourglass.poll(queue, { max: 3, lease: 60 });
      assert.equal(lease.messages.length, 3);
      assert.ok(lease.lock_id);
      assert.ok(lease.messages.every((message) => message.delivery === "first" && message.deliveries === 1));
      const extended = await live.hourglass.extend(queue, lease.lock_id, 120);
      assert.ok(Date.parse(extended) - Date.now() > 100_000);
      const [first, second, third] = lease.messages.map((message) => message.key);
      assert.deepEqual(await live.hourglass.ackKeys(queue, lease.lock_id, [first, "nope"]), {
        acknowledged: [first], missing: ["nope"],
      });
      assert.deepEqual(await live.hourglass.releaseKeys(queue, lease.lock_id, [second], { delay: 3600 }), {
        released: [second], missing: [],
      });
      assert.equal((await live.hourglass.get(queue, second)).state, "scheduled");
      assert.equal(await live.hourglass.release(queue, lease.lock_id), true);
      assert.equal(await live.hourglass.release(queue, lease.lock_id), false);
      assert.equal((await live.hourglass.get(queue, third)).state, "ready");

      const next = await live.hourglass.poll(queue, { max: 5 });
      assert.equal(next.messages.length, 2);
      assert.ok(next.messages.some((message) => message.delivery === "redelivery"));
      const after = await live.hourglass.poll(queue, { ack: next.lock_id });
      assert.deepEqual([...after.acknowledged].sort(), next.messages.map((m) => m.key).sort());
      assert.deepEqual(after.missing, []);
      assert.equal(after.lock_id, null);
      assert.equal(await live.hourglass.ack(queue, next.lock_id), false);
      await assert.rejects(live.hourglass.extend(queue, next.lock_id, 30), NotFound);

      await live.hourglass.releaseKeys(queue, lease.lock_id, [second], { delay: 0 }).catch(() => null);
      await live.hourglass.update(queue, second, "again", { delay: 0 });
      const last = await live.hourglass.poll(queue);
      assert.deepEqual(last.messages.map((message) => message.key), [second]);
      const acked = await live.hourglass.poll(queue, { ack: { lock_id: last.lock_id, keys: [second] }, wait: 0 });
      assert.deepEqual([acked.acknowledged, acked.missing], [[second], []]);
      assert.equal(await live.hourglass.ack(queue, last.lock_id), false);
      const history = [];
      for await (const entry of live.hourglass.iterHistory(queue, { pageSize: 1 })) history.push(entry.key);
      assert.deepEqual(history.sort(), ["a", "b", "c", "d"]);
      const page = await live.hourglass.history(queue, { key: first, outcome: "acknowledged" });
      assert.deepEqual(page.items.map((entry) => [entry.key, entry.deliveries]), [[first, 1]]);
    });

    test("a long poll is cut short by its signal", async () => {
      const queue = uniqueQueue();
      const cut = new AbortController();
      const poll = live.hourglass.poll(queue, { wait: 20, signal: cut.signal });
      setImmediate(() => cut.abort(new Error("enough")));
      await assert.rejects(poll, /enough/);
    });

    test("queues, stats, pause, resume and purge", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "k", 1);
      const stats = await live.hourglass.stats(queue);
      assert.deepEqual([stats.queue, stats.messages, stats.ready, stats.paused], [queue, 1, 1, false]);
      assert.ok((await live.hourglass.queues()).some((item) => item.queue === queue));
      const paused = await live.hourglass.pause(queue);
      assert.equal(paused.paused, true);
      assert.ok(paused.paused_at);
      assert.equal((await live.hourglass.poll(queue)).messages.length, 0);
      assert.equal((await live.hourglass.resume(queue)).paused, false);
      assert.equal(await live.hourglass.purge(queue), 1);
    });

    test("settings and redrive", async () => {
      const queue = uniqueQueue();
      const settings = await live.hourglass.putSettings(queue, {
        default_lease: 45, max_deliveries: 1, retry: { initial_delay: 5, max_delay: 60, multiplier: 2, jitter: 0 },
        group_concurrency: 2, max_leased: 100, rate: { limit: 10, period: 1 },
      });
      assert.equal(settings.default_lease, 45);
      assert.deepEqual(settings.retry, { initial_delay: 5, max_delay: 60, multiplier: 2, jitter: 0 });
      assert.deepEqual(await live.hourglass.getSettings(queue), settings);
      await live.hourglass.offer(queue, "k", 1);
      const lease = await live.hourglass.poll(queue);
      await live.hourglass.release(queue, lease.lock_id, { delay: 0 });
      assert.equal((await live.hourglass.poll(queue)).lock_id, null); // its second delivery would pass the limit
      const dead = settings.dead_letter_queue;
      assert.equal((await live.hourglass.get(dead, "k")).dead_lettered_from, queue);
      assert.deepEqual(await live.hourglass.redrive(dead, { max: 5 }), { moved: 1, skipped: 0, forbidden: 0 });
      assert.equal((await live.hourglass.get(queue, "k")).state, "ready");
      assert.equal((await live.hourglass.putSettings(queue)).retry, null);
    });

    test("cron: install, list, read, pause, resume and uninstall", async () => {
      const queue = uniqueQueue();
      const schedule = { daily: ["02:00"], timezone: "Europe/Bucharest" };
      const installed = await live.hourglass.installCron(queue, "nightly/sales", { report: "sales" }, schedule);
      assert.equal(installed.outcome, "created");
      assert.equal(installed.next_runs.length, 5);
      assert.equal((await live.hourglass.installCron(queue, "nightly/sales", { report: "sales" }, schedule)).outcome, "unchanged");
      await live.hourglass.installCron(queue, "every-minute", null, { every: 60 });
      const names = (await live.hourglass.cronEntries(queue)).map((entry) => entry.name).sort();
      assert.deepEqual(names, ["every-minute", "nightly/sales"]);
      const entry = await live.hourglass.getCron(queue, "nightly/sales", { after: new Date("2027-03-26T12:00:00Z"), count: 3 });
      assert.deepEqual(entry.next_runs, [
        "2027-03-27T00:00:00.000Z", "2027-03-28T00:00:00.000Z", "2027-03-28T23:00:00.000Z",
      ]);
      assert.equal(entry.config_hash, installed.config_hash);
      assert.equal((await live.hourglass.pauseCron(queue, "nightly/sales")).paused, true);
      assert.equal((await live.hourglass.resumeCron(queue, "nightly/sales")).paused, false);
      await live.hourglass.uninstallCron(queue, "nightly/sales");
      await assert.rejects(live.hourglass.getCron(queue, "nightly/sales"), NotFound);
      await assert.rejects(live.hourglass.uninstallCron(queue, "nightly/sales"), NotFound);
      await assert.rejects(live.hourglass.pauseCron(queue, "nightly/sales"), NotFound);
    });
  });
}

describe("a service with tokens", () => {
  const live = served("sqlite", { HOURGLASS_API_TOKENS: "secret=mine-*" });

  test("no token is Unauthorized, a queue outside the token's glob Forbidden", async () => {
    const anonymous = new Client(live.url, { token: null });
    const unauthorized = await anonymous.stats("mine-1").catch((error) => error);
    assert.ok(unauthorized instanceof Unauthorized);
    assert.equal(unauthorized.status, 401);
    const client = new Client(live.url, { token: "secret" });
    assert.equal((await client.stats("mine-1")).messages, 0);
    const forbidden = await client.stats("theirs").catch((error) => error);
    assert.ok(forbidden instanceof Forbidden);
    assert.equal(forbidden.status, 403);
  });
});
