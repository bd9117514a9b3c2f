"""The project's system checks speak up when settings would hurt in production."""

import pytest
from django.core.checks import run_checks
from django.db import connection

from injector_site.platform import checks


def ids(**kwargs):
    return {message.id for message in run_checks(include_deployment_checks=True, **kwargs)}


def test_sqlite_outside_dev_mode_is_flagged(settings, monkeypatch):
    settings.DEV_MODE = False
    # Read the database engine through a stand-in: the test database itself must stay PostgreSQL.
    monkeypatch.setattr(checks, "settings", type("S", (), {
        "DEV_MODE": False, "DATABASES": {"default": {"ENGINE": "django.db.backends.sqlite3"}}})())
    assert [m.id for m in checks.check_production_database(None)] == ["volcano_injector.W001"]


def test_postgresql_in_production_is_not_flagged(settings):
    settings.DEV_MODE = False
    assert "volcano_injector.W001" not in ids()


def test_unwritable_spool_dir_is_an_error(settings, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    settings.INJECTOR_AUDIT_SPOOL_DIR = str(blocker / "spool")
    assert "volcano_injector.E001" in ids()


def test_metrics_without_token_is_flagged_until_one_is_set(settings):
    settings.METRICS_TOKEN = ""
    assert "volcano_injector.W002" in ids()
    settings.METRICS_TOKEN = "token"
    assert "volcano_injector.W002" not in ids()


def test_a_transaction_pooler_without_a_direct_url_is_flagged(settings, monkeypatch):
    settings.DB_POOL_MODE = "transaction"
    assert "volcano_injector.W003" in ids()
    # A direct database, through a stand-in: the test's own connections must stay as they are.
    monkeypatch.setattr(checks, "settings", type("S", (), {
        "DB_POOL_MODE": "transaction", "DATABASES": {"default": {}, "direct": {}}})())
    assert checks.check_pooler_has_a_direct_connection(None) == []


@pytest.mark.django_db
def test_a_database_part_of_the_way_through_squashed_migrations_is_an_error():
    with connection.cursor() as cursor:  # as a database stopped after mutations 0001 of the old chain
        cursor.execute("DELETE FROM django_migrations WHERE app = 'mutations'")
        cursor.execute("INSERT INTO django_migrations (app, name, applied) VALUES ('mutations', '0001_initial', now())")
    [error] = checks.check_squashed_migrations_complete(None, databases=["default"])
    assert error.id == "volcano_injector.E002"
    assert "0002_audit_history" in error.msg and "0021_audit_uid_index_on_recent_days" in error.msg
    assert "previous release first" in error.hint


@pytest.mark.django_db
def test_a_database_migrated_by_the_squashed_migrations_passes():
    assert checks.check_squashed_migrations_complete(None, databases=["default"]) == []
