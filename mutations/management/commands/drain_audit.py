"""Write the audit rows waiting in the spool directory to PostgreSQL now, and say how many."""

from __future__ import annotations

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import DatabaseError

from mutations.audit import audit_backlog_rows, audit_flush


class Command(BaseCommand):
    help = "Write every audit row spooled in INJECTOR_AUDIT_SPOOL_DIR (or --spool-dir) to the database now."

    def add_arguments(self, parser):
        parser.add_argument("--spool-dir", help="spool directory to drain (default: INJECTOR_AUDIT_SPOOL_DIR)")
        parser.add_argument("--timeout", type=float, default=60.0, help="give up after this many seconds")

    def handle(self, *args, spool_dir=None, timeout=60.0, **options):
        if timeout <= 0:
            raise CommandError("--timeout must be positive")
        if spool_dir:
            settings.INJECTOR_AUDIT_SPOOL_DIR = spool_dir
        pending = audit_backlog_rows()
        try:
            written = audit_flush(timeout_seconds=timeout)
        except (DatabaseError, TimeoutError) as exc:
            raise CommandError(
                f"{audit_backlog_rows()} audit rows stay spooled in {settings.INJECTOR_AUDIT_SPOOL_DIR}: {exc}"
            ) from exc
        left = audit_backlog_rows()
        self.stdout.write(f"{pending} rows were spooled; {written} written, {pending - written - left} already "
                          f"present; {left} left (held by running processes)")
