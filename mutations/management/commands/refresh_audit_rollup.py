"""Recount the overview's rollups from the audit table (after editing them by hand, or to check them)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from mutations.audit import audit_rollup_rebuild


class Command(BaseCommand):
    help = ("The overview's rollups are kept by every write to the audit table; --rebuild recounts them from the "
            "table, one day per transaction.")

    def add_arguments(self, parser):
        parser.add_argument("--lock-timeout-ms", type=int, default=30_000,
                            help="How long each day's recount waits for the audit writers (default 30000).")
        parser.add_argument("--rebuild", action="store_true",
                            help="Recount both rollups from the audit table (after editing them by hand).")

    def handle(self, *args, lock_timeout_ms: int, rebuild: bool, **options):
        if not rebuild:
            self.stdout.write("the rollups are kept by every write to the audit table: nothing to count "
                              "(--rebuild recounts them from the table)")
            return
        started = time.monotonic()
        counted = audit_rollup_rebuild(lock_timeout_ms=lock_timeout_ms)
        self.stdout.write(f"counted {counted} audit rows into the rollups, {time.monotonic() - started:.1f} s")
