"""System checks for rules that span settings (run by `manage.py check` and at server start)."""

import os

from django.conf import settings
from django.core.checks import Error, Tags, Warning, register
from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder


@register(Tags.database, deploy=True)
def check_production_database(app_configs, **kwargs):
    """Outside dev mode the audit record must live in PostgreSQL, not the embedded SQLite file."""
    engine = settings.DATABASES["default"]["ENGINE"]
    if not settings.DEV_MODE and engine.endswith("sqlite3"):
        return [Warning(
            "No PostgreSQL is configured: audit rows go to a local SQLite file that each replica keeps to itself.",
            hint="Set DATABASE_URL (or DB_HOST, DB_NAME, DB_USER, DB_PASSWORD) to the PostgreSQL database.",
            id="volcano_injector.W001",
        )]
    return []


@register()
def check_audit_spool_dir(app_configs, **kwargs):
    """Answered admissions wait in the spool directory: it must be writable when auditing is on."""
    if not settings.INJECTOR_AUDIT_ENABLED:
        return []
    path = settings.INJECTOR_AUDIT_SPOOL_DIR
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as exc:
        return [Error(f"INJECTOR_AUDIT_SPOOL_DIR {path!r} cannot be created: {exc}",
                      hint="Mount a writable volume (an emptyDir) there.", id="volcano_injector.E001")]
    if not os.access(path, os.W_OK | os.X_OK):
        return [Error(f"INJECTOR_AUDIT_SPOOL_DIR {path!r} is not writable by this user.",
                      hint="Mount a writable volume (an emptyDir) there.", id="volcano_injector.E001")]
    return []


@register(deploy=True)
def check_metrics_protection(app_configs, **kwargs):
    """Metrics name namespaces and presets: say so when anyone who reaches the port can read them."""
    if not settings.METRICS_TOKEN:
        return [Warning(
            "/metrics is readable without a token.",
            hint="Set METRICS_TOKEN (or METRICS_TOKEN_FILE) or keep the NetworkPolicy that limits who reaches "
                 "the port (deploy/README.md).",
            id="volcano_injector.W002",
        )]
    return []


@register(Tags.database)
def check_pooler_has_a_direct_connection(app_configs, **kwargs):
    """Behind a transaction pooler, apply_migrations needs DATABASE_DIRECT_URL (a session for its lock)."""
    if settings.DB_POOL_MODE == "transaction" and "direct" not in settings.DATABASES:
        return [Warning(
            "DB_POOL_MODE=transaction without DATABASE_DIRECT_URL: apply_migrations will refuse to run.",
            hint="Set DATABASE_DIRECT_URL (or DATABASE_DIRECT_URL_FILE) to a connection to the primary that "
                 "bypasses the pooler (docs/database-pooling.md).",
            id="volcano_injector.W003",
        )]
    return []


def squashed_partly_applied(connection) -> list[str]:
    """The squashed migrations of which a database applied some replaced migrations but not all, each with what
    it lacks. Django then sees neither the squashed migration nor the missing ones (their files are gone) and
    says there is nothing to apply: such a database must first be migrated by the release that still has them."""
    # The files only, no graph: a graph without replacements needs every dependency's file, and a migration
    # added after the squash may depend on a replaced one (Django remaps it when it builds its own graph).
    loader = MigrationLoader(None, load=False)
    loader.load_disk()
    applied = set(MigrationRecorder(connection).applied_migrations())
    problems = []
    for key, migration in sorted(loader.disk_migrations.items()):
        replaced = list(migration.replaces or ())
        missing = [name for app, name in replaced if (app, name) not in applied]
        if key not in applied and 0 < len(missing) < len(replaced):
            problems.append(f"{key[0]}: {', '.join(missing)} not applied ({key[1]} replaces them)")
    return problems


@register(Tags.database)
def check_squashed_migrations_complete(app_configs, databases=None, **kwargs):
    """`manage.py migrate` (and `check --database`) refuse a database part of the way through squashed
    migrations; apply_migrations asks squashed_partly_applied itself (call_command runs no checks)."""
    errors = []
    for alias in databases or ():
        try:
            partly = squashed_partly_applied(connections[alias])
        except DatabaseError:
            continue  # not reachable: the command that needs it says so
        if partly:
            errors.append(Error(
                f"Database {alias!r} stopped part of the way through migrations this release has squashed: "
                + "; ".join(partly) + ".",
                hint='Migrate it with the previous release first (deploy/README.md, "The squashed migrations").',
                id="volcano_injector.E002",
            ))
    return errors
