/**
 * hourglass-client: the TypeScript client and worker for Hourglass, the delayed-message
 * service. `Client` sends every /v1 operation (client.ts, built from operations/);
 * errors.ts maps problem+json answers to errors; worker/ runs a handler per message.
 */

export { Client, DEFAULT_URL, MAX_BATCH, VERSION, backoff, type ClientOptions } from "./client.js";
export * from "./errors.js";
export type * from "./types.js";
export { Worker, type WorkerOptions } from "./worker/worker.js";
export { Retry, type Handler, type HandlerContext } from "./worker/handlers.js";
export { stderrLogger, type Logger } from "./worker/logger.js";
