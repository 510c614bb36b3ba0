// A worker process for test/worker-process.test.mjs, as a user would run one: `node
// signal-worker.mjs` with HOURGLASS_URL, QUEUE, CONCURRENCY and LEASE. Each handler
// reports its message's key to the test over the UNIX socket HANDLER_SOCKET and does what
// the test answers: `ok` (return, after writing the key to DONE_FILE), `retry` (throw
// Retry(3600)) or anything else (throw).
import { appendFileSync } from "node:fs";
import { connect } from "node:net";
import { Client, Retry, Worker } from "hourglass-client";

function order(key) {
  return new Promise((resolve, reject) => {
    const socket = connect(process.env.HANDLER_SOCKET, () => socket.write(`${key}\n`));
    let text = "";
    socket.setEncoding("utf8");
    socket.on("data", (chunk) => (text += chunk));
    socket.on("end", () => resolve(text.trim()));
    socket.on("error", reject);
  });
}

async function handler(message) {
  const told = await order(message.key);
  if (told === "ok") appendFileSync(process.env.DONE_FILE, `${message.key}\n`);
  else if (told === "retry") throw new Retry(3600, "told to retry");
  else throw new Error(`told to fail (${JSON.stringify(told)})`);
}

const worker = new Worker(new Client(), process.env.QUEUE, handler, {
  concurrency: Number(process.env.CONCURRENCY),
  lease: Number(process.env.LEASE),
});
await worker.run();
process.exit(worker.abandoned ? 1 : 0);
