"""The console's pages and files (`/console/…`), and `/docs` and `/redoc` from vendored assets."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/console/static"

# The console's pages run only the package's own files: no inline script or style, no
# other origin, no frames, no plugins. Keys and payloads are user data; with this a
# slip that let one be read as HTML still could not run it.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
    "form-action 'self'"
)
_PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # The page is the same for every path and small; its scripts are cached apart.
    "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@cache
def _page(*path: str) -> str:
    """One of the package's HTML pages: the console's (static/index.html), whose script
    reads the path and draws the view, and the two API docs (pages/)."""
    return files(__package__).joinpath(*path).read_text(encoding="utf-8")


@router.get("/console")
async def console_redirect() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


@router.get("/console/")
@router.get("/console/{page:path}")
async def console_page(page: str = "") -> HTMLResponse:
    # Every path under /console/ is the same page: the queue and the key are read from
    # the address by the script, so a key holding `/` or spaces needs no route of its own.
    return HTMLResponse(_page("static", "index.html"), headers=_PAGE_HEADERS)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    # Swagger UI is started by static/docs/swagger-ui.js, not by an inline script.
    return HTMLResponse(_page("pages", "swagger-ui.html"))


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    # ReDoc is started by static/docs/redoc.js.
    return HTMLResponse(_page("pages", "redoc.html"))


def install_console(app: FastAPI) -> None:
    """Serve the console and the docs on `app` (created with docs_url=None, redoc_url=None)."""
    # The files first: the console's catch-all page would answer their paths too.
    app.mount(STATIC_URL, StaticFiles(packages=[(__package__, "static")]), name="console-static")
    app.include_router(router)
