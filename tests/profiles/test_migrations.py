"""profiles.0004: plaintext DRF tokens become digests, and the tokens scripts hold keep working."""

import hashlib

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from rest_framework.test import APIClient

from profiles.models import ApiToken


def migrate(target):
    """Migrate profiles to target; the models as of then, with the users and DRF's tokens as they are."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target, ("authtoken", "0004_alter_tokenproxy_options")]).apps


@pytest.mark.django_db(transaction=True, serialized_rollback=True)
def test_plaintext_tokens_are_hashed_and_keep_working():
    key = "0123456789abcdef0123456789abcdef01234567"
    try:
        apps = migrate(("profiles", "0002_default_presets"))
        user = apps.get_model("auth", "User").objects.create(username="ci-bot", is_staff=True)
        apps.get_model("authtoken", "Token").objects.create(key=key, user_id=user.id)
        apps = migrate(("profiles", "0004_api_tokens"))
        assert not apps.get_model("authtoken", "Token").objects.exists()  # no plaintext key left
        row = ApiToken.objects.get()
        assert row.digest == hashlib.sha256(key.encode()).hexdigest() and len(row.prefix) < len(key)
        assert row.expires_at is not None
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        assert client.get("/api/v1/presets/").status_code == 200
    finally:
        executor = MigrationExecutor(connection)
        migrate(max(node for node in executor.loader.graph.leaf_nodes() if node[0] == "profiles"))
