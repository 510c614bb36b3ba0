"""The console's pages and files (`/console/…`), and `/docs` and `/redoc` from vendored assets."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from fastapi import APIRouter, FastAPI
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles

STATIC_URL = "/console/static"
_VENDOR_URL = f"{STATIC_URL}/vendor"
_FAVICON_URL = f"{STATIC_URL}/favicon.svg"

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
def _page() -> str:
    """The console's one HTML page: its script reads the path and draws the view."""
    return files(__package__).joinpath("static", "index.html").read_text(encoding="utf-8")


@router.get("/console")
async def console_redirect() -> RedirectResponse:
    return RedirectResponse("/console/", status_code=307)


@router.get("/console/")
@router.get("/console/{page:path}")
async def console_page(page: str = "") -> HTMLResponse:
    # Every path under /console/ is the same page: the queue and the key are read from
    # the address by the script, so a key holding `/` or spaces needs no route of its own.
    return HTMLResponse(_page(), headers=_PAGE_HEADERS)


@router.get("/docs")
async def swagger_ui() -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url="/openapi.json",
        title="Hourglass API",
        swagger_js_url=f"{_VENDOR_URL}/swagger-ui/swagger-ui-bundle.js",
        swagger_css_url=f"{_VENDOR_URL}/swagger-ui/swagger-ui.css",
        swagger_favicon_url=_FAVICON_URL,
        # No badge fetched from validator.swagger.io: the docs reach no other host.
        swagger_ui_parameters={"validatorUrl": None},
    )


@router.get("/redoc")
async def redoc() -> HTMLResponse:
    return get_redoc_html(
        openapi_url="/openapi.json",
        title="Hourglass API",
        redoc_js_url=f"{_VENDOR_URL}/redoc/redoc.standalone.js",
        redoc_favicon_url=_FAVICON_URL,
        with_google_fonts=False,
    )


def install_console(app: FastAPI) -> None:
    """Serve the console and the docs on `app` (created with docs_url=None, redoc_url=None)."""
    # The files first: the console's catch-all page would answer their paths too.
    app.mount(STATIC_URL, StaticFiles(packages=[(__package__, "static")]), name="console-static")
    app.include_router(router)
