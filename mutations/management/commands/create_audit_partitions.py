"""Create the audit table's day partitions ahead (and behind), on PostgreSQL."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError
from django.db import connection, transaction

from mutations.audit.partitions import DAYS_AHEAD, DAYS_BEHIND, audit_partitions_create, audit_uid_indexes_trim


class Command(BaseCommand):
    help = ("Create the audit table's missing day partitions from --days-behind days ago to --days-ahead days "
            "ahead (the writers do this every INJECTOR_AUDIT_PARTITION_CHECK_SECONDS too).")

    def add_arguments(self, parser):
        parser.add_argument("--days-ahead", type=int, default=DAYS_AHEAD,
                            help=f"Days after today (UTC) to create (default {DAYS_AHEAD}).")
        parser.add_argument("--days-behind", type=int, default=DAYS_BEHIND,
                            help=f"Days before today (UTC) to create (default {DAYS_BEHIND}); rows of those days "
                                 "waiting in the DEFAULT partition move into them.")

    def handle(self, *args, days_ahead: int, days_behind: int, **options):
        if not 0 <= days_ahead <= 366:
            raise CommandError(f"--days-ahead {days_ahead} is out of range: use 0 to 366")
        if not 0 <= days_behind <= 3660:
            raise CommandError(f"--days-behind {days_behind} is out of range: use 0 to 3660")
        if connection.vendor != "postgresql":
            raise CommandError("create_audit_partitions needs PostgreSQL (the audit table is partitioned there only)")
        with transaction.atomic(), connection.cursor() as cursor:
            created = audit_partitions_create(cursor, days_behind=days_behind, days_ahead=days_ahead)
        days = ", ".join(d.isoformat() for d in created) or "none missing"
        self.stdout.write(f"created {len(created)} audit partitions: {days}")
        with transaction.atomic(), connection.cursor() as cursor:  # as the writer does, after the days are made
            dropped = audit_uid_indexes_trim(cursor)
        if dropped:
            self.stdout.write(f"dropped the uid index (replay check) of {len(dropped)} older days: "
                              f"{', '.join(d.isoformat() for d in dropped)}")
