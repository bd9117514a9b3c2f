"""The squashed migrations (mutations 0001_squashed_0021_audit, profiles 0001_squashed_0007_configuration, issue 29)
make what the chain they replace made, and a database that chain migrated upgrades with nothing to do.

The reference is tests/fixtures/schema/: an empty database migrated by the old chain before it was deleted,
read by tests.support.schema (pg_dump --schema-only and every row, normalised).
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.conf import settings

from mutations.audit import partitions
from tests.support.schema import schema_dump, seeded_rows
from tests.support.servers import REPO, VENV_BIN, database_drop

FIXTURES = REPO / "tests" / "fixtures" / "schema"
SQUASHED = {"mutations": "0001_squashed_0021_audit", "profiles": "0001_squashed_0007_configuration"}


def database_url(name: str) -> str:
    db = settings.DATABASES["default"]
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


def manage(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(VENV_BIN / "python"), "manage.py", *args], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "DATABASE_URL": url, "INJECTOR_DEV_MODE": "true"}, timeout=300)


def same_text(actual: str, expected: str, what: str) -> None:
    diff = list(difflib.unified_diff(expected.splitlines(), actual.splitlines(), "old chain", "squashed", lineterm=""))
    assert not diff, f"{what} differs from the old chain's:\n" + "\n".join(diff[:80])


def migrate_to_the_squashed(url: str) -> None:
    """Every other app's migrations, and ours up to the squashed ones (not the migrations added after them)."""
    done = manage(url, "shell", "-c", OTHER_APPS_MIGRATE)
    assert done.returncode == 0, done.stdout + done.stderr
    for app, name in SQUASHED.items():
        done = manage(url, "migrate", app, name, "--noinput")
        assert done.returncode == 0, done.stdout + done.stderr


def migrations_after_the_squash() -> set[tuple[str, str]]:
    """Our migrations written after the squash (neither squashed nor replaced): an upgrade applies these."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    squashed = set(SQUASHED.items())
    replaced = {key for key in squashed for key in loader.disk_migrations[key].replaces}
    return {key for key in loader.disk_migrations if key[0] in SQUASHED and key not in squashed | replaced}


@pytest.fixture(scope="module")
def squashed_database():
    """An empty database migrated by the squashed migrations (and no later one)."""
    url = database_url(f"volcano_injector_squashed_{os.getpid()}")
    database_drop(url)
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{url.rsplit("/", 1)[1]}"')
    migrate_to_the_squashed(url)
    try:
        yield url
    finally:
        database_drop(url)


def test_a_new_database_gets_the_old_chains_schema(squashed_database):
    same_text(schema_dump(squashed_database), (FIXTURES / "schema.sql").read_text(), "the schema")


def test_a_new_database_gets_the_old_chains_rows_and_sequences(squashed_database):
    """GPU models, presets, the `*` policy, the language-model catalog, configuration version 1, and the change
    log's ids starting above it (its sequence at 1)."""
    same_text(seeded_rows(squashed_database), (FIXTURES / "rows.json").read_text(), "the rows")


def test_the_squashed_migrations_reverse_to_nothing_and_make_the_same_again(squashed_database):
    for app in ("mutations", "profiles"):
        done = manage(squashed_database, "migrate", app, "zero", "--noinput")
        assert done.returncode == 0, done.stderr
    with psycopg.connect(squashed_database) as conn:
        left = conn.execute("SELECT relname FROM pg_class WHERE relname ~ '^(mutations|profiles)_' UNION ALL "
                            "SELECT proname FROM pg_proc WHERE proname LIKE 'mutations%'").fetchall()
    assert left == []
    migrate_to_the_squashed(squashed_database)
    same_text(schema_dump(squashed_database), (FIXTURES / "schema.sql").read_text(), "the schema made again")


OTHER_APPS_MIGRATE = """
from django.core.management import call_command
from django.db.migrations.loader import MigrationLoader
apps = {app for app, _ in MigrationLoader(None, ignore_no_migrations=True).disk_migrations} - {"mutations", "profiles"}
for app in sorted(apps):
    call_command("migrate", app, verbosity=0)
"""


