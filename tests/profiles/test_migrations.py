"""profiles.0004: plaintext DRF tokens become digests, and the tokens scripts hold keep working."""

import hashlib
import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.db import connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from profiles.models import ApiToken

MIGRATION = importlib.import_module("profiles.migrations.0004_api_tokens")


@pytest.mark.django_db
def test_plaintext_tokens_are_hashed_and_keep_working(django_user_model):
    key = "0123456789abcdef0123456789abcdef01234567"
    user = django_user_model.objects.create_user("ci-bot", is_staff=True)
    Token.objects.create(key=key, user=user)  # as the previous release stored it
    MIGRATION.hash_plaintext_tokens(apps, SimpleNamespace(connection=connection))
    assert not Token.objects.exists()  # no plaintext key left
    row = ApiToken.objects.get()
    assert row.user == user and row.digest == hashlib.sha256(key.encode()).hexdigest()
    assert len(row.prefix) < len(key) and row.expires_at is not None
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    assert client.get("/api/v1/presets/").status_code == 200


def test_the_migration_runs_the_hashing_forwards_and_nothing_backwards():
    [run_python] = [op for op in MIGRATION.Migration.operations if hasattr(op, "code")]
    assert run_python.code is MIGRATION.hash_plaintext_tokens


CHANGE_LOG = importlib.import_module("profiles.migrations.0007_change_log")


@pytest.mark.django_db
def test_after_the_upgrade_versions_keep_going_up_from_the_old_counter():
    """profiles.0007: the change log's ids, which become the version, start above the version a database had."""
    from profiles.models import ConfigVersion, ObjectChange, Preset

    ConfigVersion.objects.filter(pk=1).update(version=5000)  # an older release's counter after many changes
    CHANGE_LOG.start_ids_above_the_version(apps, SimpleNamespace(connection=connection))
    preset = Preset.objects.get(name="llm-7b")
    preset.vgpu_cores_percent = 30
    preset.save()
    change = ObjectChange.objects.latest("id")
    assert change.pk > 5000 and ConfigVersion.objects.get(pk=1).version == change.pk
