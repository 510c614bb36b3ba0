"""What the service's pages (the console, /docs, /redoc) are sent with: their
Content-Security-Policy and the other headers that keep a browser from running what it
should not."""

from __future__ import annotations

# Every page runs only the package's own files: no inline script or style, no other
# origin, no frames, no plugins. Keys and payloads are user data; with this a slip that
# let one be read as HTML still could not run it. `data:` images are the one source
# beyond 'self', for the icons Swagger UI's stylesheet draws as data: URLs (an image runs
# no script).
DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'none'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}


def _policy(directives: dict[str, str]) -> str:
    return "; ".join(f"{name} {sources}" for name, sources in directives.items())


CONTENT_SECURITY_POLICY = _policy(DIRECTIVES)

# Sent with every HTML answer of the service, whichever route gave it: the request edge
# adds each to any page that lacks it (app/api/edge.py), so no page goes without them.
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "same-origin",
}

# The two stylesheets ReDoc's bundle writes into the page as it loads, before it can be
# handed a nonce: perfect-scrollbar's (redoc 2.5.4), and the empty element it starts as.
# Hashes let in these texts and no other; a new ReDoc may bring other ones, which
# tests/browser/test_docs.py then reports with their hashes (the browser names them).
_REDOC_STYLE_HASHES = (
    "'sha256-QMIg+bpjm3JdElJ388KYke01izlUW0UoNOeKjpMxdgc=' "
    "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
)


def redoc_policy(style_nonce: str) -> str:
    """The pages' policy as far as /redoc needs it relaxed, with `style_nonce` new for
    every answer; scripts stay 'self' only, as on every page.

    - styles: ReDoc's components write their styles as `<style>` elements at run time,
      and without them it stops with an error. The elements given `style_nonce`
      (app/console/static/docs/redoc.js hands it to ReDoc) and the two fixed texts above
      are let in; an element any injected markup brought is not, as 'unsafe-inline'
      would let it.
    - workers: its search runs in a worker it makes from a `blob:` of its own code. Only
      a script already running can make one, and scripts are the package's own.
    """
    return _policy(
        {
            **DIRECTIVES,
            "style-src": f"'self' 'nonce-{style_nonce}' {_REDOC_STYLE_HASHES}",
            "worker-src": "'self' blob:",
        }
    )
