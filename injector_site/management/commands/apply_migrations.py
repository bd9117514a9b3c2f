"""Run `migrate` under a PostgreSQL advisory lock, so replicas starting together migrate one at a time."""

from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connection

# Any constant shared by every replica; the number only has to be the same for all of them.
MIGRATION_LOCK_KEY = 0x766F6C63616E6F  # "volcano"


class Command(BaseCommand):
    help = "Apply database migrations, one replica at a time (the init container runs this)."

    def handle(self, *args, **options):
        verbosity = options["verbosity"]
        if connection.vendor != "postgresql":
            call_command("migrate", interactive=False, verbosity=verbosity)
            return
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK_KEY])
            try:
                call_command("migrate", interactive=False, verbosity=verbosity)
            finally:
                cursor.execute("SELECT pg_advisory_unlock(%s)", [MIGRATION_LOCK_KEY])
