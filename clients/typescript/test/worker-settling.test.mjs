// The worker's leases and settling against a real service (SQLite, PostgreSQL): a lease
// kept while a handler outlasts it, each message settled on its own, a thrown error
// released as the queue's retry says or after a Retry's delay, and the producer's trace
// context handed to the handler, which passes it on.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Retry } from "hourglass-client";
import { countdown, deferred, historyOf, uniqueQueue, within } from "./support/helpers.mjs";
import { databases, served } from "./support/server.mjs";
import { recordingClient, running, watchingLogger } from "./support/worker.mjs";

const TRACE = {
  traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
  tracestate: "vendor=value",
};

/** Seconds from now until `time`. */
function secondsUntil(time) {
  return (Date.parse(time) - Date.now()) / 1000;
}

for (const database of databases()) {
  describe(`the worker's settling on ${database.name}`, { skip: database.skip }, () => {
    const live = served(database.name);

    test("a handler that outlasts its lease keeps its message: the lease is extended", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "slow", 1);
      // A 3 s lease, extended every third of a lease while the handler runs past it (a
      // lease survives an extension up to two thirds of a lease late: load on the machine
      // does not take it).
      const LEASE = 3;
      const extended = countdown(2);
      const recorded = recordingClient(live.url, {
        onRequest: (request) => request.method === "PATCH" && extended.tick(),
      });
      const started = deferred();
      const finish = deferred();
      const log = watchingLogger();
      let leaseEnd;
      const worker = running(recorded.client, queue, async (message) => {
        leaseEnd = message.lease_expires_at;
        started.resolve();
        await finish.promise;
      }, { concurrency: 1, lease: LEASE, wait: 0, logger: log.logger });
      await within(started.promise, "the handler to start");
      // Another worker's poll waits 2.5 leases: it would get the message the moment its
      // lease lapsed. The message outlasting it took two extensions at least.
      const competing = await live.hourglass.poll(queue, { wait: 2.5 * LEASE });
      assert.equal(competing.lock_id, null);
      await within(extended.promise, "two extensions");
      assert.ok(secondsUntil(leaseEnd) < 0, "the first lease has not ended yet");
      assert.equal((await live.hourglass.get(queue, "slow")).state, "leased");
      finish.resolve();
      await log.until(/^debug acknowledged 1 message/);
      await worker.stop();
      assert.deepEqual(await historyOf(live.hourglass, queue, "slow"), [["acknowledged", 1]]);
      assert.deepEqual(log.matching(/lease lost/), []);
    });

    test("each message is settled on its own: acknowledged, or released as the queue's retry or a Retry says", async () => {
      const queue = uniqueQueue();
      await live.hourglass.putSettings(queue, {
        retry: { initial_delay: 1000, max_delay: 1000, multiplier: 1, jitter: 0 },
      });
      const orders = { ok: null, fails: new Error("no luck"), later: new Retry(600, "not yet"), queue: new Retry() };
      await live.hourglass.offerMany(queue, Object.keys(orders).map((key) => ({ key, payload: key })));
      const log = watchingLogger();
      const settled = /^(info done|warn failed|info retry) /;
      const worker = running(live.hourglass, queue, (message) => {
        const error = orders[message.payload];
        if (error) throw error;
      }, { concurrency: 4, wait: 0, logger: log.logger });
      await log.until(settled, 4);
      await worker.stop();
      await assert.rejects(live.hourglass.get(queue, "ok"));
      const fails = await live.hourglass.get(queue, "fails");
      assert.equal(fails.state, "scheduled");
      assert.ok(Math.abs(secondsUntil(fails.scheduled_at) - 1000) < 30, fails.scheduled_at);
      const later = await live.hourglass.get(queue, "later");
      assert.ok(Math.abs(secondsUntil(later.scheduled_at) - 600) < 30, later.scheduled_at);
      const decided = await live.hourglass.get(queue, "queue");
      assert.ok(Math.abs(secondsUntil(decided.scheduled_at) - 1000) < 30, decided.scheduled_at);
      assert.equal((await live.hourglass.stats(queue)).leased, 0);
      assert.match(log.matching(/^warn failed/)[0], /^warn failed "fails" \(delivery 1\) after \d+ ms: Error: no luck; released/);
      assert.match(log.matching(/"later"/)[0], /^info retry "later" \(delivery 1\): not yet; due again in 600 s$/);
      assert.match(log.matching(/"queue"/)[0], /due again when the queue's retry says$/);
      assert.match(log.lines.at(-1), /worker stopped: 1 done, 1 failed, 2 retried, 0 released unstarted, 0 leases lost/);
    });

    test("a slow or failing handler never blocks the others", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offerMany(queue, ["slow", "bad", "a", "b", "c"].map((key) => ({ key, payload: key })));
      const finish = deferred();
      const others = countdown(3);
      const log = watchingLogger();
      const worker = running(live.hourglass, queue, async (message) => {
        if (message.key === "slow") return finish.promise;
        if (message.key === "bad") throw new TypeError("broken");
        others.tick();
      }, { concurrency: 3, wait: 0, logger: log.logger });
      await within(others.promise, "the other handlers");
      finish.resolve();
      await log.until(/^info done "slow"/);
      await worker.stop();
      assert.equal((await live.hourglass.stats(queue)).messages, 1); // "bad", released
      assert.equal((await live.hourglass.get(queue, "bad")).state, "ready");
    });

    test("a log line per event, each one line", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "k", 1);
      const log = watchingLogger();
      const worker = running(live.hourglass, queue, () => {
        throw new Error("two\nlines");
      }, { concurrency: 1, wait: 0, logger: log.logger });
      await log.until(/^warn failed/);
      await worker.stop();
      assert.ok(log.lines.every((line) => !line.includes("\n")), log.lines.join("\n"));
      assert.match(log.matching(/^warn failed/)[0], /Error: two\\nlines/);
    });

    test("the producer's trace context reaches the handler", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "traced", 1, { trace: TRACE });
      await live.hourglass.offer(queue, "untraced", 2);
      assert.deepEqual((await live.hourglass.get(queue, "traced")).trace, TRACE);
      const seen = new Map();
      const both = countdown(2);
      const onward = uniqueQueue();
      const worker = running(live.hourglass, queue, async (message, { trace }) => {
        seen.set(message.key, trace);
        await live.hourglass.offer(onward, message.key, 1, { trace }); // passed on, null or not
        both.tick();
      }, { concurrency: 2, wait: 0, logger: watchingLogger().logger });
      await within(both.promise, "both handlers");
      await worker.stop();
      assert.deepEqual(seen.get("traced"), TRACE);
      assert.equal(seen.get("untraced"), null);
      assert.deepEqual((await live.hourglass.get(onward, "traced")).trace, TRACE);
      assert.equal((await live.hourglass.get(onward, "untraced")).trace, null);
    });

    test("a handler is handed its message's trace and lock", async () => {
      // The poll's answer carries a trace here whatever the service stores: what the
      // worker does with a message's `trace` field.
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "k", 1);
      const recorded = recordingClient(live.url, {
        answer: (route, body) =>
          route === "poll" ? { ...body, messages: body.messages.map((message) => ({ ...message, trace: TRACE })) } : body,
      });
      const handed = deferred();
      const worker = running(recorded.client, queue, (message, context) => handed.resolve({ message, context }), {
        concurrency: 1, wait: 0, logger: watchingLogger().logger,
      });
      const { message, context } = await within(handed.promise, "the handler");
      await worker.stop();
      assert.deepEqual(context.trace, TRACE);
      assert.equal(message.key, "k");
      assert.equal(typeof context.lockId, "string");
      assert.equal(context.signal.aborted, false);
    });
  });
}
