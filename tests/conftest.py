"""Shared fixtures: a fresh configuration cache per test, and a client that posts AdmissionReviews."""

import json

import pytest

from profiles.selectors import catalog_cache


@pytest.fixture(autouse=True)
def fresh_catalog_cache():
    """Each test reads configuration from its own database state, not a previous test's cache."""
    catalog_cache.invalidate()
    yield
    catalog_cache.invalidate()


@pytest.fixture
def post_review(client):
    """POST an AdmissionReview body to /mutate and return the HTTP response."""

    def post(body, content_type="application/json"):
        data = body if isinstance(body, (str, bytes)) else json.dumps(body)
        return client.post("/mutate", data=data, content_type=content_type)

    return post
