"""apply_migrations migrates like migrate, holding a lock other replicas wait on."""

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from injector_site.management.commands.apply_migrations import MIGRATION_LOCK_KEY, migration_database


@pytest.mark.django_db
def test_apply_migrations_reports_an_up_to_date_schema_and_releases_its_lock(capsys):
    call_command("apply_migrations", verbosity=1)
    assert "No migrations to apply" in capsys.readouterr().out
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %s",
                       [MIGRATION_LOCK_KEY & 0xFFFFFFFF])
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db
def test_the_models_and_the_migrations_agree(capsys):
    call_command("makemigrations", check=True, dry_run=True, verbosity=1)  # exits 1 when a migration is missing
    assert "No changes detected" in capsys.readouterr().out


def test_apply_migrations_behind_a_transaction_pooler_refuses_without_a_direct_connection(settings):
    settings.DB_POOL_MODE = "transaction"
    with pytest.raises(CommandError, match="set DATABASE_DIRECT_URL"):
        call_command("apply_migrations", verbosity=0)


def test_apply_migrations_uses_the_direct_connection_when_there_is_one(settings, monkeypatch):
    settings.DB_POOL_MODE = "transaction"
    monkeypatch.setitem(settings.DATABASES, "direct", {**settings.DATABASES["default"], "TEST": {"MIRROR": "default"}})
    assert migration_database() == "direct"
