"""Browser tests: the real ASGI server (uvicorn) and Debian's Chromium through Playwright."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread; the ORM calls the tests make
# between browser steps are plain synchronous code all the same.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

BASE_DIR = Path(__file__).resolve().parents[2]
# Debian's chromium-headless-shell (what .ci/run installs): the same Blink without the
# desktop browser around it, a third less CPU over the browser tests than `chromium`
# (145 against 222 s, tests/e2e on three workers). Else Debian's chromium.
CHROMIUM = os.environ.get("CHROMIUM_PATH") or next(
    (p for p in ("/usr/bin/chromium-headless-shell", "/usr/bin/chromium") if Path(p).exists()),
    "/usr/bin/chromium-headless-shell",
)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = BASE_DIR / "var" / "screenshots"


# Package-scoped, not session-scoped: Playwright's sync API runs an event loop in this thread
# while the browser is open, and the other tests that run on this pytest-xdist worker after the
# browser tests (tests/parallel.py) call asyncio.run(), which refuses a running loop.
@pytest.fixture(scope="package")
def browser():
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}; install Debian's chromium-headless-shell")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


EXPECTED_CONSOLE_ERRORS = ("Failed to load resource", "htmx:sendAbort", "htmx:afterRequest")


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    errors: list[str] = []
    # Script errors, CSP violations and broken subresources fail the test. A page answered
    # with 403 or 404 on purpose is a document, and the test asserts on it itself. htmx logs
    # a request it aborted on purpose (a filter form's newer change replaces the one on its
    # way, hx-sync) as an error; that is not one. A request that failed still logs sendError.
    page.on(
        "console",
        lambda m: (
            m.type == "error"
            and not m.text.startswith(EXPECTED_CONSOLE_ERRORS)
            and errors.append(m.text)
        ),
    )
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "response",
        lambda r: (
            r.status >= 400
            and r.request.resource_type != "document"
            and not r.request.headers.get("hx-request")
            and errors.append(f"{r.status} {r.url}")
        ),
    )
    yield page
    context.close()
    # A CSP violation or a script error is a failure, not noise.
    assert not errors, errors


def htmx_settled(page) -> None:
    """Wait until htmx has no request on its way and has settled what it swapped in: until
    then a swapped-in form has no listeners, so a change made in it is not sent."""
    page.wait_for_function(
        "() => !document.querySelector("
        "'.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')"
    )


def screenshot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
