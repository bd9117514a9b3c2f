"""The operators' UI as a person uses it, over HTTP: logged in as staff (session cookie, CSRF)."""

from __future__ import annotations

import html
import http.cookiejar
import re
import urllib.parse
import urllib.request


class StaffSession:
    """A logged-in staff session on the UI (cookies, CSRF), as a person uses the dashboard."""

    def __init__(self, port: int, username: str, password: str) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.cookies = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies))
        page = self.get("/admin/login/?next=/dashboard/").decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode({"username": username, "password": password, "next": "/dashboard/",
                                       "csrfmiddlewaretoken": token}).encode()
        with self.opener.open(f"{self.base}/admin/login/?next=/dashboard/", form, timeout=30) as response:
            assert response.url.endswith("/dashboard/"), "logged in and sent on to the dashboard"

    def get(self, path: str) -> bytes:
        with self.opener.open(self.base + path, timeout=60) as response:
            assert response.status == 200, path
            return response.read()

    def post_form(self, path: str, fields: dict[str, str]) -> str:
        """Submit a form as the browser would (CSRF token from the cookie); returns the URL it ended on."""
        token = next(c.value for c in self.cookies if c.name == "csrftoken")
        form = urllib.parse.urlencode({**fields, "csrfmiddlewaretoken": token}).encode()
        with self.opener.open(self.base + path, form, timeout=60) as response:
            return response.url


def page_of(response, *, status: int = 200) -> str:
    """A Django test response's page as a person reads it (entities decoded), after checking its status."""
    assert response.status_code == status, (response.status_code, status)
    return html.unescape(response.content.decode())


# A link to an admission's page: its id, and the UTC day that finds its partition (AdmissionAudit.get_absolute_url).
ADMISSION_LINK = re.compile(r'href="/dashboard/admissions/(\d+)/(?:\?day=[0-9-]+)?"')


def admission_ids(page: str) -> list[int]:
    """The admissions a page links to, each once, in the order they first appear."""
    return list(dict.fromkeys(int(i) for i in ADMISSION_LINK.findall(page)))
