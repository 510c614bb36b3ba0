// /redoc: ReDoc on the service's own schema, started from this file rather than by the
// <redoc> tag, to hand it the nonce its style elements need under the page's
// Content-Security-Policy: the one this script was sent with (app/console/policy.py).
// Loaded with `defer` after the bundle: the page is parsed and Redoc defined.
"use strict";

Redoc.init("/openapi.json", { nonce: document.currentScript.nonce }, document.getElementById("redoc"));
