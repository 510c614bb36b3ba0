// /redoc: ReDoc on the service's own schema, started from this file rather than by an
// inline script. Loaded with `defer` after the bundle: the page is parsed and Redoc defined.
"use strict";

Redoc.init("/openapi.json", {}, document.getElementById("redoc"));
