// The TypeScript worker's side of `bench/worker.py`: one drain of the bench queue in a
// Node process of its own, as a user's worker runs (`Worker` from clients/typescript,
// built by `npm ci` there), with a no-op handler.
//
//     node bench/worker_drain.mjs --url URL --messages N --concurrency C [--batch B]
//
// The handler that sees the N-th message stops the worker; `run()` resolves once
// everything is acknowledged. As bench/worker_drain.py: it prints `ready` once set up,
// drains when a line comes on stdin, then prints one JSON line: messages handled,
// seconds, and this process's CPU seconds meanwhile.
import { once } from "node:events";
import { parseArgs } from "node:util";

const QUEUE = "bench"; // bench/hourglass.py's QUEUE

let library;
try {
  library = await import("../clients/typescript/dist/index.js");
} catch (error) {
  console.error(`the TypeScript client is not built (cd clients/typescript && npm ci): ${error.message}`);
  process.exit(2);
}
const { Client, Worker } = library;

const { values } = parseArgs({
  options: {
    url: { type: "string" },
    messages: { type: "string" },
    concurrency: { type: "string" },
    batch: { type: "string" },
  },
});
const messages = Number(values.messages);
const silent = { debug() {}, info() {}, warn() {}, error: (line) => console.error(line) };
let handled = 0;
const worker = new Worker(
  new Client(values.url),
  QUEUE,
  () => {
    handled += 1;
    if (handled === messages) worker.stop();
  },
  {
    concurrency: Number(values.concurrency),
    ...(values.batch ? { batch: Number(values.batch) } : {}),
    logger: silent,
  },
);

console.log("ready");
process.stdin.setEncoding("utf8");
await once(process.stdin, "data");
process.stdin.pause();
const cpuBefore = process.cpuUsage();
const started = performance.now();
await worker.run({ handleSignals: false });
const seconds = (performance.now() - started) / 1000;
const cpu = process.cpuUsage(cpuBefore);
console.log(
  JSON.stringify({
    messages: handled,
    seconds,
    cpu_seconds: (cpu.user + cpu.system) / 1e6,
    user_seconds: cpu.user / 1e6,
    system_seconds: cpu.system / 1e6,
  }),
);
process.exit(0);
