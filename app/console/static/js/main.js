// The console: reads the address, draws its page (the queues, a queue, a message) and
// keeps it drawn — live refreshes, the token form on a 401, the banner while the
// database or the service is away, and retries until they are back.

import { ApiError, Unreachable, forgetToken, keepToken, storedToken } from "./api.js";
import { fill, h, link } from "./dom.js";
import { messagePage } from "./views/message.js";
import { overviewPage } from "./views/overview.js";
import { queuePage } from "./views/queue/index.js";

const view = document.getElementById("view");
const crumbs = document.getElementById("crumbs");
const banner = document.getElementById("banner");
const tokenSection = document.getElementById("token");
const tokenForm = document.getElementById("token-form");
const tokenError = document.getElementById("token-error");
const forgetButton = document.getElementById("forget-token");

// While the database or the service is away, a page that could not load tries again
// after the service's Retry-After (1 s), and at most this often.
const RETRY_MILLISECONDS = 1000;

/** The page at `pathname` and what its address names; null when there is no such page. */
function route(pathname) {
  let match;
  if (/^\/console\/?$/.test(pathname)) {
    return { page: overviewPage, params: {} };
  }
  if ((match = /^\/console\/queues\/([^/]+)\/?$/.exec(pathname))) {
    return { page: queuePage, params: { queue: decodeURIComponent(match[1]) } };
  }
  // The key is the rest of the address, `/` included (an encoded key has %2F there).
  if ((match = /^\/console\/queues\/([^/]+)\/messages\/(.+)$/.exec(pathname))) {
    return {
      page: messagePage,
      params: { queue: decodeURIComponent(match[1]), key: decodeURIComponent(match[2]) },
    };
  }
  return null;
}

let current = null; // the page shown: its AbortController, so a new one ends its work

/** Draw the page the address names, ending whatever the previous one was doing. */
async function show() {
  current?.controller.abort();
  const controller = new AbortController();
  const shown = { controller };
  current = shown;
  tokenSection.hidden = true;
  view.hidden = false;
  forgetButton.hidden = !storedToken();
  let found;
  try {
    found = route(window.location.pathname);
  } catch {
    found = null; // an address whose parts do not decode (a lone %)
  }
  if (found === null) {
    title("Not found");
    setCrumbs([]);
    fill(view, state("No such page", "The console has the queues, a queue and a message; this address is none of them."));
    return;
  }
  const notice = window.history.state?.notice;
  if (notice) {
    window.history.replaceState(null, "", window.location.href); // shown once, not on Back
  }
  const context = {
    root: view,
    params: found.params,
    query: new URLSearchParams(window.location.search),
    signal: controller.signal,
    title,
    crumbs: setCrumbs,
    navigate,
    notice: notice ? h("p", { className: "notice", role: "status" }, notice) : null,
    every: (milliseconds, refresh) => every(shown, milliseconds, refresh),
    failed: (error) => failed(shown, error),
  };
  try {
    await found.page(context);
  } catch (error) {
    failed(shown, error);
  }
}

/** Run `refresh` every `milliseconds` while `shown` is the page shown (never two at once). */
function every(shown, milliseconds, refresh) {
  const signal = shown.controller.signal;
  const next = () => {
    if (!signal.aborted) {
      setTimeout(tick, milliseconds);
    }
  };
  const tick = async () => {
    if (signal.aborted) return;
    try {
      await refresh();
    } catch (error) {
      // While the database is away the banner says so and the page keeps what it
      // showed; the next refresh shows the queues again once it is back.
      if (!(error instanceof Unreachable || error?.databaseUnavailable)) {
        failed(shown, error);
        return;
      }
    }
    next();
  };
  next();
}

/** What to show when `shown` could not load: the token form, a retry, or why not. */
function failed(shown, error) {
  if (shown !== current || error?.name === "AbortError") {
    return; // the person has moved on
  }
  if (error instanceof ApiError && error.status === 401) {
    askForToken(storedToken() ? "The service refused that token." : null);
    return;
  }
  if (error instanceof Unreachable || error?.databaseUnavailable) {
    title("Unavailable");
    fill(
      view,
      state(
        error instanceof Unreachable ? "The service does not answer" : "Database unavailable",
        "The console tries again every second and shows this page as soon as it can.",
      ),
    );
    const wait = Math.max(RETRY_MILLISECONDS, (error.retryAfter || 0) * 1000);
    setTimeout(() => shown === current && show(), wait);
    return;
  }
  if (error instanceof ApiError && error.status === 403) {
    title("Forbidden");
    fill(view, state("Forbidden", error.message, "This token may use only some queues; the queue list shows which."));
    return;
  }
  if (error instanceof ApiError) {
    title(error.problem.title || "Error");
    fill(view, state(`${error.status} ${error.problem.title || "Error"}`, error.message));
    return;
  }
  title("Error");
  fill(view, state("Something went wrong", String(error?.message || error)));
  throw error; // a fault of the console's own: let it reach the browser's console too
}

/** A page-sized state: a heading and sentences, then a way back to the queues. */
function state(heading, ...sentences) {
  return h(
    "section",
    { className: "state" },
    h("h1", {}, heading),
    sentences.map((sentence) => h("p", {}, sentence)),
    h("p", {}, link("/console/", "← All queues")),
  );
}

function title(text) {
  document.title = `${text} · Hourglass`;
}

/** The trail above the page: [label, href] pairs, the last one (the page) without href. */
function setCrumbs(items) {
  fill(
    crumbs,
    items.map(([label, href], index) => [
      index > 0 ? h("span", { className: "sep", "aria-hidden": "true" }, "›") : null,
      href ? link(href, label) : h("span", { className: "here" }, label),
    ]),
  );
}

/** Go to `href` inside the console; `notice` is shown once at the top of the next page. */
function navigate(href, { notice = null, replace = false } = {}) {
  const stateObject = notice ? { notice } : null;
  if (replace) {
    window.history.replaceState(stateObject, "", href);
  } else {
    window.history.pushState(stateObject, "", href);
  }
  show();
}

function askForToken(problem) {
  current?.controller.abort();
  title("Token needed");
  setCrumbs([]);
  view.hidden = true;
  tokenSection.hidden = false;
  tokenError.hidden = !problem;
  fill(tokenError, problem || "");
  forgetToken();
  forgetButton.hidden = true;
  document.getElementById("token-input").focus();
}

tokenForm.addEventListener("submit", (event) => {
  event.preventDefault();
  const input = document.getElementById("token-input");
  keepToken(input.value.trim());
  input.value = "";
  show();
});

forgetButton.addEventListener("click", () => {
  forgetToken();
  show();
});

// Links inside the console change the page without reloading it.
document.addEventListener("click", (event) => {
  const anchor = event.target.closest("a[data-link]");
  if (!anchor || event.defaultPrevented || event.button !== 0) return;
  if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
  event.preventDefault();
  navigate(anchor.getAttribute("href"));
});

window.addEventListener("popstate", show);

// The banner follows every answer: shown while the database (503) or the service is
// away, gone with the first answer after.
window.addEventListener("hourglass:health", (event) => {
  const health = event.detail;
  banner.hidden = health === "ok";
  if (health === "database-unavailable") {
    fill(document.getElementById("banner-title"), "Database unavailable.");
    fill(document.getElementById("banner-text"), "The service cannot reach its database (503); the console keeps trying and shows what it last read.");
  } else if (health === "unreachable") {
    fill(document.getElementById("banner-title"), "The service does not answer.");
    fill(document.getElementById("banner-text"), "The console keeps trying and shows what it last read.");
  }
});

show();
