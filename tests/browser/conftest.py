"""Headless Chromium (Debian's /usr/bin/chromium) driven by Playwright; scripts/install-browser.sh installs both."""

import os
import pathlib

import pytest
from django.db import connections

CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
ARTIFACTS = pathlib.Path(__file__).resolve().parents[2] / "test-artifacts"
LAUNCH_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]


@pytest.fixture
def page(browser_page):
    """A fresh browser page, 1440x900; closed after the test."""
    return browser_page(1440, 900)


@pytest.fixture
def browser_page():
    """A factory of fresh browser pages at a viewport size (width, height); all closed after the test."""
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/install-browser.sh (scripts/test does)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="run scripts/install-browser.sh")
    # Playwright's sync API keeps an event loop on this thread; the test's own ORM calls are still
    # synchronous and safe, and the live server answers from its own thread.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    ARTIFACTS.mkdir(exist_ok=True)
    try:
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
            contexts = []

            def new_page(width: int, height: int, **options):
                context = browser.new_context(viewport={"width": width, "height": height}, **options)
                context.set_default_timeout(15_000)
                contexts.append(context)
                return context.new_page()

            try:
                yield new_page
            finally:
                # The test's ORM calls made while Playwright's loop runs get database connections of their own
                # (its greenlet's context): closed here, or they keep the test database open past the session
                # and pytest-django cannot drop it. Browser tests are transactional (live_server), so closing
                # loses no transaction.
                connections.close_all()
            for context in contexts:
                context.close()
            browser.close()
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous
