"""The console's pages and files (`/console/…`), and `/docs` and `/redoc` from vendored assets."""

from __future__ import annotations

import secrets
from functools import cache
from importlib.resources import files

from fastapi import APIRouter, FastAPI
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

from app.console.policy import redoc_policy

STATIC_URL = "/console/static"

# The pages are small and the same for every path; their scripts are cached apart.
_PAGE_CACHING = {"Cache-Control": "no-cache"}

router = APIRouter(include_in_schema=False)


@cache
def _page(name: str) -> str:
    """One of the package's HTML pages (app/console/pages/): the console's, whose script
    reads the path and draws the view, and the two API docs."""
    return files(__package__).joinpath("pages", name).read_text(encoding="utf-8")


@router.get("/console")
async def console_redirect() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


@router.get("/console/")
@router.get("/console/{page:path}")
async def console_page(page: str = "") -> HTMLResponse:
    # Every path under /console/ is the same page: the queue and the key are read from
    # the address by the script, so a key holding `/` or spaces needs no route of its own.
    # (/console/static/… is the files' mount, matched first.)
    return HTMLResponse(_page("console.html"), headers=_PAGE_CACHING)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    # Swagger UI is started by static/docs/swagger-ui.js, not by an inline script.
    return HTMLResponse(_page("swagger-ui.html"), headers=_PAGE_CACHING)


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    # ReDoc is started by static/docs/redoc.js, which hands it the answer's style nonce.
    nonce = secrets.token_urlsafe(18)
    page = _page("redoc.html").replace("{style_nonce}", nonce)
    policy = {"Content-Security-Policy": redoc_policy(nonce)}
    return HTMLResponse(page, headers={**_PAGE_CACHING, **policy})


def install_console(app: FastAPI) -> None:
    """Serve the console and the docs on `app` (created with docs_url=None, redoc_url=None)."""
    # The files first: the console's catch-all page would answer their paths too. The
    # pages are not among them (they are in pages/, not static/): a page is served at its
    # own address only. /console/static/index.html, the console's page served from here
    # once, is a 404 rather than a redirect to /console/: no link leads there, and a file
    # of static/ answers at more spellings than one (StaticFiles resolves `js/../x`), so
    # the page is kept out of the folder rather than turned away at one of them.
    app.mount(STATIC_URL, StaticFiles(packages=[(__package__, "static")]), name="console-static")
    app.include_router(router)
