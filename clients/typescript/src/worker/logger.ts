/** How a worker reports: one line per event, to a logger of the caller's or to stderr. */

export interface Logger {
  debug(message: string): void;
  info(message: string): void;
  warn(message: string): void;
  error(message: string): void;
}

type Level = "debug" | "info" | "warn" | "error";
const LEVELS: Level[] = ["debug", "info", "warn", "error"];

/**
 * A logger writing `<time> <LEVEL> hourglass-client.worker: <message>` lines to stderr, from
 * `level` up (default: HOURGLASS_LOG_LEVEL, else info).
 */
export function stderrLogger(level?: Level): Logger {
  const least = LEVELS.indexOf(level ?? chosenLevel());
  const line = (at: Level) => (message: string) => {
    if (LEVELS.indexOf(at) >= least) {
      process.stderr.write(`${new Date().toISOString()} ${at.toUpperCase()} hourglass-client.worker: ${message}\n`);
    }
  };
  return { debug: line("debug"), info: line("info"), warn: line("warn"), error: line("error") };
}

function chosenLevel(): Level {
  const asked = (process.env["HOURGLASS_LOG_LEVEL"] ?? "").toLowerCase();
  return (LEVELS as string[]).includes(asked) ? (asked as Level) : "info";
}

/** `text` fit for a log line of its own (a line break shown as `\n`). */
export function oneLine(text: string): string {
  return text.replace(/\r/g, "\\r").replace(/\n/g, "\\n");
}

/** An error as a log line names it: its class and message. */
export function described(error: unknown): string {
  if (error instanceof Error) return oneLine(error.message ? `${error.name}: ${error.message}` : error.name);
  return oneLine(`thrown: ${String(error)}`);
}
