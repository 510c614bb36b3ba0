// The worker as a process of its own, against a real service (SQLite, PostgreSQL), stopped
// by a real signal in the middle of a batch: what runs finishes (and is acknowledged once),
// what has not started is back in the queue, nothing is lost, held, or handled twice.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import { Client, NotFound } from "hourglass-client";
import { WAIT, deferred, keyed, uniqueQueue, within } from "./support/helpers.mjs";
import { databases, startServer } from "./support/server.mjs";

const SCRIPT = fileURLToPath(new URL("./support/signal-worker.mjs", import.meta.url));
// Every line the worker writes is a log line of its own (no stack traces spill over).
const LOG_LINE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARN|ERROR) hourglass-client\.worker: /;

/** signal-worker.mjs as a process, its handlers reporting to this test over a socket. */
class WorkerProcess {
  static async start(url, queue, { concurrency, lease = 30 }) {
    const folder = mkdtempSync(join(tmpdir(), "hourglass-worker-"));
    const self = new WorkerProcess(folder);
    await new Promise((resolve) => self.listener.listen(join(folder, "handlers"), resolve));
    self.child = spawn(process.execPath, [SCRIPT], {
      env: {
        ...process.env,
        HOURGLASS_URL: url,
        QUEUE: queue,
        CONCURRENCY: String(concurrency),
        LEASE: String(lease),
        HANDLER_SOCKET: join(folder, "handlers"),
        DONE_FILE: self.doneFile,
      },
      stdio: ["ignore", "inherit", "pipe"],
    });
    self.exited = new Promise((resolve) => self.child.once("exit", (code) => resolve(code)));
    self.child.stderr.setEncoding("utf8");
    let partial = "";
    self.child.stderr.on("data", (text) => {
      const lines = (partial + text).split("\n");
      partial = lines.pop();
      for (const line of lines) {
        self.lines.push(line);
        if (line.includes("stopping (")) self.stopping.resolve();
      }
    });
    return self;
  }

  constructor(folder) {
    this.folder = folder;
    this.doneFile = join(folder, "done");
    writeFileSync(this.doneFile, "");
    this.lines = [];
    this.stopping = deferred();
    this.started = []; // [key, socket] of each handler, in the order they started
    this.waiters = [];
    this.listener = createServer((socket) => {
      let text = "";
      socket.setEncoding("utf8");
      socket.on("data", (chunk) => {
        text += chunk;
        if (text.endsWith("\n")) {
          this.started.push([text.trim(), socket]);
          for (const waiter of this.waiters) if (this.started.length >= waiter.count) waiter.done.resolve();
        }
      });
    });
  }

  /** The first `count` handlers to start: their keys and sockets. */
  async handlers(count) {
    const done = deferred();
    this.waiters.push({ count, done });
    if (this.started.length >= count) done.resolve();
    await within(done.promise, `${count} handlers to start`);
    return this.started.slice(0, count);
  }

  async signal(name) {
    this.child.kill(name);
    await within(this.stopping.promise, `the worker to say it stops:\n${this.lines.join("\n")}`);
  }

  async finish() {
    const code = await within(this.exited, "the worker process to exit", WAIT);
    this.listener.close();
    return code;
  }

  done() {
    return readFileSync(this.doneFile, "utf8").split("\n").filter(Boolean);
  }

  cleanUp() {
    if (this.child.exitCode === null) this.child.kill("SIGKILL");
    rmSync(this.folder, { recursive: true, force: true });
  }
}

/**
 * Every key either acknowledged once (its handler finished) or back in the queue, not
 * leased; the messages still there, by key.
 */
async function assertNothingLostOrHeld(hourglass, queue, keys, done) {
  assert.equal(new Set(done).size, done.length, "a message handled twice");
  const acknowledged = [];
  for await (const entry of hourglass.iterHistory(queue)) acknowledged.push(entry.key);
  assert.deepEqual(acknowledged.sort(), [...done].sort());
  const left = new Map();
  for (const key of keys) {
    try {
      const message = await hourglass.get(queue, key);
      assert.ok(!done.includes(key), `${key} finished but is still there`);
      assert.ok(["ready", "scheduled"].includes(message.state), `${key} is ${message.state}`);
      left.set(key, message);
    } catch (error) {
      if (!(error instanceof NotFound)) throw error;
      assert.ok(done.includes(key), `${key} was lost`);
    }
  }
  assert.equal((await hourglass.stats(queue)).leased, 0);
  return left;
}

