"""Count every audit row not yet in the overview's hourly rollup (after an upgrade, or from a CronJob)."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from mutations.audit.rollup import ROLLUP_REFRESH_MAX_ROWS, audit_rollup_refresh, audit_rollup_reset


class Command(BaseCommand):
    help = ("Count audit rows added since the last refresh into the overview's hourly rollup, until none "
            f"is left. The overview does this for at most {ROLLUP_REFRESH_MAX_ROWS} rows per page by itself.")

    def add_arguments(self, parser):
        parser.add_argument("--lock-timeout-ms", type=int, default=5000,
                            help="How long each step waits for the audit writers' transactions (default 5000).")
        parser.add_argument("--rebuild", action="store_true",
                            help="Empty the rollup first and count every audit row again (after editing it by hand).")

    def handle(self, *args, lock_timeout_ms: int, rebuild: bool, **options):
        started = time.monotonic()
        if rebuild:
            audit_rollup_reset()  # the overview counts from the audit table until the steps below are done
        total = steps = 0
        while True:
            counted = audit_rollup_refresh(lock_timeout_ms=lock_timeout_ms)
            if not counted:
                break
            total += counted
            steps += 1
        self.stdout.write(f"counted {total} audit rows into the rollup in {steps} steps, "
                          f"{time.monotonic() - started:.1f} s")
