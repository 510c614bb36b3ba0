// A call's signals, on a platform with `AbortSignal.any` and on one without (Node before
// 20.3): the client joins the caller's signal and the call's timeout by hand on both, so
// the caller's abort ends a call with its reason, the timeout with ConnectionFailed, and a
// call that has ended leaves no listener on the caller's signal.
import assert from "node:assert/strict";
import { getEventListeners } from "node:events";
import { after, before, describe, test } from "node:test";
import { Client, ConnectionFailed } from "hourglass-client";
import { within } from "./support/helpers.mjs";

const URL = "http://hourglass.test";
const NOTHING_DUE = { lock_id: null, messages: [] };

/** A fetch that never answers: it rejects when its signal aborts, as fetch does. */
function hanging() {
  const signals = [];
  const fetch = (_url, init) =>
    new Promise((_, reject) => {
      signals.push(init.signal);
      if (init.signal.aborted) reject(init.signal.reason);
      init.signal.addEventListener("abort", () => reject(init.signal.reason), { once: true });
    });
  return { fetch, signals };
}

for (const platform of ["AbortSignal.any", "no AbortSignal.any"]) {
  describe(`a call's signals, ${platform}`, () => {
    const own = Object.getOwnPropertyDescriptor(AbortSignal, "any");
    before(() => {
      if (platform === "no AbortSignal.any") delete AbortSignal.any;
    });
    after(() => Object.defineProperty(AbortSignal, "any", own));

    test("the platform is as named", () => {
      assert.equal(typeof AbortSignal.any, platform === "AbortSignal.any" ? "function" : "undefined");
    });

    test("the caller's abort ends the call with its reason", async () => {
      const { fetch, signals } = hanging();
      const cut = new AbortController();
      const polled = new Client(URL, { fetch }).poll("q", { wait: 20, signal: cut.signal });
      const reason = new Error("enough");
      cut.abort(reason);
      await assert.rejects(polled, (error) => error === reason);
      assert.equal(signals.length, 1);
      assert.notEqual(signals[0], cut.signal); // joined with the call's timeout
      assert.equal(signals[0].aborted, true);
      assert.equal(getEventListeners(cut.signal, "abort").length, 0);
    });

    test("a signal aborted already ends the call at once", async () => {
      const { fetch } = hanging();
      const reason = new Error("before");
      await assert.rejects(new Client(URL, { fetch }).poll("q", { signal: AbortSignal.abort(reason) }), (error) => error === reason);
    });

    test("the timeout ends the call with ConnectionFailed, the caller's signal let go", async () => {
      const { fetch, signals } = hanging();
      const cut = new AbortController();
      const polled = new Client(URL, { fetch, timeout: 0.05 }).poll("q", { signal: cut.signal });
      // AbortSignal.timeout's timer keeps no process alive: `within`'s does, meanwhile.
      await within(assert.rejects(polled, ConnectionFailed), "the call's timeout");
      assert.equal(cut.signal.aborted, false);
      assert.equal(signals[0].aborted, true);
      assert.equal(getEventListeners(cut.signal, "abort").length, 0);
    });

    test("an answered call lets go of the caller's signal", async () => {
      const cut = new AbortController();
      const fetch = async () => Response.json(NOTHING_DUE);
      const client = new Client(URL, { fetch });
      for (let index = 0; index < 3; index++) {
        assert.deepEqual(await client.poll("q", { signal: cut.signal }), NOTHING_DUE);
      }
      assert.equal(getEventListeners(cut.signal, "abort").length, 0);
    });
  });
}
