"""Run `migrate` under a PostgreSQL advisory lock, so replicas starting together migrate one at a time.

The lock is a session lock: taken and released in one server session. Behind a transaction pooler
(DB_POOL_MODE=transaction) consecutive statements may run in different sessions, so the unlock could
miss and leave the lock held for every later replica. The command then runs on the `direct` database
(DATABASE_DIRECT_URL, a session on the primary that bypasses the pooler): docs/database-pooling.md.
"""

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from injector_site.platform.checks import squashed_partly_applied

# Any constant shared by every replica; the number only has to be the same for all of them.
MIGRATION_LOCK_KEY = 0x766F6C63616E6F  # "volcano"
DIRECT = "direct"


def migration_database() -> str:
    """The database alias migrations run on: `direct` when DATABASE_DIRECT_URL is set, else `default`."""
    if DIRECT in settings.DATABASES:
        return DIRECT
    if settings.DB_POOL_MODE == "transaction":
        raise CommandError(
            "DB_POOL_MODE=transaction: migrations need a session of their own (a session advisory lock); "
            "set DATABASE_DIRECT_URL (or DATABASE_DIRECT_URL_FILE) to a connection that bypasses the pooler"
        )
    return "default"


class Command(BaseCommand):
    help = "Apply database migrations, one replica at a time (the init container runs this)."

    def handle(self, *args, **options):
        verbosity = options["verbosity"]
        database = migration_database()
        connection = connections[database]
        partly = squashed_partly_applied(connection)
        if partly:
            raise CommandError(
                "this database stopped part of the way through migrations that this release has squashed: "
                + "; ".join(partly) + '. Migrate it with the previous release first (deploy/README.md, '
                '"The squashed migrations")')
        if connection.vendor != "postgresql":
            call_command("migrate", database=database, interactive=False, verbosity=verbosity)
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
            try:
                call_command("migrate", database=database, interactive=False, verbosity=verbosity)
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
