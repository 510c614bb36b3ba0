// The service as a real process for the tests: `python -m app serve` (the repository's own
// app, PYTHONPATH at this checkout) on a free port, on SQLite in a temporary folder or on a
// PostgreSQL database this run creates and drops (as the Python tests do).
import { execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { after, before } from "node:test";
import { promisify } from "node:util";
import { Client } from "hourglass-client";

export const ROOT = fileURLToPath(new URL("../../../../", import.meta.url));
export const PACKAGE = fileURLToPath(new URL("../../", import.meta.url));
export const PYTHON = process.env.HOURGLASS_TEST_PYTHON ?? "python";
const STARTUP_TIMEOUT = 60_000;
const STOP_TIMEOUT = 30_000;
// Push targets a test may name (nothing listens there).
const SERVER_ENVIRONMENT = { HOURGLASS_PUSH_ALLOWED: "http://127.0.0.1:9/hooks/" };

const run = promisify(execFile);

/**
 * The databases the tests run on: SQLite always; PostgreSQL at HOURGLASS_TEST_POSTGRESQL_URL.
 * Without that URL the PostgreSQL tests are skipped with a reason, unless
 * HOURGLASS_TEST_DATABASES asks for PostgreSQL (as .ci/run does): then they fail.
 */
export function databases() {
  const postgresql = process.env.HOURGLASS_TEST_POSTGRESQL_URL;
  const asked = (process.env.HOURGLASS_TEST_DATABASES ?? "").split(",").map((name) => name.trim());
  const list = [{ name: "sqlite", skip: false }];
  if (postgresql || asked.includes("postgresql")) {
    list.push({ name: "postgresql", skip: false });
  } else {
    list.push({
      name: "postgresql",
      skip: "HOURGLASS_TEST_POSTGRESQL_URL is not set: the PostgreSQL runs are skipped",
    });
  }
  return list;
}

export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once("error", reject);
    probe.listen(0, "127.0.0.1", () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

const SCRATCH = `
import sys, psycopg
url, name, action = sys.argv[1:]
with psycopg.connect(url, autocommit=True, dbname="postgres") as connection:
    if action == "create":
        connection.execute(f'CREATE DATABASE "{name}"')
    else:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
`;

/** A new, empty PostgreSQL database of this run's own: its URL and a function that drops it. */
async function scratchPostgresql(purpose) {
  const base = process.env.HOURGLASS_TEST_POSTGRESQL_URL;
  if (!base) {
    throw new Error("HOURGLASS_TEST_DATABASES asks for postgresql, but HOURGLASS_TEST_POSTGRESQL_URL is not set");
  }
  const url = new URL(base);
  const name = `${url.pathname.slice(1) || "hourglass_test"}_${purpose}_${randomBytes(4).toString("hex")}`;
  await run(PYTHON, ["-c", SCRATCH, base, name, "create"]);
  url.pathname = `/${name}`;
  return { url: url.toString(), drop: () => run(PYTHON, ["-c", SCRATCH, base, name, "drop"]) };
}

/**
 * A live service for the suite this is called in: started before its tests and stopped
 * after them. Its tests read `live.url` and `live.hourglass` (a Client of it).
 */
export function served(database, environment = {}) {
  const live = { server: undefined, url: undefined, hourglass: undefined };
  before(async () => {
    live.server = await startServer(database, environment);
    live.url = live.server.url;
    live.hourglass = new Client(live.url);
  });
  after(() => live.server?.stop());
  return live;
}

/**
 * `hourglass serve` on a database of its own (`database`: "sqlite" or "postgresql"),
 * resolved once it accepts requests: `{url, port, process, output, stop()}`.
 */
export async function startServer(database, environment = {}) {
  let databaseUrl;
  let cleanUp;
  if (database === "sqlite") {
    const folder = mkdtempSync(join(tmpdir(), "hourglass-ts-"));
    databaseUrl = `sqlite:///${join(folder, "hourglass.db")}`;
    cleanUp = async () => rmSync(folder, { recursive: true, force: true });
  } else {
    const scratch = await scratchPostgresql("tsclient");
    databaseUrl = scratch.url;
    cleanUp = scratch.drop;
  }
  const port = await freePort();
  const child = spawn(PYTHON, ["-m", "app", "serve", "--port", String(port), "--no-access-log"], {
    cwd: ROOT,
    env: {
      ...process.env,
      PYTHONPATH: [ROOT, join(ROOT, "clients", "python")].join(":"),
      HOURGLASS_DATABASE_URL: databaseUrl,
      ...SERVER_ENVIRONMENT,
      ...environment,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  const output = [];
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const started = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`the server did not start:\n${output.join("")}`)), STARTUP_TIMEOUT);
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text) => {
      output.push(text);
      if (output.join("").includes("Uvicorn running on")) {
        clearTimeout(timer);
        resolve();
      }
    });
    exited.then(() => {
      clearTimeout(timer);
      reject(new Error(`the server exited:\n${output.join("")}`));
    });
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const killer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT);
      await exited;
      clearTimeout(killer);
    }
    await cleanUp();
  };
  try {
    await started;
  } catch (error) {
    await stop();
    throw error;
  }
  return { url: `http://127.0.0.1:${port}`, port, process: child, output, stop };
}