for (const database of databases()) {
  describe(`a worker process on ${database.name}`, { skip: database.skip }, () => {
    let server;
    let hourglass;
    const processes = [];
    before(async () => {
      server = await startServer(database.name);
      hourglass = new Client(server.url);
    });
    after(async () => {
      for (const worker of processes) worker.cleanUp();
      await server?.stop();
    });

    for (const name of ["SIGTERM", "SIGINT"]) {
      test(`${name} mid-batch: what runs finishes, what has not started is back in the queue`, async () => {
        const queue = uniqueQueue();
        const keys = Array.from({ length: 10 }, (_, index) => `m${index}`);
        await hourglass.offerMany(queue, keyed(keys));
        // A short lease, kept while the handlers wait for their orders (extensions every
        // 2 s, each able to come 4 s late), and one that would not hide a message left
        // held for long.
        const worker = await WorkerProcess.start(server.url, queue, { concurrency: 4, lease: 6 });
        processes.push(worker);
        const running = await worker.handlers(4);
        await worker.signal(name);
        running.forEach(([, socket], index) => socket.end(`${["ok", "ok", "fail", "retry"][index]}\n`));
        assert.equal(await worker.finish(), 0, worker.lines.join("\n"));

        const started = running.map(([key]) => key);
        assert.deepEqual(worker.done().sort(), started.slice(0, 2).sort());
        const left = await assertNothingLostOrHeld(hourglass, queue, keys, worker.done());
        const failed = left.get(started[2]);
        assert.deepEqual([failed.state, failed.deliveries], ["ready", 1]); // released
        assert.equal(left.get(started[3]).state, "scheduled"); // Retry(3600)
        const unstarted = keys.filter((key) => !started.includes(key));
        assert.ok(unstarted.every((key) => left.get(key).state === "ready" && left.get(key).deliveries === 0));
        // Back in the queue: a poll takes every one that is due.
        const lease = await hourglass.poll(queue, { max: 100 });
        assert.deepEqual(lease.messages.map((message) => message.key).sort(), [...unstarted, started[2]].sort());
        await hourglass.release(queue, lease.lock_id, { delay: 0 });

        assert.ok(worker.lines.every((line) => LOG_LINE.test(line)), worker.lines.join("\n"));
        assert.ok(worker.lines.some((line) => line.includes(`stopping (${name})`)));
        assert.match(worker.lines.at(-1), /worker stopped: 2 done, 1 failed, 1 retried/);
      });
    }

    test("a second signal gives the running messages back at once and exits 1", async () => {
      const queue = uniqueQueue();
      const keys = ["a", "b", "c"];
      await hourglass.offerMany(queue, keyed(keys));
      const worker = await WorkerProcess.start(server.url, queue, { concurrency: 2 });
      processes.push(worker);
      const running = await worker.handlers(2);
      await worker.signal("SIGTERM");
      worker.child.kill("SIGTERM");
      assert.equal(await worker.finish(), 1, worker.lines.join("\n")); // without its handlers finishing
      for (const [, socket] of running) socket.destroy();

      const left = await assertNothingLostOrHeld(hourglass, queue, keys, []);
      const runningKeys = running.map(([key]) => key);
      assert.deepEqual(
        Object.fromEntries([...left].map(([key, message]) => [key, message.deliveries])),
        Object.fromEntries(keys.map((key) => [key, runningKeys.includes(key) ? 1 : 0])),
      );
      assert.ok([...left.values()].every((message) => message.state === "ready"));
      assert.ok(worker.lines.every((line) => LOG_LINE.test(line)), worker.lines.join("\n"));
    });
  });
}
