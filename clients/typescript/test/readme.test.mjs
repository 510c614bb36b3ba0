// The README's TypeScript blocks, as written: type-checked together (strict, against the
// package as built), then each run as a Node program against a real service, with the
// documented URL pointed at it. A `console.log(…); // shown` prints what the comment shows.
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";
import ts from "typescript";
import { Client } from "hourglass-client";
import { WAIT, deferred, within } from "./support/helpers.mjs";
import { PACKAGE, ROOT, startServer } from "./support/server.mjs";

// The page whose blocks this runs (each marked `<!-- run by: … -->` there, which
// tests/docs/test_examples.py checks).
const PAGE = join(ROOT, "clients/typescript/README.md");
const DOCUMENTED_URL = "http://127.0.0.1:8080";
const run = promisify(execFile);

/** The README's ```ts blocks, in order. */
function blocks() {
  const text = readFileSync(PAGE, "utf8");
  return [...text.matchAll(/^```ts\n(.*?)^```$/gms)].map((match) => match[1]);
}

let server;
let scratch;
let programs;

before(async () => {
  server = await startServer("sqlite");
  // Inside the package, so `import … from "hourglass-client"` finds it (a self-reference).
  scratch = mkdtempSync(join(PACKAGE, "test", ".readme-"));
  programs = blocks().map((source, index) => {
    const file = join(scratch, `block${index}.mts`);
    writeFileSync(file, source);
    const javascript = ts.transpileModule(source.replaceAll(DOCUMENTED_URL, server.url), {
      compilerOptions: { module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022 },
    }).outputText;
    writeFileSync(join(scratch, `block${index}.mjs`), javascript);
    return { source, file, javascript: join(scratch, `block${index}.mjs`) };
  });
});

after(async () => {
  if (scratch) rmSync(scratch, { recursive: true, force: true });
  await server?.stop();
});

test("the README has its three blocks: an offer, a worker, a cron entry", () => {
  assert.equal(programs.length, 3);
  assert.match(programs[0].source, /hourglass\.offer\(/);
  assert.match(programs[1].source, /new Worker\(/);
  assert.match(programs[2].source, /installCron\(/);
});

test("the blocks type-check, strict", () => {
  const program = ts.createProgram(programs.map((block) => block.file), {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    strict: true,
    noEmit: true,
    types: ["node"],
  });
  const problems = ts.getPreEmitDiagnostics(program).map((diagnostic) =>
    ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n"),
  );
  assert.deepEqual(problems, []);
});

/** What a block's `console.log(…); // shown` lines show, in order. */
function shown(source) {
  return [...source.matchAll(/^.*console\.log\(.*\);\s*\/\/ (.+)$/gm)].map((match) => match[1]);
}

test("the offer prints what it shows", async () => {
  const { stdout } = await run(process.execPath, [programs[0].javascript], { timeout: WAIT });
  assert.deepEqual(stdout.trim().split("\n"), shown(programs[0].source));
  assert.equal((await new Client(server.url).stats("reminders")).messages, 0);
});

test("the cron entry prints what it shows", async () => {
  const { stdout } = await run(process.execPath, [programs[2].javascript], { timeout: WAIT });
  assert.deepEqual(stdout.trim().split("\n"), shown(programs[2].source));
});

test("the worker handles a reminder (its offer carrying the trace on), retries an empty one in an hour, and stops on SIGTERM", async () => {
  const hourglass = new Client(server.url);
  const trace = { traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", tracestate: null };
  await hourglass.offer("reminders", "user-42/friday", { user: 42, text: "Your trial ends today" }, { trace });
  await hourglass.offer("reminders", "user-43/friday", { user: 43, text: "" });
  const child = spawn(process.execPath, [programs[1].javascript], { stdio: ["ignore", "pipe", "pipe"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const printed = deferred();
  const retried = deferred();
  let stdout = "";
  let stderr = "";
  child.stdout.setEncoding("utf8").on("data", (text) => {
    stdout += text;
    if (stdout.includes("\n")) printed.resolve();
  });
  child.stderr.setEncoding("utf8").on("data", (text) => {
    stderr += text;
    if (stderr.includes('retry "user-43/friday"')) retried.resolve();
  });
  try {
    await within(Promise.all([printed.promise, retried.promise]), "the worker to handle both");
    child.kill("SIGTERM");
    assert.equal(await within(exited, "the worker to exit"), 0, stderr);
  } finally {
    if (child.exitCode === null) child.kill("SIGKILL");
  }
  assert.equal(stdout, "to user 42: Your trial ends today (delivery 1)\n");
  const sent = await hourglass.get("sent", "user-42/friday");
  assert.deepEqual([sent.payload, sent.trace], [{ user: 42 }, trace]);
  const retry = await hourglass.get("reminders", "user-43/friday");
  assert.equal(retry.state, "scheduled");
  const inSeconds = (Date.parse(retry.scheduled_at) - Date.now()) / 1000;
  assert.ok(inSeconds > 3500 && inSeconds <= 3600, `${inSeconds}`);
  assert.match(stderr, /stopping \(SIGTERM\)/);
});
