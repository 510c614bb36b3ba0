// /docs: Swagger UI on the service's own schema. A file of its own, not an inline script,
// so that the page runs under the pages' Content-Security-Policy (app/console/policy.py).
// Loaded with `defer` after the bundle: the page is parsed and SwaggerUIBundle defined.
"use strict";

SwaggerUIBundle({
  url: "/openapi.json",
  dom_id: "#swagger-ui",
  layout: "BaseLayout",
  deepLinking: true,
  showExtensions: true,
  showCommonExtensions: true,
  // No badge fetched from validator.swagger.io: the docs reach no other host.
  validatorUrl: null,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
});
