"""GET /api/v1/ lists every endpoint of the API with its address, instead of a 404."""

import pytest
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def test_the_api_root_lists_every_endpoint(django_user_model):
    client = APIClient()
    client.force_authenticate(django_user_model.objects.create_user("reader", is_staff=True))
    response = client.get("/api/v1/")
    assert response.status_code == 200
    assert response.json() == {
        name: f"http://testserver/api/v1/{path}" for name, path in [
            ("presets", "presets/"), ("gpu-models", "gpu-models/"), ("namespace-policies", "namespace-policies/"),
            ("models", "models/"), ("changes", "changes/"), ("gpu-nodes", "gpu-nodes/"), ("preview", "preview/"),
            ("impact", "impact/"),
            ("audit", "audit/"),
        ]
    }


def test_the_api_root_asks_a_stranger_to_authenticate():
    assert APIClient().get("/api/v1/").status_code in (401, 403)
