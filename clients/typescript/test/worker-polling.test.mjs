// The worker's polls against a real service (SQLite, PostgreSQL): as many messages as it
// has free slots, no more handlers at once than its concurrency, acknowledgements on the
// next poll or by key, what a poll brings as the worker stops given back unstarted, and a
// poll refused for good stopping it.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client, Invalid, NotFound } from "hourglass-client";
import { countdown, deferred, keyed, uniqueQueue, within } from "./support/helpers.mjs";
import { databases, served } from "./support/server.mjs";
import { recordingClient, running, watchingLogger } from "./support/worker.mjs";

const ACKNOWLEDGED = /^debug acknowledged 1 message\(s\) of lock \S+ (on a poll|by key)$/;

/** `response` with a body that runs `interrupt()` before its first bytes are read. */
function stoppingAsRead(response, interrupt) {
  const reader = response.body.getReader();
  let interrupted = false;
  const body = new ReadableStream({
    async pull(controller) {
      if (!interrupted) {
        interrupted = true;
        await interrupt();
      }
      const { done, value } = await reader.read();
      if (done) controller.close();
      else controller.enqueue(value);
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
}

for (const database of databases()) {
  describe(`the worker's polls on ${database.name}`, { skip: database.skip }, () => {
    const live = served(database.name);

    test("polls ask for the free slots, and no more handlers run at once than the concurrency", async () => {
      const queue = uniqueQueue();
      const keys = Array.from({ length: 9 }, (_, index) => `m${index}`);
      await live.hourglass.offerMany(queue, keyed(keys));
      const recorded = recordingClient(live.url);
      const gates = new Map(keys.map((key) => [key, deferred()]));
      const three = countdown(3);
      const all = countdown(9);
      let now = 0;
      let most = 0;
      const handled = [];
      const worker = running(recorded.client, queue, async (message) => {
        now += 1;
        most = Math.max(most, now);
        three.tick();
        await gates.get(message.key).promise;
        now -= 1;
        handled.push(message.key);
        all.tick();
      }, { concurrency: 3, wait: 0, logger: watchingLogger().logger });
      await within(three.promise, "three handlers to start");
      // The worker holds no message it is not working on.
      assert.equal((await live.hourglass.stats(queue)).leased, 3);
      assert.equal(most, 3);
      assert.ok(recorded.polls().every((body) => body.max >= 1 && body.max <= 2), JSON.stringify(recorded.polls()));
      for (const gate of gates.values()) gate.resolve();
      await within(all.promise, "every handler to end");
      await worker.stop();
      assert.equal(most, 3);
      assert.deepEqual([...handled].sort(), keys);
      assert.equal((await live.hourglass.stats(queue)).messages, 0);
    });

    test("a drain acknowledges each message on the next poll, none by itself", async () => {
      const queue = uniqueQueue();
      const keys = ["m0", "m1", "m2", "m3", "m4"];
      await live.hourglass.offerMany(queue, keyed(keys));
      const recorded = recordingClient(live.url);
      const log = watchingLogger();
      const handled = [];
      const worker = running(recorded.client, queue, (message) => handled.push(message.key), {
        concurrency: 1, wait: 0, logger: log.logger,
      });
      await log.until(ACKNOWLEDGED, keys.length);
      await worker.stop();
      assert.deepEqual(handled, keys);
      assert.deepEqual(log.matching(ACKNOWLEDGED).map((line) => line.endsWith("on a poll")), keys.map(() => true));
      assert.deepEqual(recorded.acksOnPolls().map((ack) => ack.keys), keys.map((key) => [key]));
      assert.deepEqual(recorded.acksByKey(), []);
      const finished = [];
      for await (const entry of live.hourglass.iterHistory(queue)) finished.push([entry.key, entry.outcome]);
      assert.deepEqual(finished.sort(), keys.map((key) => [key, "acknowledged"]));
    });

    test("an acknowledgement waits for no long poll: it goes by key", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offer(queue, "a", 1);
      const recorded = recordingClient(live.url);
      const log = watchingLogger();
      const worker = running(recorded.client, queue, () => {}, { concurrency: 1, wait: 20, logger: log.logger });
      await log.until(ACKNOWLEDGED);
      await assert.rejects(live.hourglass.get(queue, "a"), NotFound);
      const stopping = performance.now();
      await worker.stop(); // cuts the waiting poll short
      // Under half the poll's wait, however loaded the machine.
      assert.ok(performance.now() - stopping < 10_000, "the long poll was not cut short");
      assert.match(log.matching(ACKNOWLEDGED)[0], /by key$/);
      assert.deepEqual(recorded.acksByKey(), [{ keys: ["a"] }]);
      assert.deepEqual(recorded.acksOnPolls(), []);
    });

    test("a poll refused for acknowledging (an older service) turns to acknowledging by key", async () => {
      const queue = uniqueQueue();
      const keys = ["a", "b", "c"];
      await live.hourglass.offerMany(queue, keyed(keys));
      let refused = 0;
      const recorded = recordingClient(live.url, {
        refuse(request) {
          if (request.route !== "poll" || !request.body.ack) return undefined;
          refused += 1;
          const problem = { type: "x", title: "refused", status: 422, detail: "ack" };
          return Response.json(problem, { status: 422 });
        },
      });
      const log = watchingLogger();
      const worker = running(recorded.client, queue, () => {}, { concurrency: 1, wait: 0, logger: log.logger });
      await log.until(ACKNOWLEDGED, keys.length);
      await worker.stop();
      assert.equal(refused, 1);
      assert.ok(log.matching(ACKNOWLEDGED).every((line) => line.endsWith("by key")));
      assert.deepEqual(recorded.acksByKey(), keys.map((key) => ({ keys: [key] })));
      const finished = [];
      for await (const entry of live.hourglass.iterHistory(queue)) finished.push(entry.key);
      assert.deepEqual(finished.sort(), keys);
    });

    test("a stop while a poll answers gives back what it did not start", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offerMany(queue, keyed(["a", "b"]));
      let worker;
      const recorded = recordingClient(live.url, {
        answer(route, body) {
          if (route === "poll" && body.messages.length) worker.worker.stop(); // the stop comes as the answer does
          return body;
        },
      });
      const handled = [];
      const log = watchingLogger();
      // One poll for every slot: no second poll out to claim what the first gives back.
      worker = running(recorded.client, queue, (message) => handled.push(message.key), {
        concurrency: 2, batch: 2, wait: 0, logger: log.logger,
      });
      await within(worker.finished, "the worker to stop");
      assert.deepEqual(handled, []);
      assert.equal(recorded.polls().length, 1);
      for (const key of ["a", "b"]) {
        const message = await live.hourglass.get(queue, key);
        assert.deepEqual([message.state, message.deliveries], ["ready", 1], key);
      }
      // Released due now: the next poll takes both.
      const lease = await live.hourglass.poll(queue, { max: 10 });
      assert.deepEqual(lease.messages.map((message) => message.key).sort(), ["a", "b"]);
      await live.hourglass.release(queue, lease.lock_id, { delay: 0 });
      assert.match(log.lines.at(-1), /worker stopped: 0 done, 0 failed, 0 retried, 2 released unstarted, 0 leases lost/);
    });

    test("a stop as a waiting poll's answer comes in reads it whole and gives back its messages", async () => {
      const queue = uniqueQueue();
      await live.hourglass.offerMany(queue, keyed(["a", "b"]));
      let worker;
      const recorded = recordingClient(live.url, {
        // The stop comes once the answer has begun (the service has claimed), as its body
        // is read: cutting the poll short now would leave both leased to a lost lock.
        onAnswer(request, response) {
          if (request.route !== "poll" || request.body.wait === 0) return undefined;
          return stoppingAsRead(response, async () => {
            worker.worker.stop();
            for (let turn = 0; turn < 10; turn++) await new Promise(setImmediate); // its loop ends
          });
        },
      });
      const handled = [];
      const log = watchingLogger();
      worker = running(recorded.client, queue, (message) => handled.push(message.key), {
        concurrency: 2, batch: 2, wait: 5, logger: log.logger,
      });
      await within(worker.finished, "the worker to stop");
      assert.deepEqual(handled, []);
      assert.deepEqual(recorded.polls().map((body) => body.wait), [5]);
      for (const key of ["a", "b"]) {
        const message = await live.hourglass.get(queue, key);
        assert.deepEqual([message.state, message.deliveries], ["ready", 1], key);
      }
      assert.match(log.lines.at(-1), /worker stopped: 0 done, 0 failed, 0 retried, 2 released unstarted, 0 leases lost/);
    });

    test("a poll refused for good stops the worker with its error", async () => {
      const log = watchingLogger();
      const worker = running(live.hourglass, "not a queue!", () => {}, { logger: log.logger });
      const error = await within(worker.finished.catch((caught) => caught), "the worker to stop");
      assert.ok(error instanceof Invalid, String(error));
      assert.ok(log.matching(/^error poll failed: Invalid: 422/).length === 1, log.lines.join("\n"));
    });
  });
}

test("settings outside their bounds are refused", () => {
  const client = new Client("http://hourglass.test");
  for (const options of [{ concurrency: 0 }, { concurrency: 1001 }, { batch: 11 }, { batch: 0 }, { lease: 0.5 }, { wait: 21 }]) {
    assert.throws(() => running(client, "q", () => {}, options), RangeError, JSON.stringify(options));
  }
});
