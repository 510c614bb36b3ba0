/** Cron entries: install, list, read, pause, resume and uninstall a queue's recurring schedules. */

import type { CronEntry, CronInstallResult, CronOptions, CronReadOptions } from "../types.js";
import type { components } from "../schema.js";
import { type Call, formatTime, present, queuePath, readJson, readJsonAs, readNothing, segment } from "./call.js";

/**
 * Install (or change) a recurring schedule: exactly one of `cron` (a 5-field expression),
 * `every` (seconds) and `daily` (`["HH:MM", …]`), read in `timezone` (IANA; default UTC).
 * Repeated when need be: it replaces the entry with the same thing.
 */
export function installCron(
  queue: string,
  name: string,
  payload: unknown,
  schedule: CronOptions,
): Call<CronInstallResult> {
  return {
    operation: "installCronEntry",
    method: "PUT",
    path: queuePath(queue, "cron", segment(name)),
    // A payload of null is a payload.
    body: { ...present({ ...schedule }), payload },
    repeatable: true,
    read: readJson<CronInstallResult>(),
  };
}

/** The queue's cron entries, each with its next runs. */
export function cronEntries(queue: string): Call<CronEntry[]> {
  return {
    operation: "listCronEntries",
    method: "GET",
    path: queuePath(queue, "cron"),
    repeatable: true,
    read: readJsonAs((data: components["schemas"]["CronListResponse"]) => data.entries),
  };
}

/** One cron entry, with its next `count` runs (default 5) after `after` (default now). */
export function getCron(queue: string, name: string, options: CronReadOptions = {}): Call<CronEntry> {
  const query = present({
    after: options.after === undefined ? undefined : formatTime(options.after),
    count: options.count,
  }) as Record<string, string | number>;
  return {
    operation: "getCronEntry",
    method: "GET",
    path: queuePath(queue, "cron", segment(name)),
    query,
    repeatable: true,
    read: readJson<CronEntry>(),
  };
}

/**
 * Pause a cron entry: it installs no runs, and its runs not yet delivered go; `NotFound`
 * when there is none. Not repeated, as a queue's pause and resume: one sent again after
 * the opposite made meanwhile would undo it.
 */
export function pauseCron(queue: string, name: string): Call<CronEntry> {
  return cronSwitch(queue, name, "pause");
}

/** Resume a cron entry: it installs its runs from now on, none of those it missed. */
export function resumeCron(queue: string, name: string): Call<CronEntry> {
  return cronSwitch(queue, name, "resume");
}

function cronSwitch(queue: string, name: string, action: "pause" | "resume"): Call<CronEntry> {
  return {
    operation: action === "pause" ? "pauseCronEntry" : "resumeCronEntry",
    method: "POST",
    path: queuePath(queue, "cron", segment(name), action),
    repeatable: false,
    read: readJson<CronEntry>(),
  };
}

/** Delete a cron entry and its runs not yet delivered; `NotFound` when there is none. */
export function uninstallCron(queue: string, name: string): Call<void> {
  return {
    operation: "uninstallCronEntry",
    method: "DELETE",
    path: queuePath(queue, "cron", segment(name)),
    repeatable: false,
    read: readNothing,
  };
}