def schema_load(url: str, *, today=None) -> None:
    """Django's and other apps' tables by their migrations, then ours as the old chain left them (the fixture,
    its partitions named for today)."""
    done = manage(url, "shell", "-c", OTHER_APPS_MIGRATE)
    assert done.returncode == 0, done.stdout + done.stderr
    first = (today or datetime.now(UTC).date()) - timedelta(days=partitions.DAYS_BEHIND)

    def day(offset: str):
        return first + timedelta(days=int(offset))

    sql = (FIXTURES / "schema.sql").read_text()
    sql = re.sub(r"\(day \+(\d+)\)", lambda m: f"('{day(m[1]):%Y-%m-%d} 00:00:00+00')", sql)
    sql = re.sub(r"mutations_admissionaudit_p\+(\d+)", lambda m: partitions.partition_name(day(m[1])), sql)
    done = subprocess.run(["psql", "-v", "ON_ERROR_STOP=1", "-q", url], input=sql, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr


def old_chain_applied(url: str) -> None:
    """Record every migration the squashed ones replace as applied, as the old chain's database has them."""
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    rows = [key for app, name in SQUASHED.items() for key in loader.disk_migrations[app, name].replaces]
    with psycopg.connect(url) as conn:
        conn.cursor().executemany("INSERT INTO django_migrations (app, name, applied) VALUES (%s, %s, now())", rows)


@pytest.fixture
def old_chain_database():
    """A database as the old chain left it: its schema, and django_migrations naming every replaced migration."""
    url = database_url(f"volcano_injector_old_chain_{os.getpid()}")
    database_drop(url)
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{url.rsplit("/", 1)[1]}"')
    try:
        schema_load(url)
        old_chain_applied(url)
        yield url
    finally:
        database_drop(url)


def test_a_database_the_old_chain_migrated_is_up_to_date(old_chain_database):
    # Compared with itself before: a schema loaded from a dump deparses some CHECKs a little differently.
    before = schema_dump(old_chain_database)
    for app, name in SQUASHED.items():
        check = manage(old_chain_database, "migrate", app, name, "--check")
        assert check.returncode == 0, check.stdout + check.stderr
    shown = manage(old_chain_database, "showmigrations", "mutations", "profiles").stdout
    for name in SQUASHED.values():
        assert re.search(rf"\[[-X]\] {name} ", shown), shown
    # What an upgrade still has to apply is only what was written after the squash.
    unapplied = set(re.findall(r"^ \[ \] (\S+)", shown, re.M))
    assert unapplied == {name for _, name in migrations_after_the_squash()}, shown
    for app, name in SQUASHED.items():
        applied = manage(old_chain_database, "migrate", app, name, "--noinput")
        assert applied.returncode == 0 and "No migrations to apply" in applied.stdout, applied.stdout + applied.stderr
    with psycopg.connect(old_chain_database) as conn:
        recorded = {app for (app,) in conn.execute(
            "SELECT app FROM django_migrations WHERE name = ANY(%s)", [list(SQUASHED.values())])}
        seeded = conn.execute("SELECT count(*) FROM profiles_preset").fetchone()[0]
    assert recorded == set(SQUASHED)  # Django records the squashed migrations as applied: nothing ran
    assert seeded == 0  # not even the seeding (this schema came without rows)
    assert schema_dump(old_chain_database) == before


def test_a_database_part_of_the_way_through_the_old_chain_is_refused_with_what_to_do(old_chain_database):
    with psycopg.connect(old_chain_database) as conn:
        conn.execute("DELETE FROM django_migrations WHERE app = 'mutations' AND name >= '0020'")
    migrated = manage(old_chain_database, "migrate")  # by hand, a system check refuses it
    assert migrated.returncode != 0 and "volcano_injector.E002" in migrated.stderr, migrated.stdout + migrated.stderr
    done = manage(old_chain_database, "apply_migrations")  # the init container's command
    assert done.returncode != 0
    assert "0020_audit_would_deny_namespace_index, 0021_audit_uid_index_on_recent_days not applied" in done.stderr
    assert "previous release first" in done.stderr and "The squashed migrations" in done.stderr
